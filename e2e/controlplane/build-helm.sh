#!/usr/bin/env bash
# Builds `helm` from its Go module (helm.sh/helm/v3/cmd/helm) for the manifest tests, into
#   ~/.cache/agenthooks/tools/helm-v<VERSION>/helm     (root: $AGENTHOOKS_CACHE)
# and reuses it when present. Prints the binary's path on stdout (last line).
#
#   HELM_VERSION   default 3.22.0 (its go.mod says go 1.26.0), or 3.19.0 (go 1.24.0) when the
#                  Go toolchain is older than 1.26
#
# Needs a Go toolchain (no network once the module cache holds helm's dependencies).
set -euo pipefail

if [[ -z "${HELM_VERSION:-}" ]]; then
  HELM_VERSION=3.22.0
  gov="$(go env GOVERSION 2>/dev/null || true)"   # go1.26.8
  if [[ "$gov" =~ ^go1\.([0-9]+) ]] && (( BASH_REMATCH[1] < 26 )); then
    HELM_VERSION=3.19.0
  fi
fi
HELM_VERSION="${HELM_VERSION#v}"
CACHE_ROOT="${AGENTHOOKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agenthooks}"
OUT="$CACHE_ROOT/tools/helm-v${HELM_VERSION}"

log() { echo "[helm] $*" >&2; }

if [[ -x "$OUT/helm" ]]; then
  log "cached: $OUT/helm"
  echo "$OUT/helm"
  exit 0
fi

command -v go >/dev/null || { log "the Go toolchain is required to build helm"; exit 1; }
mkdir -p "$OUT"
t0=$(date +%s)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v${HELM_VERSION}"

# helm's go.mod has no replace lines, so `go install pkg@version` works; GOBIN points at a
# scratch dir so a half-written binary never lands at the cached path.
STAGE="$(mktemp -d)"
WORK=""
trap 'rm -rf "$STAGE" ${WORK:+"$WORK"}' EXIT
log "building helm v${HELM_VERSION} with $(go version | cut -d' ' -f3) (a few minutes on 2 cores)"
if ! GOBIN="$STAGE" GOFLAGS=-mod=mod CGO_ENABLED=0 \
    go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@v${HELM_VERSION}" >&2; then
  # Should a release ever carry replace directives, `go install pkg@version` refuses it:
  # build from a wrapper module that requires helm instead (as build.sh does for etcd).
  log "go install failed; building through a wrapper module"
  WORK="$(mktemp -d)"
  cd "$WORK"
  cat > go.mod <<MOD
module agenthooks.io/e2e/helm

go 1.24.0

require helm.sh/helm/v3 v${HELM_VERSION}
MOD
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "helm.sh/helm/v3/cmd/helm"
GO
  go mod tidy >&2
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$STAGE/helm" helm.sh/helm/v3/cmd/helm
fi
mv "$STAGE/helm" "$OUT/helm.tmp"
mv "$OUT/helm.tmp" "$OUT/helm"
log "built in $(( $(date +%s) - t0 ))s: $OUT/helm ($("$OUT/helm" version --short 2>/dev/null || echo '?'))"
echo "$OUT/helm"
