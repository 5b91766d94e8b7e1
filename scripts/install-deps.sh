#!/usr/bin/env bash
# Installs what `make test` needs and a fresh Debian machine may lack. Idempotent.
#   scripts/install-deps.sh node       also what the real node of `make test-node` needs
#   scripts/install-deps.sh runtimes   the agent runtimes of the runtimes tier (scripts/runtimes.pins)
#   scripts/install-deps.sh browser    Debian's chromium and the console's browser tests' npm packages
#   scripts/install-deps.sh bench      Debian's python3-matplotlib (bench/plot.py draws bench/report.png)
set -euo pipefail
if [ "${1:-}" = runtimes ]; then
  # Each pinned runtime from the npm registry into its own prefix; skipped when its binary
  # already answers --version with the pinned version. Node.js >= 20 and npm are needed.
  command -v npm >/dev/null || { echo "[deps] npm (Node.js >= 20) is required for the runtimes tier" >&2; exit 1; }
  root="${AGENTHOOKS_RUNTIMES_DIR:-$HOME/.cache/agenthooks/runtimes}"
  pins="$(dirname "$0")/runtimes.pins"
  while read -r name version pkg bin; do
    case "$name" in ''|'#'*) continue ;; esac
    prefix="$root/$name-$version"
    exe="$prefix/node_modules/.bin/$bin"
    if [ -x "$exe" ] && "$exe" --version 2>/dev/null | grep -qF "$version"; then
      continue
    fi
    echo "[deps] installing $pkg@$version into $prefix" >&2
    mkdir -p "$prefix"
    npm install --no-audit --no-fund --prefix "$prefix" "$pkg@$version" >"$prefix.install.log" 2>&1 \
      || { tail -20 "$prefix.install.log" >&2; exit 1; }
    "$exe" --version 2>/dev/null | grep -qF "$version" \
      || { echo "[deps] $exe does not answer --version with $version" >&2; exit 1; }
  done < "$pins"
  echo "[deps] runtimes ok in $root" >&2
  exit 0
fi
need=()
if [ "${1:-}" = node ]; then
  command -v iptables >/dev/null || need+=(iptables)        # kube-proxy, kubelet, CNI
  command -v nft >/dev/null || need+=(nftables)             # down.sh checks/cleans nft tables
  command -v conntrack >/dev/null || need+=(conntrack)      # kube-proxy's UDP clean-up
  command -v ip >/dev/null || need+=(iproute2)
  command -v jq >/dev/null || need+=(jq)                    # OCI archives of the images
  command -v gcc >/dev/null || need+=(gcc libc6-dev)        # the static pause binary
  dpkg -s libseccomp2 >/dev/null 2>&1 || need+=(libseccomp2) # Debian's runc links it
  dpkg -s ca-certificates >/dev/null 2>&1 || need+=(ca-certificates)
fi
# `scripts/install-deps.sh schemathesis`: the API fuzzer that dispatcher/tests/openapi_fuzz.rs
# runs against docs/openapi.json, pinned, from PyPI into a venv of its own (docs/api.md).
SCHEMATHESIS_VERSION=4.32.5
if [ "${1:-}" = schemathesis ]; then
  # A python3 that can make a venv (Debian ships ensurepip in python3-venv).
  command -v python3 >/dev/null || need+=(python3)
  /usr/bin/env python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
fi
# `scripts/install-deps.sh browser`: the console's browser tests (e2e/console/README.md):
# Debian's chromium (apt) and, pinned, playwright-core and @axe-core/playwright from npm into
# a prefix of their own. Playwright never downloads a browser: the tests launch
# /usr/bin/chromium (e2e/tests/console.rs reads PLAYWRIGHT_VERSION= here to find the prefix).
PLAYWRIGHT_VERSION=1.65.2
AXE_PLAYWRIGHT_VERSION=4.14.1
if [ "${1:-}" = browser ]; then
  command -v npm >/dev/null || { echo "[deps] npm (Node.js >= 20) is required for the browser tests" >&2; exit 1; }
  [ -x /usr/bin/chromium ] || need+=(chromium)
