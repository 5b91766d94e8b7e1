#!/usr/bin/env bash
# Stops the control plane that start.sh started in DIR.
#
#   stop.sh DIR
#
# Only the processes listed in DIR/pids are signalled, and only if their command line still
# mentions DIR (so a recycled pid is never hit). SIGTERM first, SIGKILL after 10 s.
# DIR itself (logs, data) is left in place. Safe to run twice.
set -uo pipefail

log() { echo "[controlplane] $*" >&2; }
[[ $# -eq 1 ]] || { log "usage: $0 DIR"; exit 2; }
[[ -d "$1" ]] || { log "$1: no such directory (nothing to stop)"; exit 0; }
DIR="$(cd "$1" && pwd)"
[[ -s "$DIR/pids" ]] || { log "$DIR/pids missing or empty (nothing to stop)"; exit 0; }

ours() { # pid is alive and its command line names DIR
  local cmdline
  [[ -r "/proc/$1/cmdline" ]] || return 1
  cmdline="$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)" || return 1
  [[ "$cmdline" == *"$DIR"* ]]
}

# Stop order: watchdog (unless it is the one calling us), kube-apiserver, then etcd.
declare -A pid_of=()
while read -r name pid; do
  [[ -n "${name:-}" && -n "${pid:-}" ]] && pid_of[$name]=$pid
done < "$DIR/pids"

for name in watchdog kube-apiserver etcd; do
  pid="${pid_of[$name]:-}"
  [[ -n "$pid" ]] || continue
  [[ "$pid" == "$PPID" || "$pid" == "$$" ]] && continue
  ours "$pid" || continue
  kill -TERM "$pid" 2>/dev/null || continue
  for _ in $(seq 1 100); do
    ours "$pid" || break
    sleep 0.1
  done
  if ours "$pid"; then
    log "$name ($pid) did not exit after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  log "stopped $name ($pid)"
done
