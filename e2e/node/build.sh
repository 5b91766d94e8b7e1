#!/usr/bin/env bash
# Builds (or finds in the cache) everything a real single-node cluster needs besides the
# control plane's etcd + kube-apiserver (e2e/controlplane/build.sh):
#
#   kubelet, kube-proxy, kube-controller-manager, kube-scheduler   k8s.io/kubernetes (wrapper module)
#   containerd, containerd-shim-runc-v2, ctr                       github.com/containerd/containerd/v2
#   coredns                                                        github.com/coredns/coredns
#   crictl                                                         sigs.k8s.io/cri-tools
#   runc, the CNI plugins, busybox (for images)                    Debian packages: apt-get download + dpkg -x
#   pause                                                          e2e/images/pause.c, gcc -static
#
# Each piece is cached on its own, keyed by its version and the recipe's revision, under
#   ~/.cache/agenthooks/node/<piece>-<version>-b<N>/          (root: $AGENTHOOKS_CACHE)
# so bumping one does not rebuild the others; a "set" directory names one combination:
#   ~/.cache/agenthooks/node/set-k8s-v<K8S>-containerd-v<CTRD>-b<N>/bin/*   (symlinks)
#   .../cni -> the plugins' directory, .../versions (what is in it), .../build-times.txt
# Prints the set directory on stdout (last line). Nothing is written into the repository.
#
#   BUILD_NICE      prefix of every compile (default "nice -n 10"; "" for none)
#   GOCACHE         as usual; an empty one measures a cold build (see README.md)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.35.4}"          # same default as e2e/controlplane/build.sh
CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.4.2}"
COREDNS_VERSION="${COREDNS_VERSION:-1.15.0}"
CRICTL_VERSION="${CRICTL_VERSION:-1.34.0}"
# Revision of this recipe: bump when a build changes so a stale cached binary is not reused.
REV=b1
CACHE_ROOT="${AGENTHOOKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agenthooks}"
NODE_CACHE="$CACHE_ROOT/node"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
read -r -a NICE <<< "${BUILD_NICE-nice -n 10}"

log() { echo "[node-build] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
mkdir -p "$NODE_CACHE"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
TIMES="$WORK/times"
: > "$TIMES"
timed() { # timed LABEL CMD... : runs CMD, appends "LABEL SECONDS" to the times file
  local label=$1 t0 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  echo "$label $(( $(date +%s) - t0 ))s (load $(cut -d' ' -f1-3 /proc/loadavg))" >> "$TIMES"
  return $rc
}
need_go() { command -v go >/dev/null || die "the Go toolchain (>= 1.25) is required to build $1"; }

# ---- kubelet, kube-proxy, kube-controller-manager, kube-scheduler --------------------------
K8S_DIR="$NODE_CACHE/k8s-v${K8S_VERSION}-$REV"
K8S_BINS=(kubelet kube-proxy kube-controller-manager kube-scheduler)
build_k8s() {
  need_go "the node's Kubernetes binaries"
  local w="$WORK/k8s" minor staging_version modfile major ldflags vpkg
  mkdir -p "$w" "$K8S_DIR"
  cd "$w"
  minor="${K8S_VERSION#*.}"
  staging_version="v0.${minor}"
  # k8s.io/kubernetes replaces its staging modules with ./staging/...: pin each to the same
  # release instead (the list is read from the release's own go.mod).
  modfile="$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  [[ -f "$modfile" ]] || die "cannot download k8s.io/kubernetes@v${K8S_VERSION}"
  mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile")
  {
    printf 'module agenthooks.io/e2e/k8s-node\n\ngo 1.25.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
    for m in "${staging[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"; done
    printf ')\n'
  } > go.mod
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for b in "${K8S_BINS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
    printf ')\n'
  } > tools.go
  log "k8s.io/kubernetes v${K8S_VERSION}: ${#staging[@]} staging modules at ${staging_version}; resolving"
  "${NICE[@]}" go mod tidy -e >&2
  major="${K8S_VERSION%%.*}"
  vpkg=k8s.io/component-base/version
  ldflags="-s -w -X ${vpkg}.gitVersion=v${K8S_VERSION} -X ${vpkg}.gitMajor=${major} -X ${vpkg}.gitMinor=${minor%%.*} -X ${vpkg}.gitTreeState=clean"
  log "building ${K8S_BINS[*]} (one go build: many minutes on 2 cores when cold)"
  mkdir -p "$w/out"
  local pkgs=()
  for b in "${K8S_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  CGO_ENABLED=0 "${NICE[@]}" go build -trimpath -ldflags "$ldflags" -o "$w/out/" "${pkgs[@]}"
  for b in "${K8S_BINS[@]}"; do mv "$w/out/$b" "$K8S_DIR/$b"; done
}
have_all() { local d=$1 b; shift; for b in "$@"; do [[ -x "$d/$b" ]] || return 1; done; }
if have_all "$K8S_DIR" "${K8S_BINS[@]}"; then log "cached: $K8S_DIR"; else timed "k8s-v${K8S_VERSION}(${K8S_BINS[*]})" build_k8s; fi

