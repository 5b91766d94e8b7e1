#!/usr/bin/env bash
# make cluster / make cluster-down: a real control plane (etcd + kube-apiserver), the CRDs,
# the operator and two dispatchers, running in the background for a person to try by hand.
#   scripts/cluster.sh up DIR     start everything; prints the kubeconfig and the URLs
#   scripts/cluster.sh down DIR   stop everything `up` started
set -euo pipefail
cmd="${1:?up|down}"; DIR="${2:?DIR}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$DIR"; DIR="$(cd "$DIR" && pwd)"
APP_PIDS="$DIR/app.pids"

down() {
  if [[ -f "$APP_PIDS" ]]; then
    while read -r name pid; do
      if kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; echo "stopped $name ($pid)"; fi
    done < "$APP_PIDS"
    rm -f "$APP_PIDS"
  fi
  if [[ -f "$DIR/cp/pids" ]]; then bash "$ROOT/e2e/controlplane/stop.sh" "$DIR/cp"; fi
}

case "$cmd" in
  down) down; exit 0 ;;
  up) ;;
  *) echo "usage: $0 up|down DIR" >&2; exit 2 ;;
esac

[[ -f "$APP_PIDS" ]] && { echo "already running (see $DIR); run make cluster-down first" >&2; exit 1; }
(cd "$ROOT" && cargo build -q -p agenthooks-operator -p agenthooks-dispatcher --bins)
bash "$ROOT/e2e/controlplane/start.sh" "$DIR/cp" >/dev/null
export KUBECONFIG="$DIR/cp/kubeconfig"
kubectl apply --server-side -f "$ROOT/config/crd/agenthooks.yaml" >/dev/null
kubectl wait --for=condition=Established crd/agenthooks.agenthooks.io crd/tenanthookbudgets.agenthooks.io --timeout=60s >/dev/null
kubectl create namespace agenthooks-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
[[ -f "$DIR/seal.key" ]] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/seal.key"
[[ -f "$DIR/admin.token" ]] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/admin.token")
mkdir -p "$DIR/logs"
bin="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
start() { # name, args...
  local name=$1; shift
  nohup "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo "$name $!" >> "$APP_PIDS"
}
start operator "$bin/agenthooks-operator" --sync-addr 127.0.0.1:9090 --metrics-addr 127.0.0.1:9091 --seal-key-file "$DIR/seal.key"
for i in 1 2; do
  start "dispatcher-$i" "$bin/agenthooks-dispatcher" --operator-url http://127.0.0.1:9090 --listen "127.0.0.1:808$i" \
    --dispatcher-id "dispatcher-$i" --seal-key-file "$DIR/seal.key" \
    --audit-db "sqlite://$DIR/audit-$i.db" --admin-token-file "$DIR/admin.token" \
    --http-allow-cidr 127.0.0.1/32
done
for _ in $(seq 1 60); do
  if curl -sf 127.0.0.1:8081/readyz >/dev/null && curl -sf 127.0.0.1:8082/readyz >/dev/null; then break; fi
  sleep 0.5
done
cat <<MSG
agenthooks cluster is up (logs in $DIR/logs):
  export KUBECONFIG=$KUBECONFIG
  operator:     sync http://127.0.0.1:9090   metrics http://127.0.0.1:9091/metrics
  dispatchers:  http://127.0.0.1:8081   http://127.0.0.1:8082
Try:
  kubectl apply -f config/samples/namespaces.yaml -f config/samples/block-dangerous-exec.yaml
  kubectl get agenthooks -A
  curl -s -X POST 127.0.0.1:8081/v1/dispatch -d @config/samples/events/rm-rf.json
  curl -s -H "Authorization: Bearer \$(cat $DIR/admin.token)" 127.0.0.1:8081/v1/executions
  (each dispatcher keeps its audit rows in $DIR/audit-<n>.db)
Stop with: make cluster-down
MSG
