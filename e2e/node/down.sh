#!/usr/bin/env bash
# Stops the node up.sh started in DIR and puts the host back as up.sh found it:
#
#   e2e/node/down.sh DIR
#
# Processes (by recorded pid, only while their command line still names DIR), the Pods'
# sandboxes (through CRI: CNI DEL), containerd's shims and anything left in the node's
# kubepods cgroups; mounts under DIR; the kubepods cgroups; the KUBE-*/CNI-* iptables chains
# and the rules that jump to them, and the nft tables that were not there before; the
# bridge, the Pods' routing rule and table; the sysctls the kubelet and up.sh changed; the
# fixed paths the components created outside DIR. Then it compares the host with the
# snapshot up.sh took and exits 1 naming what still differs (0: restored). Safe to run
# twice, after a failed start, and from the watchdog. DIR itself (logs) stays.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
T0=$(now_ms)
[[ $# -eq 1 ]] || { log "usage: $0 DIR"; exit 2; }
[[ -d "$1" ]] || { log "$1: no such directory (nothing to tear down)"; exit 0; }
DIR="$(cd "$1" && pwd)"
R="$DIR/run"
BASE="$DIR/baseline"
[[ -d "$BASE" ]] || { log "$DIR has no baseline: up.sh never started there"; exit 0; }
B="$(cat "$R/bin-dir" 2>/dev/null || true)"
CD="$R/containerd"
el() { echo "+$(( ($(now_ms) - T0) / 1000 ))s"; }

ours() { # ours PID : alive and its command line names DIR
  local cmdline
  cmdline="$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)" || return 1
  [[ -n "$cmdline" && ( "$cmdline" == *"$DIR/"* || "$cmdline" == *"$DIR "* ) ]]
}
pid_of() { awk -v n="$1" '$1 == n {p = $2} END {print p}' "$DIR/pids" 2>/dev/null; }
stop() { # stop NAME : SIGTERM, SIGKILL after 10 s
  local name=$1 pid i
  pid="$(pid_of "$name")"
  [[ -n "$pid" && "$pid" != "$$" && "$pid" != "$PPID" ]] || return 0
  ours "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 100); do ours "$pid" || break; sleep 0.1; done
  if ours "$pid"; then kill -KILL "$pid" 2>/dev/null; log "killed $name ($pid) $(el)"; else log "stopped $name ($pid) $(el)"; fi
}

# ---- 1. processes ------------------------------------------------------------------------------
stop watchdog
stop kube-proxy
if [[ -x "$B/kube-proxy" ]]; then
  timeout 30 "$B/kube-proxy" --cleanup --v=0 >/dev/null 2>&1 && log "kube-proxy --cleanup $(el)"
fi
stop kubelet
stop kube-scheduler
stop kube-controller-manager
if [[ -S "$CD/containerd.sock" && -x "$B/crictl" ]] && ours "$(pid_of containerd)"; then
  # force-remove every sandbox: stops its containers and runs CNI DEL (veth, IPAM, chains)
  timeout 60 "$B/crictl" --runtime-endpoint "unix://$CD/containerd.sock" --timeout 20s rmp --force --all >/dev/null 2>&1 \
    && log "removed the Pods' sandboxes $(el)"
fi
stop containerd
kill_matching() { # kill_matching DESC PREDICATE : SIGKILL each process the predicate names
  local desc=$1 pred=$2 p n=0
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ "$p" == "$$" ]] && continue
    "$pred" "$p" || continue
    kill -KILL "$p" 2>/dev/null && n=$((n + 1))
  done
  (( n == 0 )) || log "killed $n $desc $(el)"
}
is_our_shim() { local c; c="$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)" || return 1; [[ "$c" == *containerd-shim* && "$c" == *"$CD/"* ]]; }
in_kubepods() { grep -q '/kubepods' "/proc/$1/cgroup" 2>/dev/null; }
kill_matching "containerd shims" is_our_shim
# No other kubelet ran when up.sh started (it refuses otherwise): kubepods is ours.
if [[ ! -s "$BASE/cgroups" ]]; then kill_matching "processes left in kubepods" in_kubepods; fi
stop kube-apiserver
stop etcd
sleep 0.5