# ---- modules installable with `go install pkg@version` (no replace lines) ------------------
go_install() { # go_install DIR VERSION TAGS PKG... : binaries of PKG@VERSION into DIR
  local dir=$1 version=$2 tags=$3 stage
  shift 3
  need_go "$*"
  stage="$WORK/gobin-$(basename "$dir")"
  mkdir -p "$stage" "$dir"
  local p args=()
  for p in "$@"; do args+=("$p@v$version"); done
  log "go install ${args[*]}"
  GOBIN="$stage" GOFLAGS=-mod=mod CGO_ENABLED=0 "${NICE[@]}" \
    go install -trimpath -ldflags "-s -w" ${tags:+-tags "$tags"} "${args[@]}" >&2
  mv "$stage"/* "$dir/"
}
CTRD_DIR="$NODE_CACHE/containerd-v${CONTAINERD_VERSION}-$REV"
if have_all "$CTRD_DIR" containerd containerd-shim-runc-v2 ctr; then log "cached: $CTRD_DIR"; else
  timed "containerd-v${CONTAINERD_VERSION}(containerd,shim,ctr)" go_install "$CTRD_DIR" "$CONTAINERD_VERSION" "no_btrfs no_devmapper no_zfs" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
fi
COREDNS_DIR="$NODE_CACHE/coredns-v${COREDNS_VERSION}-$REV"
if have_all "$COREDNS_DIR" coredns; then log "cached: $COREDNS_DIR"; else
  timed "coredns-v${COREDNS_VERSION}" go_install "$COREDNS_DIR" "$COREDNS_VERSION" "" github.com/coredns/coredns
fi
CRICTL_DIR="$NODE_CACHE/crictl-v${CRICTL_VERSION}-$REV"
if have_all "$CRICTL_DIR" crictl; then log "cached: $CRICTL_DIR"; else
  timed "crictl-v${CRICTL_VERSION}" go_install "$CRICTL_DIR" "$CRICTL_VERSION" "" sigs.k8s.io/cri-tools/cmd/crictl
fi

# ---- Debian packages, unpacked (not installed) ---------------------------------------------
deb_version() { apt-cache show --no-all-versions "$1" 2>/dev/null | sed -n 's/^Version: //p' | head -n 1; }
deb_unpack() { # deb_unpack PKG FILE-INSIDE : prints the unpacked root of PKG (cached by version)
  local pkg=$1 inside=$2 v dir
  v="$(deb_version "$pkg")"
  if [[ -z "$v" && -z "$(ls -d "$NODE_CACHE/debian-$pkg-"* 2>/dev/null)" && $(id -u) -eq 0 ]]; then
    log "apt-cache knows no $pkg: apt-get update"
    apt-get update -qq >&2 || true
    v="$(deb_version "$pkg")"
  fi
  if [[ -z "$v" ]]; then
    # no apt lists (apt-get update never ran): any version unpacked before will do
    dir="$(ls -d "$NODE_CACHE/debian-$pkg-"* 2>/dev/null | tail -n 1 || true)"
    [[ -n "$dir" && -e "$dir/$inside" ]] || die "apt-cache knows no $pkg: run apt-get update"
    echo "$dir"; return
  fi
  dir="$NODE_CACHE/debian-$pkg-${v//[:~]/_}"
  if [[ ! -e "$dir/$inside" ]]; then
    log "apt-get download $pkg=$v"
    (cd "$WORK" && apt-get download -q "$pkg=$v" >&2 2>&1) || die "apt-get download $pkg failed"
    rm -rf "$dir.tmp"
    dpkg -x "$WORK/${pkg}_"*.deb "$dir.tmp"
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}
RUNC_ROOT="$(deb_unpack runc usr/sbin/runc)"
CNI_ROOT="$(deb_unpack containernetworking-plugins usr/lib/cni/bridge)"
BUSYBOX_ROOT="$(deb_unpack busybox-static bin/busybox)"

# ---- pause: the sandbox image's only binary ------------------------------------------------
PAUSE_DIR="$NODE_CACHE/pause-$(sha256sum "$HERE/../images/pause.c" | cut -c1-12)"
if [[ ! -x "$PAUSE_DIR/pause" ]]; then
  command -v gcc >/dev/null || die "gcc is required to build pause (Debian package: gcc, libc6-dev)"
  mkdir -p "$PAUSE_DIR"
  timed pause gcc -static -Os -s -o "$PAUSE_DIR/pause.tmp" "$HERE/../images/pause.c"
  mv "$PAUSE_DIR/pause.tmp" "$PAUSE_DIR/pause"
fi

# ---- the set ---------------------------------------------------------------------------------
SET="$NODE_CACHE/set-k8s-v${K8S_VERSION}-containerd-v${CONTAINERD_VERSION}-coredns-v${COREDNS_VERSION}-crictl-v${CRICTL_VERSION}-$REV"
mkdir -p "$SET/bin"
for b in "${K8S_BINS[@]}"; do ln -sfn "$K8S_DIR/$b" "$SET/bin/$b"; done
for b in containerd containerd-shim-runc-v2 ctr; do ln -sfn "$CTRD_DIR/$b" "$SET/bin/$b"; done
ln -sfn "$COREDNS_DIR/coredns" "$SET/bin/coredns"
ln -sfn "$CRICTL_DIR/crictl" "$SET/bin/crictl"
ln -sfn "$RUNC_ROOT/usr/sbin/runc" "$SET/bin/runc"
ln -sfn "$BUSYBOX_ROOT/bin/busybox" "$SET/bin/busybox"
ln -sfn "$PAUSE_DIR/pause" "$SET/bin/pause"
ln -sfn "$CNI_ROOT/usr/lib/cni" "$SET/cni"
cat > "$SET/versions" <<V
K8S_VERSION=$K8S_VERSION
CONTAINERD_VERSION=$CONTAINERD_VERSION
COREDNS_VERSION=$COREDNS_VERSION
CRICTL_VERSION=$CRICTL_VERSION
RUNC=$(basename "$RUNC_ROOT")
CNI_PLUGINS=$(basename "$CNI_ROOT")
BUSYBOX=$(basename "$BUSYBOX_ROOT")
V
if [[ -s "$TIMES" ]]; then
  { echo "# $(date -u +%FT%TZ) $(go version 2>/dev/null | cut -d' ' -f3) GOCACHE=$(go env GOCACHE 2>/dev/null)"; cat "$TIMES"; } >> "$SET/build-times.txt"
  log "build times:"; sed 's/^/[node-build]   /' "$TIMES" >&2
fi
log "ready: $SET"
echo "$SET"
