//! The per-run supervisor: a process between the spawner and `sh` that adopts every
//! orphan of the run and kills them all when the run ends (CONTRACT §10.1).
//!
//! [`install`] puts a `pre_exec` hook on the `sh` command. After the spawner's `fork`, the
//! child (the *supervisor*, S) makes itself a child subreaper
//! (`prctl(PR_SET_CHILD_SUBREAPER)`), forks again, and the grandchild (G) goes on to
//! `exec sh` in a process group of its own. S never returns to the spawner's code: it
//! closes every file descriptor it inherited (so it holds no pipe end of this or any
//! other run), then waits:
//!
//! * when `sh` (G) exits, S kills what is left of the tree and exits with G's status
//!   (a signal death is re-raised on itself, so the spawner sees the same status);
//! * on `SIGTERM`/`SIGINT`/`SIGHUP` (the spawner's timeout or cancellation, or the
//!   spawner dying: `PR_SET_PDEATHSIG`), S kills the whole tree and exits 125;
//! * past its own backstop deadline (the hook timeout plus a grace, should the spawner
//!   never say), the same.
//!
//! "Kill the tree" is: `SIGKILL` to G's process group, then, until `waitpid` says S has
//! no child left at all (`ECHILD`), `SIGKILL` to every process whose parent is S. Because
//! S is a subreaper, a `setsid` or double-forked descendant is reparented to S when its
//! parent dies, so it is found on the next pass; `ECHILD` therefore means the whole tree
//! is gone. This needs no privilege and no namespace.
//!
//! Everything S runs is async-signal-safe: the spawner may be multi-threaded (tokio), so
//! after `fork` only raw system calls are allowed — no allocation, no locks, no panics.

use std::io;
use std::time::Duration;

/// Exit status of the supervisor when it was told to stop (or its backstop passed) and
/// killed the run: the spawner has already decided the run's outcome by then.
pub const EXIT_CANCELLED: i32 = 125;

/// Longest time the supervisor spends killing a tree before it gives up (a process in an
/// uninterruptible sleep cannot be reaped; it is left to init).
const KILL_BUDGET_MS: i64 = 5_000;

/// A uid/gid the run's `sh` switches to before `exec` (only when the spawner is root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// Makes `cmd` start under a supervisor (see the module docs). `backstop` is the most
/// time the supervisor lets the run live if nobody tells it to stop; `run_as` switches
/// `sh` to that uid/gid (supplementary groups dropped) before `exec`.
///
/// Do not combine with `process_group` or `kill_on_drop` on `cmd`: the group is set up
/// for `sh` here, and `SIGKILL` to the supervisor would let the tree escape; send it
/// `SIGTERM` instead.
///
/// Errors of the hook (seen by the spawner as a spawn error): the kernel refusing
/// `PR_SET_CHILD_SUBREAPER` or `fork`, or `run_as` failing. A run never starts
/// unsupervised.
pub fn install(cmd: &mut tokio::process::Command, backstop: Duration, run_as: Option<RunAs>) {
    let backstop_ms = i64::try_from(backstop.as_millis()).unwrap_or(i64::MAX / 2);
    // SAFETY: the closure runs in the forked child; it calls only async-signal-safe
    // system calls and does not allocate (see `supervisor_main`).
    unsafe {
        cmd.pre_exec(move || pre_exec(backstop_ms, run_as));
    }
}

