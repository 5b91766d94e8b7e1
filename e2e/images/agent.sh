#!/usr/bin/env bash
# Builds the tests' "agent" image, agenthooks.test/agent:1, as an OCI archive: a static
# busybox (sh, wget, nc, nslookup, timeout, ...) that the chart tier's agent Pods run to call
# the dispatcher (e2e/src/node/agent.rs). e2e/node/up.sh imports it into its node; for
# another cluster, load it there (e.g. `kind load image-archive OUT.tar`).
#
#   e2e/images/agent.sh BUSYBOX OUT.tar      BUSYBOX: a statically linked busybox binary
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "[agent-image] ERROR: $*" >&2; exit 1; }
[[ $# -eq 2 ]] || die "usage: $0 BUSYBOX OUT.tar"
[[ -x "$1" ]] || die "$1: no busybox binary"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/etc" "$work/tmp"
chmod 1777 "$work/tmp"
install -m 0755 "$1" "$work/bin/busybox"
for a in sh cat echo printf sleep timeout wget nc nslookup grep sed tr env touch rm mkdir head tail wc cut ls date seq test awk; do
  ln -s busybox "$work/bin/$a"
done
printf 'root:x:0:0::/:/bin/sh\nagent:x:1000:1000::/tmp:/bin/sh\n' > "$work/etc/passwd"
"$HERE/oci-archive.sh" "$work" agenthooks.test/agent:1 "$2" \
  '{"Env":["PATH=/bin"],"Entrypoint":["/bin/sh"],"User":"1000:1000"}'
