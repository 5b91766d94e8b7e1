#!/usr/bin/env bash
# Builds the real Kubernetes control plane used by the e2e tests:
#   kube-apiserver from the k8s.io/kubernetes Go module (through a tiny wrapper module
#   that pins every k8s.io staging module to the same release), and etcd from
#   go.etcd.io/etcd/server/v3.
# Binaries are cached outside the repository, keyed by version, and reused when present.
# Prints the cache directory on stdout (last line).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
CACHE_ROOT="${AGENTHOOKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agenthooks}"
# "-b2": the build recipe's revision (b2 stamps the version into kube-apiserver); bump it
# whenever the recipe changes so a stale cached binary is not reused.
OUT="$CACHE_ROOT/controlplane/k8s-v${K8S_VERSION}-etcd-v${ETCD_VERSION}-b2"

log() { echo "[controlplane] $*" >&2; }

if [[ -x "$OUT/kube-apiserver" && -x "$OUT/etcd" ]]; then
  log "cached: $OUT"
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null || { log "the Go toolchain is required to build the control plane"; exit 1; }
mkdir -p "$OUT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# staging modules replaced by k8s.io/kubernetes' own go.mod (read from the release itself)
minor="${K8S_VERSION#*.}"   # 35.4
staging_version="v0.${minor}"
modfile="$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile")
log "k8s.io/kubernetes v${K8S_VERSION}: ${#staging[@]} staging modules at ${staging_version}"

if [[ ! -x "$OUT/kube-apiserver" ]]; then
  mkdir -p "$WORK/apiserver"
  cd "$WORK/apiserver"
  {
    echo "module agenthooks.io/e2e/kube-apiserver"
    echo
    echo "go 1.25.0"
    echo
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do echo "	$m => $m ${staging_version}"; done
    echo ")"
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
  log "resolving kube-apiserver dependencies"
  go mod tidy -e >&2 2>&1 || go mod tidy >&2
  log "building kube-apiserver (several minutes on 2 cores)"
  major="${K8S_VERSION%%.*}"
  # Stamp the version like a release build does, so /version and `kubectl version` work.
  vpkg=k8s.io/component-base/version
  ldflags="-s -w -X ${vpkg}.gitVersion=v${K8S_VERSION} -X ${vpkg}.gitMajor=${major} -X ${vpkg}.gitMinor=${minor%%.*} -X ${vpkg}.gitTreeState=clean"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$OUT/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
fi

if [[ ! -x "$OUT/etcd" ]]; then
  # etcd's server module carries replace lines too, so it is built from a wrapper module.
  log "building etcd v${ETCD_VERSION}"
  mkdir -p "$WORK/etcd" && cd "$WORK/etcd"
  cat > go.mod <<MOD
module agenthooks.io/e2e/etcd

go 1.25.0

require go.etcd.io/etcd/server/v3 v${ETCD_VERSION}
MOD
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  go mod tidy >&2
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$OUT/etcd.tmp" "$OUT/etcd"
fi

log "built: $OUT"
echo "$OUT"
