#!/usr/bin/env bash
# Builds e2e/argocd-health (Argo CD's own health assessment as a small command; README.md
# here) into
#   ~/.cache/agenthooks/tools/argocd-health-<argo-cd version>-<source hash>/argocd-health
# (root: $AGENTHOOKS_CACHE) and reuses it when present, next to Argo CD's Application CRD
# from the same module (application-crd.yaml, for server-side dry runs of the Applications
# in docs/argocd.md). Prints the directory on stdout (last line).
#
# The argo-cd module's go.mod says go 1.27.0: a local Go older than that fetches the
# go1.27.3 toolchain from the module proxy (GOTOOLCHAIN below; ~76 MB, once per machine).
# Cold (empty Go module and build caches), measured on 2 cores: 11 minutes, of which about 5
# fetch the toolchain and 164 modules (1.5 GB of module cache); with the modules cached the
# compile alone takes ~6 minutes; then this script finds the binary and builds nothing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ARGOCD_VERSION="$(awk '$1 == "github.com/argoproj/argo-cd/v3" { print $2; exit }' "$HERE/go.mod")"
[[ -n "$ARGOCD_VERSION" ]] || { echo "[argocd-health] go.mod names no github.com/argoproj/argo-cd/v3" >&2; exit 1; }
# The source is ours: a change to it is a new cache entry.
SRC_HASH="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/main.go" | sha256sum | cut -c1-12)"
CACHE_ROOT="${AGENTHOOKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agenthooks}"
OUT="$CACHE_ROOT/tools/argocd-health-${ARGOCD_VERSION}-${SRC_HASH}"

log() { echo "[argocd-health] $*" >&2; }

if [[ -x "$OUT/argocd-health" && -s "$OUT/application-crd.yaml" ]]; then
  log "cached: $OUT"
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null || { log "the Go toolchain is required to build argocd-health"; exit 1; }
gov="$(GOTOOLCHAIN=local go env GOVERSION)"   # go1.26.8
if [[ "$gov" =~ ^go1\.([0-9]+) ]] && (( BASH_REMATCH[1] < 27 )); then
  export GOTOOLCHAIN=go1.27.3
fi
mkdir -p "$OUT"
STAGE="$(mktemp -d "$OUT.stage.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
t0=$(date +%s)
log "building with Argo CD ${ARGOCD_VERSION} (${GOTOOLCHAIN:-$gov}; several minutes on 2 cores the first time)"
cd "$HERE"
# -mod=readonly: go.sum is committed, the build never edits it. -buildvcs=false: a checkout
# owned by another user (CI) makes VCS stamping fail, and nothing reads the stamp.
CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" nice -n 10 \
  go build -trimpath -ldflags "-s -w" -o "$STAGE/argocd-health" .
moddir="$(GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)"
cp "$moddir/manifests/crds/application-crd.yaml" "$STAGE/application-crd.yaml"
chmod 0644 "$STAGE/application-crd.yaml"
mv "$STAGE/application-crd.yaml" "$OUT/application-crd.yaml"
mv "$STAGE/argocd-health" "$OUT/argocd-health"
log "built in $(( $(date +%s) - t0 ))s: $OUT"
echo "$OUT"
