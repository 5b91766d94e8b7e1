#!/usr/bin/env bash
# Writes a directory tree as a one-layer OCI image archive, with no Docker and no registry:
#
#   oci-archive.sh ROOTFS REF OUT.tar CONFIG_JSON
#
#   REF          full name, e.g. docker.io/agenthooks/dispatcher:0.1.0 (stored as the
#                annotation io.containerd.image.name, which `ctr images import` names it by)
#   CONFIG_JSON  the image config's "config" object, e.g.
#                {"User":"65532:65532","Entrypoint":["/usr/local/bin/x"],"Env":["PATH=/bin"]}
#
# The layer is reproducible: entries sorted, owner 0:0, mtime 0; so is the archive. Uses
# tar, sha256sum, stat and jq only. linux/amd64.
set -euo pipefail
die() { echo "[oci-archive] ERROR: $*" >&2; exit 1; }
[[ $# -eq 4 ]] || die "usage: $0 ROOTFS REF OUT.tar CONFIG_JSON"
rootfs=$1 ref=$2 out=$3 config=$4
[[ -d "$rootfs" ]] || die "$rootfs: not a directory"
jq -e 'type == "object"' <<< "$config" >/dev/null || die "CONFIG_JSON is not a JSON object: $config"
[[ "$ref" == */*:* ]] || die "REF '$ref' needs a registry host, a path and a tag"

layout="$(mktemp -d)"
trap 'rm -rf "$layout"' EXIT
mkdir -p "$layout/blobs/sha256"

# put_blob FILE -> moves FILE to blobs/sha256/<digest>, prints "<digest> <size>"
put_blob() {
  local digest size
  digest="$(sha256sum "$1" | cut -d' ' -f1)"
  size="$(stat -c %s "$1")"
  mv "$1" "$layout/blobs/sha256/$digest"
  echo "$digest $size"
}

tar -C "$rootfs" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -cf "$layout/layer" .
read -r layer_digest layer_size < <(put_blob "$layout/layer")

jq -cn --argjson cfg "$config" --arg diff "sha256:$layer_digest" '{
  architecture: "amd64",
  os: "linux",
  config: $cfg,
  rootfs: {type: "layers", diff_ids: [$diff]},
  history: [{created_by: "e2e/images/oci-archive.sh"}]
}' > "$layout/config"
read -r config_digest config_size < <(put_blob "$layout/config")

jq -cn --arg c "sha256:$config_digest" --argjson cs "$config_size" \
  --arg l "sha256:$layer_digest" --argjson ls "$layer_size" '{
  schemaVersion: 2,
  mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
  layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $l, size: $ls}]
}' > "$layout/manifest"
read -r manifest_digest manifest_size < <(put_blob "$layout/manifest")

printf '{"imageLayoutVersion":"1.0.0"}' > "$layout/oci-layout"
jq -cn --arg m "sha256:$manifest_digest" --argjson ms "$manifest_size" --arg ref "$ref" '{
  schemaVersion: 2,
  mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [{
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    digest: $m, size: $ms,
    platform: {architecture: "amd64", os: "linux"},
    annotations: {
      "io.containerd.image.name": $ref,
      "org.opencontainers.image.ref.name": ($ref | sub("^.*:"; ""))
    }
  }]
}' > "$layout/index.json"

mkdir -p "$(dirname "$out")"
tar -C "$layout" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  -cf "$out.tmp" oci-layout index.json blobs
mv "$out.tmp" "$out"
echo "[oci-archive] $ref: layer $(( layer_size / 1024 )) KiB, manifest sha256:${manifest_digest:0:12} -> $out" >&2
