#!/usr/bin/env bash
# Builds the agenthooks images the way the Dockerfile does, without Docker or a registry,
# as OCI archives the harness node imports (`ctr images import`):
#
#   e2e/images/build.sh OUT_DIR        release binaries (cargo), then OUT_DIR/operator.tar and
#                                      OUT_DIR/dispatcher.tar, and the tests' agent image
#                                      OUT_DIR/agent.tar (e2e/images/agent.sh, for clusters
#                                      other than the harness node); prints OUT_DIR (last line)
#   e2e/images/build.sh --refs         the image names, one a line (what the chart's defaults say)
#   e2e/images/build.sh --config T     the OCI config of target T, read from the Dockerfile
#
# Kept in step with the Dockerfile by construction: the root file system is made by the
# same scripts/image-rootfs.sh that the Dockerfile's build stage runs, and the config (user,
# entrypoint, env, workdir) is read from the Dockerfile's final stage `FROM scratch AS T`.
# An instruction this script cannot reproduce in that stage is an error, not a silent
# difference.
#
#   AGENTHOOKS_IMAGE_BIN_DIR   take the binaries from there instead of building them
#   BUSYBOX                    the busybox-static binary (default: /bin/busybox if static,
#                              else the one e2e/node/build.sh unpacks from Debian's package)
#   BUILD_NICE                 prefix of the cargo build (default "nice -n 10")
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DOCKERFILE="$ROOT/Dockerfile"
TARGETS=(operator dispatcher)
log() { echo "[images] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Image names: the chart's defaults (charts/agenthooks/values.yaml), tag = appVersion.
TAG="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$ROOT/charts/agenthooks/Chart.yaml")"
[[ -n "$TAG" ]] || die "no appVersion in charts/agenthooks/Chart.yaml"
ref_of() { echo "docker.io/agenthooks/$1:$TAG"; }

# stage_config T: the "config" object of target T's image, from the Dockerfile.
stage_config() {
  local target=$1 in_stage=0 seen_from=0 line word rest
  local user="" workdir="" entrypoint="null" cmd="null" env="[]" labels="{}" copy_ok=0
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line%$'\r'}"
    [[ "$line" =~ ^[[:space:]]*(#.*)?$ ]] && continue
    word="${line%%[[:space:]]*}"
    rest="${line#"$word"}"; rest="${rest#"${rest%%[![:space:]]*}"}"
    if [[ "${word^^}" == FROM ]]; then
      if (( in_stage )); then break; fi
      if [[ "$rest" =~ ^scratch[[:space:]]+[Aa][Ss][[:space:]]+${target}$ ]]; then in_stage=1; seen_from=1; fi
      continue
    fi
    (( in_stage )) || continue
    [[ "$line" == *\\ ]] && die "Dockerfile stage $target: line continuations are not reproduced: $line"
    case "${word^^}" in
      COPY)
        [[ "$rest" == "--from=build /rootfs/$target/ /" ]] \
          || die "Dockerfile stage $target: only 'COPY --from=build /rootfs/$target/ /' is reproduced, not: $line"
        copy_ok=1 ;;
      ENV)
        [[ "$rest" =~ ^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]\"\']*$ ]] \
          || die "Dockerfile stage $target: only 'ENV NAME=value' (one, unquoted) is reproduced, not: $line"
        env="$(jq -c --arg e "$rest" '. + [$e]' <<< "$env")" ;;
      USER) user="$rest" ;;
      WORKDIR) workdir="$rest" ;;
      ENTRYPOINT) entrypoint="$(jq -c 'if type == "array" then . else error("not an exec-form list") end' <<< "$rest" 2>/dev/null)" \
          || die "Dockerfile stage $target: ENTRYPOINT must be a JSON list: $line" ;;
      CMD) cmd="$(jq -c 'if type == "array" then . else error("not an exec-form list") end' <<< "$rest" 2>/dev/null)" \
          || die "Dockerfile stage $target: CMD must be a JSON list: $line" ;;
      LABEL)
        [[ "$rest" =~ ^([A-Za-z0-9._/-]+)=\"([^\"]*)\"$ ]] \
          || die "Dockerfile stage $target: only 'LABEL key=\"value\"' (one) is reproduced, not: $line"
        labels="$(jq -c --arg k "${BASH_REMATCH[1]}" --arg v "${BASH_REMATCH[2]}" '. + {($k): $v}' <<< "$labels")" ;;
      *) die "Dockerfile stage $target: '$word' is not reproduced by e2e/images/build.sh: $line" ;;
    esac
  done < "$DOCKERFILE"
  (( seen_from )) || die "Dockerfile has no stage 'FROM scratch AS $target'"
  (( copy_ok )) || die "Dockerfile stage $target does not COPY /rootfs/$target/"
  grep -qE "scripts/image-rootfs\.sh $target /out /rootfs/$target( |$)" "$DOCKERFILE" \
    || die "the Dockerfile's build stage does not run 'scripts/image-rootfs.sh $target /out /rootfs/$target'"
  jq -cn --arg user "$user" --arg wd "$workdir" --argjson ep "$entrypoint" --argjson cmd "$cmd" \
    --argjson env "$env" --argjson labels "$labels" '
    {Env: $env, Entrypoint: $ep, Cmd: $cmd}
    + (if $user == "" then {} else {User: $user} end)
    + (if $wd == "" then {} else {WorkingDir: $wd} end)
    + (if $labels == {} then {} else {Labels: $labels} end)
    | with_entries(select(.value != null))'
}

