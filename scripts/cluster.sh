#!/usr/bin/env bash
# make cluster / make cluster-down: agenthooks running in the background for a person to try
# by hand, in one of two flavours.
#   scripts/cluster.sh up DIR       a real control plane (etcd + kube-apiserver), the CRDs, the
#                                   operator and two dispatchers as local processes
#   scripts/cluster.sh up-node DIR  a real node (e2e/node/up.sh: kubelet, containerd, CoreDNS;
#                                   root) with the release images and the Helm chart installed
#                                   (make cluster NODE=1)
#   scripts/cluster.sh down DIR     stop whichever runs; for the node, put the host back and
#                                   exit 1 if anything still differs (e2e/node/down.sh)
set -euo pipefail
cmd="${1:?up|up-node|down}"; DIR="${2:?DIR}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$DIR"; DIR="$(cd "$DIR" && pwd)"
APP_PIDS="$DIR/app.pids"
NODE_DIR="$DIR/node"

down() {
  local rc=0
  if [[ -d "$NODE_DIR/baseline" ]]; then
    bash "$ROOT/e2e/node/down.sh" "$NODE_DIR" || rc=$?
    # the logs and snapshots stay; the half GiB of images and containerd state goes
    (( rc != 0 )) || rm -rf "$NODE_DIR/run" "$DIR/node-images"
  fi
  if [[ -f "$APP_PIDS" ]]; then
    while read -r name pid; do
      if kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; echo "stopped $name ($pid)"; fi
    done < "$APP_PIDS"
    rm -f "$APP_PIDS"
  fi
  if [[ -f "$DIR/cp/pids" ]]; then bash "$ROOT/e2e/controlplane/stop.sh" "$DIR/cp"; fi
  return $rc
}

running() { [[ -f "$APP_PIDS" || -s "$NODE_DIR/pids" ]]; }

up_node() {
  [[ $(id -u) -eq 0 ]] || { echo "the node flavour needs root (bridge, iptables, mounts, cgroups)" >&2; exit 1; }
  bash "$ROOT/scripts/install-deps.sh" node >/dev/null
  local helm
  helm="$(bash "$ROOT/e2e/controlplane/build-helm.sh" | tail -n 1)"
  bash "$ROOT/e2e/images/build.sh" "$DIR/node-images" >/dev/null
  bash "$ROOT/e2e/node/up.sh" "$NODE_DIR" "$DIR/node-images/operator.tar" "$DIR/node-images/dispatcher.tar" >/dev/null
  export KUBECONFIG="$NODE_DIR/kubeconfig" KUBECACHEDIR="$NODE_DIR/run/kube-cache"
  export HELM_CACHE_HOME="$NODE_DIR/run/helm/cache" HELM_CONFIG_HOME="$NODE_DIR/run/helm/config" HELM_DATA_HOME="$NODE_DIR/run/helm/data"
  [[ -f "$DIR/admin.token" ]] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/admin.token")
  kubectl create namespace agenthooks-system >/dev/null
  kubectl -n agenthooks-system create secret generic agenthooks-admin --from-file=token="$DIR/admin.token" >/dev/null
  # tenants' command hooks allowed, so the samples (a tenant's command hook) work as they are;
  # callers anonymous and the admin token, so curl from this host works as shown below (a
  # cluster to try things by hand: the chart's default is callers authenticated by Kubernetes)
  "$helm" install agenthooks "$ROOT/charts/agenthooks" --namespace agenthooks-system \
    --set operator.allowTenantCommandHooks=true --set dispatcher.adminTokenSecret.name=agenthooks-admin \
    --set dispatcher.callers.mode=anonymous \
    --wait --timeout 5m >/dev/null
  local ip
  ip="$(kubectl -n agenthooks-system get service agenthooks-dispatcher -o jsonpath='{.spec.clusterIP}')"
  cat <<MSG
agenthooks is installed on a real node (Helm release agenthooks in agenthooks-system; logs in $NODE_DIR/logs):
KUBECONFIG=$KUBECONFIG
  export KUBECONFIG=$KUBECONFIG KUBECACHEDIR=$KUBECACHEDIR
  kubectl -n agenthooks-system get pods,services
  dispatcher Service: http://$ip:8080 (from this host or any Pod;
    agenthooks-dispatcher.agenthooks-system.svc:8080 inside the cluster)