/// The `pre_exec` body: runs in the forked child S; returns only in the grandchild G.
fn pre_exec(backstop_ms: i64, run_as: Option<RunAs>) -> io::Result<()> {
    // SAFETY: plain system calls on values owned here; no memory is shared.
    unsafe {
        let spawner = libc::getppid();
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let set = signal_set();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        // Children must be waitable whatever the spawner did with SIGCHLD.
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGCHLD, &dfl, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
        if libc::getppid() != spawner {
            // The spawner is gone already: nothing to run for.
            libc::_exit(EXIT_CANCELLED);
        }
        let g = libc::fork();
        if g < 0 {
            return Err(io::Error::last_os_error());
        }
        if g == 0 {
            // G: becomes `sh`.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            // What the run creates is its own: no file of it is readable by another run
            // (or another uid) unless the hook says so with chmod.
            libc::umask(0o077);
            if let Some(who) = run_as
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(who.gid) != 0
                    || libc::setuid(who.uid) != 0)
            {
                return Err(io::Error::last_os_error());
            }
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            return Ok(());
        }
        supervisor_main(g, backstop_ms)
    }
}

/// The signals the supervisor waits for (kept blocked, taken with `sigtimedwait`).
fn signal_set() -> libc::sigset_t {
    // SAFETY: initialises a local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Milliseconds on the monotonic clock.
fn now_ms() -> i64 {
    // SAFETY: clock_gettime writes into a local timespec.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts.tv_sec.saturating_mul(1000) + ts.tv_nsec / 1_000_000
    }
}

/// Waits up to `ms` for one of [`signal_set`]; the signal number, or 0 on timeout.
fn wait_signal(ms: i64) -> i32 {
    let ms = ms.clamp(0, 60_000);
    // SAFETY: sigtimedwait on a local set and timespec.
    unsafe {
        let set = signal_set();
        let ts = libc::timespec {
            tv_sec: (ms / 1000) as libc::time_t,
            tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
        };
        let r = libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
        if r < 0 { 0 } else { r }
    }
}

/// The supervisor's life after forking G; never returns.
///
/// # Safety
/// Runs in a forked child of a possibly multi-threaded process.
unsafe fn supervisor_main(g: libc::pid_t, backstop_ms: i64) -> ! {
    // SAFETY: see the function's contract; only system calls follow.
    unsafe {
        close_all_fds();
        let deadline = now_ms().saturating_add(backstop_ms);
        let mut g_status: Option<libc::c_int> = None;
        loop {
            // Reap whatever exited; note G's status.
            loop {
                let mut st: libc::c_int = 0;
                let r = libc::waitpid(-1, &mut st, libc::WNOHANG);
                if r == g {
                    g_status = Some(st);
                } else if r <= 0 {
                    break;
                }
            }
            if g_status.is_some() {
                break;
            }
            let left = deadline - now_ms();
            if left <= 0 {
                kill_tree(g);
                libc::_exit(EXIT_CANCELLED);
            }
            match wait_signal(left) {
                libc::SIGTERM | libc::SIGINT | libc::SIGHUP => {
                    kill_tree(g);
                    libc::_exit(EXIT_CANCELLED);
                }
                _ => {}
            }
        }
        kill_tree(g);
        mirror(g_status.unwrap_or(0))
    }
}

/// Exits with the status `st` of `sh`: the same exit code, or the same signal.
unsafe fn mirror(st: libc::c_int) -> ! {
    // SAFETY: system calls only.
    unsafe {
        if libc::WIFSIGNALED(st) {
            let sig = libc::WTERMSIG(st);
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &all, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(libc::WEXITSTATUS(st))
    }
}

/// Closes every inherited descriptor (0 up), so the supervisor holds no pipe end.
unsafe fn close_all_fds() {
    // SAFETY: closing descriptors this process owns; nothing in it uses them.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) == 0 {
            return;
        }
        let mut lim: libc::rlimit = std::mem::zeroed();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(1 << 16) as i32
        } else {
            1024
        };
        for fd in 0..max {
            libc::close(fd);
        }
    }
}