case "${1:-}" in
  --refs) for t in "${TARGETS[@]}"; do ref_of "$t"; done; exit 0 ;;
  --config) [[ -n "${2:-}" ]] || die "usage: $0 --config TARGET"; stage_config "$2"; exit 0 ;;
  ""|-*) die "usage: $0 OUT_DIR | --refs | --config TARGET" ;;
esac
OUT="$1"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
for t in "${TARGETS[@]}"; do stage_config "$t" >/dev/null; done   # fail before building

if [[ -n "${AGENTHOOKS_IMAGE_BIN_DIR:-}" ]]; then
  BIN="$AGENTHOOKS_IMAGE_BIN_DIR"
else
  read -r -a NICE <<< "${BUILD_NICE-nice -n 10}"
  # Run from a test, the environment holds what cargo set for that test crate
  # (CARGO_MANIFEST_DIR, CARGO_PKG_*, ...); build scripts that track them (ring's) would
  # make this build differ from a plain `cargo build --release` and redo it every time.
  for v in $(compgen -e | grep -E '^(CARGO_(MANIFEST_|PKG_|CRATE_|BIN_|PRIMARY_PACKAGE|TARGET_TMPDIR|RUSTC_CURRENT_DIR)|OUT_DIR$)'); do unset "$v"; done
  t0=$(date +%s)
  log "cargo build --release (operator, dispatcher)"
  (cd "$ROOT" && "${NICE[@]}" "${CARGO:-cargo}" build --release --locked -q \
      -p agenthooks-operator -p agenthooks-dispatcher --bins) >&2
  log "release binaries in $(( $(date +%s) - t0 ))s"
  BIN="$(cd "$ROOT" && "${CARGO:-cargo}" metadata --format-version 1 --no-deps | jq -r .target_directory)/release"
fi

if [[ -z "${BUSYBOX:-}" ]]; then
  if [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1; then BUSYBOX=/bin/busybox
  else BUSYBOX="$("$ROOT/e2e/node/build.sh" | tail -n 1)/bin/busybox"; fi
fi
export BUSYBOX

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
for t in "${TARGETS[@]}"; do
  "$ROOT/scripts/image-rootfs.sh" "$t" "$BIN" "$WORK/$t"
  "$HERE/oci-archive.sh" "$WORK/$t" "$(ref_of "$t")" "$OUT/$t.tar" "$(stage_config "$t")"
done
"$HERE/agent.sh" "$BUSYBOX" "$OUT/agent.tar"
echo "$OUT"
