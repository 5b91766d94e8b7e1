#!/usr/bin/env bash
# Builds OPA and the bench's Go driver for the agenthooks vs OPA bench (bench/README.md):
#   opa                 OPA's own command (`opa run --server`), from its Go module
#   opa-bench-driver    driver/main.go: the policy evaluated in process with OPA's Go API
# both from this directory's module (go.mod requires github.com/open-policy-agent/opa at
# OPA_VERSION; `tool` names OPA's main package, so both use the same dependency versions),
# into a cache outside the repository, keyed by version:
#   ~/.cache/agenthooks/opa-v<OPA_VERSION>/     (root: $AGENTHOOKS_CACHE)
# A no-op when both are there (the driver is rebuilt when its sources changed: their
# sha256 is kept next to it). Prints the directory on stdout (last line).
#   --cached   print the directory if both are built and current, else exit 1; build nothing
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
# The version go.mod requires: one place to change it.
OPA_VERSION="$(sed -n 's#^require github.com/open-policy-agent/opa v\(.*\)$#\1#p' "$HERE/go.mod")"
[[ -n "$OPA_VERSION" ]] || { echo "[opa] no 'require github.com/open-policy-agent/opa vX' line in $HERE/go.mod" >&2; exit 1; }
CACHE_ROOT="${AGENTHOOKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agenthooks}"
OUT="$CACHE_ROOT/opa-v${OPA_VERSION}"

log() { echo "[opa] $*" >&2; }

driver_sum="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/driver/main.go" | sha256sum | cut -d' ' -f1)"
opa_ok() { [[ -x "$OUT/opa" ]]; }
driver_ok() { [[ -x "$OUT/opa-bench-driver" && "$(cat "$OUT/driver.sha256" 2>/dev/null)" == "$driver_sum" ]]; }

if opa_ok && driver_ok; then
  log "cached: $OUT"
  echo "$OUT"
  exit 0
fi
if [[ "${1:-}" == "--cached" ]]; then
  log "not built (or the driver changed): run bash e2e/opa/build.sh"
  exit 1
fi

command -v go >/dev/null || { log "the Go toolchain (>= 1.26, OPA ${OPA_VERSION}'s go.mod) is required"; exit 1; }
mkdir -p "$OUT"
cd "$HERE"
t0=$(date +%s)
if ! opa_ok; then
  log "building opa v${OPA_VERSION} with $(go version | cut -d' ' -f3) (a few minutes on 2 cores)"
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/opa.tmp" github.com/open-policy-agent/opa
  mv "$OUT/opa.tmp" "$OUT/opa"
fi
if ! driver_ok; then
  log "building opa-bench-driver"
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/opa-bench-driver.tmp" ./driver
  mv "$OUT/opa-bench-driver.tmp" "$OUT/opa-bench-driver"
  echo "$driver_sum" > "$OUT/driver.sha256"
fi
log "built in $(( $(date +%s) - t0 ))s: $OUT ($("$OUT/opa" version 2>/dev/null | head -1))"
echo "$OUT"
