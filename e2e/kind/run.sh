#!/usr/bin/env bash
# The chart tier on a kind cluster, for a machine with Docker and kind (`make e2e-kind`):
#
#   1. checks that docker (with its daemon), kind, kubectl and cargo are there;
#   2. creates the kind cluster agenthooks-e2e from e2e/kind/cluster.yaml, its kubeconfig
#      in a directory of its own (yours, ~/.kube/config, is left alone);
#   3. builds the two images from the root Dockerfile (docker build --target operator /
#      dispatcher), tagged with the names the chart deploys, and takes the agent Pod's image
#      (busybox, tagged agenthooks.test/agent:1, as e2e/node/up.sh builds it);
#   4. loads the three into the cluster's node (kind load docker-image: no registry);
#   5. runs the chart tier against it: AGENTHOOKS_E2E_KUBECONFIG=<that kubeconfig>
#      cargo test -p agenthooks-e2e --test chart_node -- --ignored;
#   6. deletes the cluster on the way out, passed or failed (KEEP=1 keeps it, and says how
#      to reach and delete it).
#
#   e2e/kind/run.sh            all of the above
#   e2e/kind/run.sh --images   prints the images it loads, one a line, and exits
#
#   KEEP=1                 keep the cluster (and its kubeconfig directory) at the end
#   KIND_NODE_IMAGE=IMG    node image (default: your kind's default; the chart needs 1.30+)
#   AGENT_BASE=IMG         image the agent image is made from (default busybox:1.36.1)
#   AGENTHOOKS_KIND_DIR    where the kubeconfig goes (default: a new temporary directory)
#   HELM                   helm binary for the tests (default: helm on PATH, else the tests
#                          build one with e2e/controlplane/build-helm.sh)
#
# Refuses to start when a cluster of that name exists (it is not ours to delete). kind
# cannot run on the CI machines (no registry, so no node image); e2e/tests/kind.rs checks
# this script and the cluster config there.
set -euo pipefail

# Only bash until the prerequisites are checked (no dirname, sed, ...): a machine without
# them gets the list of what is missing, nothing else.
case "${BASH_SOURCE[0]}" in */*) HERE="${BASH_SOURCE[0]%/*}" ;; *) HERE=. ;; esac
HERE="$(cd "$HERE" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CLUSTER=agenthooks-e2e
CONFIG="$HERE/cluster.yaml"
AGENT_IMAGE=agenthooks.test/agent:1
AGENT_BASE="${AGENT_BASE:-busybox:1.36.1}"

log() { echo "[e2e-kind] $*" >&2; }
die() { log "$*"; exit 1; }

# Tag of both images: the chart's appVersion, as the chart's defaults and e2e/images/build.sh.
TAG=""
while IFS= read -r line; do
  if [[ "$line" =~ ^appVersion:\ *\"?([^\"]*)\"?\ *$ ]]; then TAG="${BASH_REMATCH[1]}"; fi
done < "$ROOT/charts/agenthooks/Chart.yaml"
[[ -n "$TAG" ]] || die "no appVersion in charts/agenthooks/Chart.yaml"
COMPONENTS=(operator dispatcher)
image_of() { echo "agenthooks/$1:$TAG"; }

if [[ "${1:-}" == "--images" ]]; then
  for c in "${COMPONENTS[@]}"; do image_of "$c"; done
  echo "$AGENT_IMAGE"
  exit 0
fi
[[ $# -eq 0 ]] || die "usage: $0 [--images]"

# ---- prerequisites, all reported at once ---------------------------------------------------
missing=()
for tool in docker kind kubectl cargo; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if (( ${#missing[@]} > 0 )); then
  die "missing on PATH: ${missing[*]} (docs/kind.md says what the kind tier needs)"
fi
docker info >/dev/null 2>&1 || die "docker cannot reach its daemon (docker info fails): start it, or check your permissions on its socket"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  die "a kind cluster named $CLUSTER exists already: delete it (kind delete cluster --name $CLUSTER) or use it yourself"
fi
if [[ -z "${HELM:-}" ]] && command -v helm >/dev/null 2>&1; then
  HELM="$(command -v helm)"
  export HELM
fi

# ---- the cluster, deleted on the way out unless KEEP=1 ---------------------------------------
DIR="${AGENTHOOKS_KIND_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/agenthooks-kind.XXXXXX")}"
mkdir -p "$DIR"
KUBECONFIG_FILE="$DIR/kubeconfig"
T0=$(date +%s)
cleanup() {
  local rc=$?
  if [[ "${KEEP:-}" == 1 ]]; then
    log "kept the cluster $CLUSTER: KUBECONFIG=$KUBECONFIG_FILE kubectl get pods -A; delete it with: kind delete cluster --name $CLUSTER"
  else
    log "deleting the cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER" >&2 || log "kind delete cluster --name $CLUSTER failed: delete it by hand"
    [[ -n "${AGENTHOOKS_KIND_DIR:-}" ]] || rm -rf "$DIR"
  fi
  if ((rc == 0)); then log "passed in $(( $(date +%s) - T0 ))s"; else log "failed (exit $rc) after $(( $(date +%s) - T0 ))s"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

node_image=()
[[ -n "${KIND_NODE_IMAGE:-}" ]] && node_image=(--image "$KIND_NODE_IMAGE")
log "creating the kind cluster $CLUSTER ($CONFIG)"
kind create cluster --name "$CLUSTER" --config "$CONFIG" --kubeconfig "$KUBECONFIG_FILE" \
  ${node_image[@]+"${node_image[@]}"} --wait 180s >&2

# ---- images: built from the Dockerfile, loaded into the node ---------------------------------
export DOCKER_BUILDKIT=1  # the Dockerfile's RUN --mount caches need BuildKit
for c in "${COMPONENTS[@]}"; do
  log "docker build --target $c -t $(image_of "$c")"
  docker build --target "$c" -t "$(image_of "$c")" "$ROOT" >&2
done
log "agent image $AGENT_IMAGE from $AGENT_BASE"
docker image inspect "$AGENT_BASE" >/dev/null 2>&1 || docker pull "$AGENT_BASE" >&2
docker tag "$AGENT_BASE" "$AGENT_IMAGE"
for img in "$(image_of operator)" "$(image_of dispatcher)" "$AGENT_IMAGE"; do
  log "kind load docker-image $img"
  kind load docker-image --name "$CLUSTER" "$img" >&2
done

# ---- the chart tier ---------------------------------------------------------------------------
log "chart tier against $CLUSTER (AGENTHOOKS_E2E_KUBECONFIG=$KUBECONFIG_FILE)"
cd "$ROOT"
AGENTHOOKS_E2E_KUBECONFIG="$KUBECONFIG_FILE" \
  cargo test -p agenthooks-e2e --test chart_node -- --ignored --nocapture
