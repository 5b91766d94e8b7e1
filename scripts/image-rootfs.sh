#!/usr/bin/env bash
# Assembles the root file system of one agenthooks image from already built binaries:
#
#   scripts/image-rootfs.sh operator|dispatcher BIN_DIR OUT_DIR
#
# The Dockerfile's build stage runs it (its final stages are FROM scratch + this tree), and
# so does the test harness (e2e/images/build.sh), which writes the same tree into an OCI
# archive without Docker or a registry: one script, so both images hold the same files.
#
# What goes in (nothing else):
#   /usr/local/bin/agenthooks-<component>    the binary
#   the shared libraries `ldd` lists for it  (glibc, libgcc_s, libm, the loader) at their paths
#   /etc/ssl/certs/ca-certificates.crt       for https hook and provider URLs
#   /etc/passwd, /etc/group                  root, nonroot (65532: the binaries), runner (65533:
#                                            the chart's default command-runner uid)
#   /etc/nsswitch.conf                       hosts: files dns
#   /tmp                                     1777 (the chart mounts an emptyDir over it)
#   dispatcher only: /bin/busybox and links  /bin/sh and the few tools command hooks use,
#                                            in the command-runner container (the same image)
#
#   BUSYBOX   the busybox-static binary (default /bin/busybox; Debian package busybox-static)
#   CA_BUNDLE default /etc/ssl/certs/ca-certificates.crt
set -euo pipefail

die() { echo "[image-rootfs] ERROR: $*" >&2; exit 1; }
[[ $# -eq 3 ]] || die "usage: $0 operator|dispatcher BIN_DIR OUT_DIR"
component=$1 bin_dir=$2 out=$3
case "$component" in operator|dispatcher) ;; *) die "unknown component '$component'";; esac
binary="$bin_dir/agenthooks-$component"
[[ -x "$binary" ]] || die "$binary: not an executable"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
[[ -s "$CA_BUNDLE" ]] || die "$CA_BUNDLE missing (Debian package: ca-certificates)"

# The command-runner's tools: sh and what short hook commands commonly pipe through. Kept
# short on purpose; an image FROM this one adds what a platform's hooks need.
APPLETS=(sh ash cat echo printf test '[' true false env id kill sleep timeout
  grep egrep fgrep sed awk cut tr head tail wc sort uniq tee xargs
  basename dirname ls mkdir rm mv cp touch date wget)

rm -rf "$out"
mkdir -p "$out"/usr/local/bin "$out"/etc/ssl/certs "$out"/tmp
install -m 0755 "$binary" "$out/usr/local/bin/"

# Shared libraries at the paths the loader looks for them; the loader (interpreter) too.
libs="$(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)"
[[ -n "$libs" ]] || die "ldd found no libraries for $binary (a static binary needs no loader: drop this step)"
while read -r lib; do
  mkdir -p "$out$(dirname "$lib")"
  cp -L "$lib" "$out$lib"
  chmod 0755 "$out$lib"
done <<< "$libs"

install -m 0644 "$CA_BUNDLE" "$out/etc/ssl/certs/ca-certificates.crt"
cat > "$out/etc/passwd" <<P
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
runner:x:65533:65533:command runner:/tmp:/sbin/nologin
P
cat > "$out/etc/group" <<G
root:x:0:
nonroot:x:65532:
runner:x:65533:
G
echo 'hosts: files dns' > "$out/etc/nsswitch.conf"
chmod 0644 "$out/etc/passwd" "$out/etc/group" "$out/etc/nsswitch.conf"
chmod 1777 "$out/tmp"

if [[ "$component" == dispatcher ]]; then
  BUSYBOX="${BUSYBOX:-/bin/busybox}"
  [[ -x "$BUSYBOX" ]] || die "$BUSYBOX missing (Debian package: busybox-static)"
  if ldd "$BUSYBOX" >/dev/null 2>&1; then die "$BUSYBOX is dynamically linked: use busybox-static"; fi
  mkdir -p "$out/bin"
  install -m 0755 "$BUSYBOX" "$out/bin/busybox"
  have="$("$BUSYBOX" --list)"
  for a in "${APPLETS[@]}"; do
    grep -qxF -- "$a" <<< "$have" || die "$BUSYBOX has no applet '$a'"
    ln -s busybox "$out/bin/$a"
  done
fi
find "$out" -type d -exec chmod go-w {} + ; chmod 1777 "$out/tmp"
echo "[image-rootfs] $component: $(du -sh "$out" | cut -f1) in $out" >&2
