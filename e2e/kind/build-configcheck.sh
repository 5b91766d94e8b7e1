#!/usr/bin/env bash
# Builds e2e/kind/configcheck (kind's own v1alpha4 config types, sigs.k8s.io/kind at the
# version its go.mod requires) into
#   ~/.cache/agenthooks/tools/kind-config-check-<kind version>-<source hash>/kind-config-check
# (root: $AGENTHOOKS_CACHE) and reuses it while the sources are unchanged. Prints the
# binary's path on stdout (last line). Needs a Go toolchain; the modules come from the Go
# module proxy once, then from the module cache.
set -euo pipefail

HERE="$(cd "${BASH_SOURCE[0]%/*}" && pwd)"
SRC="$HERE/configcheck"
log() { echo "[kind-config-check] $*" >&2; }

KIND_VERSION="$(awk '$1 == "sigs.k8s.io/kind" {print $2}' "$SRC/go.mod")"
[[ -n "$KIND_VERSION" ]] || { log "no sigs.k8s.io/kind in $SRC/go.mod"; exit 1; }
HASH="$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" | sha256sum | cut -c1-12)"
CACHE_ROOT="${AGENTHOOKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agenthooks}"
OUT="$CACHE_ROOT/tools/kind-config-check-$KIND_VERSION-$HASH"

if [[ -x "$OUT/kind-config-check" ]]; then
  log "cached: $OUT/kind-config-check"
  echo "$OUT/kind-config-check"
  exit 0
fi
command -v go >/dev/null || { log "the Go toolchain is required"; exit 1; }
mkdir -p "$OUT"
t0=$(date +%s)
# built next to the cached path, then renamed: a half-written binary is never used
(cd "$SRC" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/kind-config-check.tmp" .)
mv "$OUT/kind-config-check.tmp" "$OUT/kind-config-check"
log "built with sigs.k8s.io/kind $KIND_VERSION in $(( $(date +%s) - t0 ))s: $OUT/kind-config-check"
echo "$OUT/kind-config-check"