Try:
  kubectl apply -f config/samples/namespaces.yaml -f config/samples/block-dangerous-exec.yaml
  kubectl get agenthooks -A
  curl -s -X POST $ip:8080/v1/dispatch -d @config/samples/events/rm-rf.json
  curl -s -H "Authorization: Bearer \$(cat $DIR/admin.token)" $ip:8080/v1/executions
  (each dispatcher Pod keeps its own SQLite audit rows; the Service picks a Pod per call)
Stop with: make cluster-down   (as root: it puts the host back and checks it)
MSG
}

case "$cmd" in
  down) down; exit $? ;;
  up|up-node) ;;
  *) echo "usage: $0 up|up-node|down DIR" >&2; exit 2 ;;
esac

running && { echo "already running (see $DIR); run make cluster-down first" >&2; exit 1; }
if [[ "$cmd" == up-node ]]; then up_node; exit 0; fi
(cd "$ROOT" && cargo build -q -p agenthooks-operator -p agenthooks-dispatcher --bins)
bash "$ROOT/e2e/controlplane/start.sh" "$DIR/cp" >/dev/null
export KUBECONFIG="$DIR/cp/kubeconfig"
kubectl apply --server-side -f "$ROOT/config/crd/agenthooks.yaml" >/dev/null
kubectl wait --for=condition=Established crd/agenthooks.agenthooks.io crd/tenanthookbudgets.agenthooks.io --timeout=60s >/dev/null
kubectl create namespace agenthooks-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# Who may answer approvals: the admission policy and the approver ClusterRole
# (docs/approvals.md), as the chart installs them.
kubectl apply -k "$ROOT/config/approvals" >/dev/null
[[ -f "$DIR/seal.key" ]] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/seal.key"
[[ -f "$DIR/admin.token" ]] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/admin.token")
mkdir -p "$DIR/logs"
bin="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
start() { # name, args...
  local name=$1; shift
  nohup "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo "$name $!" >> "$APP_PIDS"
}
# Each dispatcher proves who it is on the sync port (docs/sync.md): a ServiceAccount of its
# own bound to the ClusterRole agenthooks-sync, and its token for the audience
# agenthooks.io/sync (its id on the operator: agenthooks-system/dispatcher-N).
kubectl apply -f "$ROOT/config/rbac/dispatcher.yaml" >/dev/null
for i in 1 2; do
  kubectl -n agenthooks-system create serviceaccount "dispatcher-$i" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n agenthooks-system create rolebinding "dispatcher-$i-sync" --clusterrole agenthooks-sync \
    --serviceaccount "agenthooks-system:dispatcher-$i" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  (umask 077; kubectl -n agenthooks-system create token "dispatcher-$i" --audience agenthooks.io/sync --duration 24h > "$DIR/dispatcher-$i.token")
done
start operator "$bin/agenthooks-operator" --sync-addr 127.0.0.1:9090 --metrics-addr 127.0.0.1:9091 --seal-key-file "$DIR/seal.key"
for i in 1 2; do
  start "dispatcher-$i" "$bin/agenthooks-dispatcher" --operator-url http://127.0.0.1:9090 --listen "127.0.0.1:808$i" \
    --operator-token-file "$DIR/dispatcher-$i.token" --seal-key-file "$DIR/seal.key" \
    --audit-db "sqlite://$DIR/audit-$i.db" --admin-token-file "$DIR/admin.token" \
    --http-allow-cidr 127.0.0.1/32 --allow-anonymous
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
