/*
 * The sandbox ("pause") process of every Pod on the harness node: holds the Pod's
 * namespaces, reaps orphans (it is PID 1 of the Pod when the PID namespace is shared) and
 * exits 0 on SIGTERM or SIGINT. Built static by e2e/node/build.sh; no registry image needed.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
	(void)sig;
	_exit(0);
}

static void on_child(int sig) {
	(void)sig;
	while (waitpid(-1, 0, WNOHANG) > 0) {
	}
}

int main(void) {
	struct sigaction stop = {0}, child = {0};
	stop.sa_handler = on_stop;
	child.sa_handler = on_child;
	child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
	sigaction(SIGTERM, &stop, 0);
	sigaction(SIGINT, &stop, 0);
	sigaction(SIGCHLD, &child, 0);
	for (;;)
		pause();
}
