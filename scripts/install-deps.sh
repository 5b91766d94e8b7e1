#!/usr/bin/env bash
# Installs what `make test` needs and a fresh Debian machine may lack. Idempotent.
set -euo pipefail
need=()
command -v openssl >/dev/null || need+=(openssl)
command -v setsid >/dev/null || need+=(util-linux)
command -v curl >/dev/null || need+=(curl)
command -v lua5.1 >/dev/null || command -v lua5.4 >/dev/null || need+=(lua5.1)  # runs the Argo CD health checks
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)  # the e2e harness starts a private server
if [ ${#need[@]} -gt 0 ]; then
  echo "[deps] installing: ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "[deps] Rust (cargo) is required: https://rustup.rs" >&2; exit 1; }
command -v go >/dev/null || { echo "[deps] Go >= 1.25 is required to build the real kube-apiserver and etcd" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "[deps] kubectl is required on PATH" >&2; exit 1; }
echo "[deps] ok: $(cargo --version), $(go version | cut -d' ' -f3), kubectl $(kubectl version --client 2>/dev/null | head -1 | awk '{print $3}')" >&2