# ---- 2. mounts and cgroups ----------------------------------------------------------------------
# only new mounts under DIR or under the fixed paths (never someone else's)
under_ours() {
  local m p
  while IFS= read -r m; do
    for p in "$DIR" "${FIXED_PATHS[@]}"; do [[ "$m" == "$p"/* ]] && { echo "$m"; break; }; done
  done
}
for i in 1 2 3; do
  mapfile -t ms < <(awk '{print $2}' /proc/mounts | grep -xvFf "$BASE/mounts" | under_ours | sort -r)
  (( ${#ms[@]} )) || break
  for m in "${ms[@]}"; do
    m="$(printf '%b' "$m")"   # /proc/mounts escapes spaces as \040
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
done
if [[ ! -s "$BASE/cgroups" ]]; then
  for i in 1 2 3 4 5; do
    left=0
    for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
      [[ -d "$c" ]] || continue
      find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
      [[ -d "$c" ]] && left=1
    done
    (( left )) || break
    sleep 1
  done
fi

# ---- 3. iptables and nft ------------------------------------------------------------------------
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null || continue
  for t in filter nat mangle raw security; do
    "$ipt"-save -t "$t" >/dev/null 2>&1 || continue
    mapfile -t chains < <("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-P" || $1 == "-N" {print $2}')
    # rules in other chains that jump to ours, by number, last first
    for ch in "${chains[@]}"; do
      [[ "$ch" =~ $OUR_CHAINS ]] && continue
      mapfile -t nums < <("$ipt" -t "$t" -S "$ch" 2>/dev/null | awk -v re="-[jg] (KUBE|CNI)-" '$1 == "-A" {n++; if ($0 ~ re) print n}' | sort -rn)
      for n in "${nums[@]}"; do "$ipt" -t "$t" -D "$ch" "$n" 2>/dev/null; done
    done
    for ch in "${chains[@]}"; do [[ "$ch" =~ $OUR_CHAINS ]] && "$ipt" -t "$t" -F "$ch" 2>/dev/null; done
    for ch in "${chains[@]}"; do [[ "$ch" =~ $OUR_CHAINS ]] && "$ipt" -t "$t" -X "$ch" 2>/dev/null; done
  done
done
if command -v nft >/dev/null; then
  # tables the components created (iptables-nft makes one per table it touches): gone when
  # nothing is left in them but empty base chains
  while read -r _ fam name; do
    [[ -n "$name" ]] || continue
    grep -qxF "table $fam $name" "$BASE/nft-tables" && continue
    if [[ "$name" == kube-proxy ]] || ! nft list table "$fam" "$name" 2>/dev/null | grep -vE '^\s*(table |chain |type |policy |\}|$)' >/dev/null; then
      nft delete table "$fam" "$name" 2>/dev/null && log "deleted nft table $fam $name"
    fi
  done < <(nft list tables 2>/dev/null)
fi

# ---- 4. links, routing -------------------------------------------------------------------------
# veths still on the bridge (a sandbox CRI could not remove), then the bridge
for l in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//'); do
  ip link del "$l" 2>/dev/null && log "deleted leftover link $l"
done
ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE" && log "deleted link $BRIDGE"
# (grep without -q: it reads all of `ip rule show`, whose SIGPIPE would otherwise fail the
# pipeline under pipefail and leave the rule behind on a busy machine)
while ip rule show | grep "^$ROUTE_PRIORITY:" >/dev/null; do ip rule del priority "$ROUTE_PRIORITY" || break; done
ip route flush table "$ROUTE_TABLE" 2>/dev/null

# ---- 5. sysctls -----------------------------------------------------------------------------------
while IFS= read -r line; do
  [[ "$line" =~ $SYSCTL_RESTORE ]] || continue
  key="${line%% = *}"
  want="${line#* = }"
  [[ "$(sysctl -n "$key" 2>/dev/null)" == "$want" ]] && continue
  sysctl -qw "$key=$want" 2>/dev/null && log "restored $key = $want"
done < "$BASE/sysctls"

# ---- 6. paths outside DIR ----------------------------------------------------------------------
for p in "${FIXED_PATHS[@]}"; do
  [[ -e "$p" || -L "$p" ]] || continue
  grep -qxF "$p" "$BASE/paths" && continue
  rm -rf "$p" 2>/dev/null && log "removed $p"
done

# ---- 7. compare with the snapshot --------------------------------------------------------------
if [[ "$(cat "$MARKER_DIR/dir" 2>/dev/null)" == "$DIR" ]]; then rm -f "$MARKER_DIR/dir"; rmdir "$MARKER_DIR" 2>/dev/null; fi
: > "$DIR/pids"
snapshot "$DIR/after"
differs=0
# sysctls: a key of the baseline that changed; keys that appeared with a kernel module the
# node loaded (nf_conntrack, br_netfilter, ...) are listed, not counted
# (a key may have several lines, e.g. kernel.core_modes: values are compared as one list)
changed="$(awk -F' = ' 'NR == FNR {want[$1] = want[$1] "|" $2; next} {got[$1] = got[$1] "|" $2}
  END {for (k in got) if ((k in want) && want[k] != got[k]) print k ": " substr(want[k], 2) " -> " substr(got[k], 2)}' \
  "$BASE/sysctls" "$DIR/after/sysctls")"
if [[ -n "$changed" ]]; then differs=1; log "sysctls differ from before up.sh:"; sed 's/^/[node]   /' <<< "$changed" | head -n 20 >&2; fi
new_keys="$(awk -F' = ' 'NR == FNR {seen[$1] = 1; next} !($1 in seen) {print $1}' "$BASE/sysctls" "$DIR/after/sysctls" | sort -u | wc -l)"
(( new_keys == 0 )) || log "note: $new_keys sysctl keys appeared (kernel modules the node loaded stay loaded)"
for f in iptables ip6tables nft-tables links routes rules mounts cgroups paths; do
  if ! diff -q "$BASE/$f" "$DIR/after/$f" >/dev/null 2>&1; then
    differs=1
    log "host differs from before up.sh: $f"
    diff "$BASE/$f" "$DIR/after/$f" | sed 's/^/[node]   /' | head -n 20 >&2
  fi
done
left=""
for p in /proc/[0-9]*; do p=${p#/proc/}; [[ "$p" != "$$" && "$p" != "$PPID" ]] && ours "$p" && left+=" $p"; done
if [[ -n "$left" ]]; then differs=1; log "processes naming $DIR still run:$left"; fi
if (( differs )); then log "down: done with differences $(el)"; exit 1; fi
log "down: host restored $(el)"