/// Kills G's group and every child of this process until none is left (`ECHILD`), or
/// [`KILL_BUDGET_MS`] passed.
unsafe fn kill_tree(g: libc::pid_t) {
    // SAFETY: system calls only; the pids signalled are our own children, which cannot
    // be recycled before we reap them (only this loop reaps).
    unsafe {
        let me = libc::getpid();
        let give_up = now_ms() + KILL_BUDGET_MS;
        loop {
            libc::kill(-g, libc::SIGKILL);
            for_each_child(me, |pid| {
                libc::kill(pid, libc::SIGKILL);
            });
            loop {
                let mut st: libc::c_int = 0;
                let r = libc::waitpid(-1, &mut st, libc::WNOHANG);
                if r > 0 {
                    continue;
                }
                if r < 0 && *libc::__errno_location() == libc::ECHILD {
                    return;
                }
                break;
            }
            if now_ms() > give_up {
                return;
            }
            wait_signal(5);
        }
    }
}

/// Calls `f` with every pid in `/proc` whose parent is `me`, without allocating.
unsafe fn for_each_child(me: libc::pid_t, mut f: impl FnMut(libc::pid_t)) {
    // SAFETY: reads /proc into stack buffers with bounds-checked indexing.
    unsafe {
        let dir = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return;
        }
        let mut buf = [0u8; 8192];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break;
            }
            let n = n as usize;
            let mut off = 0usize;
            // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
            while off + 19 < n {
                let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
                if reclen == 0 || off + reclen > n {
                    break;
                }
                let name = &buf[off + 19..off + reclen];
                let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                if let Some(pid) = parse_pid(&name[..len])
                    && pid != me
                    && parent_of(&name[..len]) == Some(me)
                {
                    f(pid);
                }
                off += reclen;
            }
        }
        libc::close(dir);
    }
}

/// Digits to a pid; `None` for anything else.
fn parse_pid(s: &[u8]) -> Option<libc::pid_t> {
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    let mut v: i64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(b - b'0');
    }
    libc::pid_t::try_from(v).ok()
}

/// The parent pid from `/proc/<pid>/stat` (`pid (comm) state ppid ...`), or `None`.
unsafe fn parent_of(pid: &[u8]) -> Option<libc::pid_t> {
    let mut path = [0u8; 32];
    let prefix = b"/proc/";
    let suffix = b"/stat\0";
    if prefix.len() + pid.len() + suffix.len() > path.len() {
        return None;
    }
    path[..prefix.len()].copy_from_slice(prefix);
    path[prefix.len()..prefix.len() + pid.len()].copy_from_slice(pid);
    path[prefix.len() + pid.len()..prefix.len() + pid.len() + suffix.len()].copy_from_slice(suffix);
    let mut stat = [0u8; 1024];
    // SAFETY: open/read/close on a NUL-terminated path and a local buffer.
    let n = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return None;
    }
    let stat = &stat[..n as usize];
    let close = stat.iter().rposition(|&b| b == b')')?;
    // ") S PPID "
    let rest = stat.get(close + 2..)?;
    let mut fields = rest.split(|&b| b == b' ');
    let _state = fields.next()?;
    parse_pid(fields.next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_parse_only_from_digits() {
        assert_eq!(parse_pid(b"1"), Some(1));
        assert_eq!(parse_pid(b"4194304"), Some(4_194_304));
        assert_eq!(parse_pid(b"self"), None);
        assert_eq!(parse_pid(b""), None);
        assert_eq!(parse_pid(b"12a"), None);
        assert_eq!(parse_pid(b"99999999999"), None);
    }

    #[test]
    fn parent_of_reads_proc_stat() {
        let me = std::process::id().to_string();
        let parent = unsafe { parent_of(me.as_bytes()) };
        assert_eq!(parent, Some(unsafe { libc::getppid() }));
        assert_eq!(unsafe { parent_of(b"999999999") }, None);
    }

    #[test]
    fn for_each_child_finds_a_child_of_ours() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let mut found = Vec::new();
        unsafe { for_each_child(libc::getpid(), |p| found.push(p)) };
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            found.contains(&(child.id() as i32)),
            "{found:?} lacks {}",
            child.id()
        );
    }
}