fi
# `scripts/install-deps.sh bench`: the plot of the agenthooks vs OPA bench (bench/plot.py runs on
# Debian's /usr/bin/python3, whatever python3 is first on PATH).
if [ "${1:-}" = bench ]; then
  /usr/bin/python3 -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
fi
command -v openssl >/dev/null || need+=(openssl)
command -v setsid >/dev/null || need+=(util-linux)
command -v curl >/dev/null || need+=(curl)
command -v shellcheck >/dev/null || need+=(shellcheck)  # e2e/tests/kind.rs checks e2e/kind/run.sh
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)  # the e2e harness starts a private server
if [ ${#need[@]} -gt 0 ]; then
  echo "[deps] installing: ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ "${1:-}" = bench ]; then
  echo "[deps] bench ok: matplotlib $(/usr/bin/python3 -c 'import matplotlib; print(matplotlib.__version__)')" >&2
  exit 0
fi
if [ "${1:-}" = schemathesis ]; then
  # Skipped when the venv's binary already answers --version with the pinned version.
  venv="${AGENTHOOKS_TOOLS_DIR:-$HOME/.cache/agenthooks/tools}/schemathesis-$SCHEMATHESIS_VERSION"
  exe="$venv/bin/schemathesis"
  if ! { [ -x "$exe" ] && "$exe" --version 2>/dev/null | grep -qF "$SCHEMATHESIS_VERSION"; }; then
    echo "[deps] installing schemathesis $SCHEMATHESIS_VERSION into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION" >"$venv.install.log" 2>&1 \
      || { tail -20 "$venv.install.log" >&2; exit 1; }
    "$exe" --version 2>/dev/null | grep -qF "$SCHEMATHESIS_VERSION" \
      || { echo "[deps] $exe does not answer --version with $SCHEMATHESIS_VERSION" >&2; exit 1; }
  fi
  echo "[deps] schemathesis ok: $exe" >&2
  exit 0
fi
if [ "${1:-}" = browser ]; then
  # Skipped when both packages are already there at the pinned versions.
  prefix="${AGENTHOOKS_TOOLS_DIR:-$HOME/.cache/agenthooks/tools}/browser-$PLAYWRIGHT_VERSION"
  installed() { node -p "require('$prefix/node_modules/$1/package.json').version" 2>/dev/null; }
  if [ "$(installed playwright-core)" != "$PLAYWRIGHT_VERSION" ] \
    || [ "$(installed @axe-core/playwright)" != "$AXE_PLAYWRIGHT_VERSION" ]; then
    echo "[deps] installing playwright-core@$PLAYWRIGHT_VERSION @axe-core/playwright@$AXE_PLAYWRIGHT_VERSION into $prefix" >&2
    mkdir -p "$prefix"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-audit --no-fund --save-exact --prefix "$prefix" \
      "playwright-core@$PLAYWRIGHT_VERSION" "@axe-core/playwright@$AXE_PLAYWRIGHT_VERSION" >"$prefix.install.log" 2>&1 \
      || { tail -20 "$prefix.install.log" >&2; exit 1; }
    if [ "$(installed playwright-core)" != "$PLAYWRIGHT_VERSION" ] \
      || [ "$(installed @axe-core/playwright)" != "$AXE_PLAYWRIGHT_VERSION" ]; then
      echo "[deps] $prefix lacks the pinned playwright-core or @axe-core/playwright" >&2; exit 1
    fi
  fi
  echo "[deps] browser ok: $(/usr/bin/chromium --version 2>/dev/null), node_modules in $prefix" >&2
  exit 0
fi
command -v cargo >/dev/null || { echo "[deps] Rust (cargo) is required: https://rustup.rs" >&2; exit 1; }
# Go >= 1.25 builds kube-apiserver, etcd and helm; e2e/argocd-health needs Go 1.27, which a
# Go >= 1.21 fetches by itself from the module proxy (GOTOOLCHAIN=go1.27.3 in its build.sh).
command -v go >/dev/null || { echo "[deps] Go >= 1.25 is required to build the real kube-apiserver and etcd" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "[deps] kubectl is required on PATH" >&2; exit 1; }
echo "[deps] ok: $(cargo --version), $(go version | cut -d' ' -f3), kubectl $(kubectl version --client 2>/dev/null | head -1 | awk '{print $3}')" >&2
