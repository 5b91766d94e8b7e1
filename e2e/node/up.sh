#!/usr/bin/env bash
# Starts a real single-node Kubernetes cluster as host processes, for the chart tier:
#
#   e2e/node/up.sh DIR [IMAGE.tar ...]
#
#   bridge ahnode0 (10.244.0.1/24, the node IP) -> containerd 2 (CRI, runc, Debian's CNI
#   plugins) + images -> etcd + kube-apiserver (on the node IP, real CA) ->
#   kube-controller-manager + kube-scheduler -> kubelet + kube-proxy -> node Ready ->
#   CoreDNS (10.0.0.10) Ready.
#
# IMAGE.tar: OCI archives to import besides the node's own (pause, CoreDNS and the test
# "agent" image agenthooks.test/agent:1, built here from the cached binaries); e.g. the
# output of e2e/images/build.sh. Everything lives under DIR (state, logs, pids, PKI,
# kubeconfig); the host changes (bridge, routes, iptables, sysctls) are undone by
# e2e/node/down.sh DIR, which this script runs itself when it fails. Refuses to start over
# a running node. Needs root. Prints KUBECONFIG=DIR/kubeconfig (last line).
#
#   AGENTHOOKS_E2E_OWNER_PID=PID  a watchdog runs down.sh DIR as soon as PID exits
#   AGENTHOOKS_NODE_TIMEOUT       seconds to wait for each component (default 120)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
T0=$(now_ms)
TIMEOUT="${AGENTHOOKS_NODE_TIMEOUT:-120}"

[[ $# -ge 1 ]] || die "usage: $0 DIR [IMAGE.tar ...]"
[[ $(id -u) -eq 0 ]] || die "the node needs root (bridge, iptables, mounts, cgroups)"
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
shift
EXTRA_IMAGES=()
for img in "$@"; do [[ -f "$img" ]] || die "$img: no such image archive"; EXTRA_IMAGES+=("$(cd "$(dirname "$img")" && pwd)/$(basename "$img")"); done
(( ${#DIR} <= 60 )) || die "DIR is too long for the unix sockets under it (at most 60 characters): $DIR"

for c in ip iptables ip6tables iptables-save nft sysctl openssl setsid jq kubectl mount umount; do
  command -v "$c" >/dev/null || die "$c not found (Debian: iptables nftables iproute2 openssl util-linux jq; scripts/install-deps.sh node)"
done
[[ -d /proc/sys/net/bridge ]] || modprobe br_netfilter 2>/dev/null || true
[[ -d /proc/sys/net/bridge ]] || die "br_netfilter is not loaded (Service traffic between Pods of one bridge needs it)"
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
grep -qw overlay /proc/filesystems || die "overlayfs is not available"

# ---- binaries --------------------------------------------------------------------------------
CP="$("$ROOT/e2e/controlplane/build.sh" | tail -n 1)"
SET="$("$HERE/build.sh" | tail -n 1)"
B="$SET/bin"
for b in "$CP/etcd" "$CP/kube-apiserver" "$B/kubelet" "$B/containerd" "$B/runc" "$B/crictl" "$B/coredns" "$B/pause"; do
  [[ -x "$b" ]] || die "missing $b"
done
# shellcheck disable=SC1091
source "$SET/versions"

# ---- refuse to start over a running node ---------------------------------------------------
# The marker directory is taken atomically: two up.sh cannot both pass.
if ! mkdir "$MARKER_DIR" 2>/dev/null; then
  die "a node is already up (or was not torn down) in $(cat "$MARKER_DIR/dir" 2>/dev/null || echo '?'): run e2e/node/down.sh on that DIR"
fi
trap 'rm -rf "$MARKER_DIR"' EXIT
ip link show "$BRIDGE" >/dev/null 2>&1 && die "link $BRIDGE exists: another node runs here (or run down.sh on its DIR)"
[[ -n "$(find /sys/fs/cgroup -maxdepth 2 -type d -name kubepods 2>/dev/null)" ]] && die "a kubepods cgroup exists: another kubelet runs here"
iptables-save 2>/dev/null | grep -qE '^:KUBE-' && die "KUBE-* iptables chains exist: another kube-proxy/kubelet runs here"
if [[ -s "$DIR/pids" ]]; then
  while read -r _ pid; do kill -0 "$pid" 2>/dev/null && die "$DIR has running processes (pid $pid): run down.sh $DIR"; done < "$DIR/pids"
fi

# ---- from here on, a failure tears down what was started -----------------------------------
rm -rf "$DIR/run" "$DIR/baseline" "$DIR/pids" "$DIR/logs" "$DIR/kubeconfig" "$DIR/env"
mkdir -p "$DIR/run" "$DIR/logs"
: > "$DIR/pids"
echo "$B" > "$DIR/run/bin-dir"
snapshot "$DIR/baseline"
echo "$DIR" > "$MARKER_DIR/dir"
ok=0
on_exit() {
  if [[ $ok -ne 1 ]]; then
    log "start failed after $(( ($(now_ms) - T0) / 1000 ))s; tearing down (logs stay in $DIR/logs)"
    "$HERE/down.sh" "$DIR" >&2 || true
  fi
}
trap on_exit EXIT
R="$DIR/run"
P="$R/pki"
K="$R/kubeconfigs"
export KUBECACHEDIR="$R/kube-cache"
KUBECTL=(kubectl --kubeconfig "$DIR/kubeconfig")

# start NAME CMD... : CMD in its own session, output in logs/NAME.log, "NAME PID" in pids
start() {
  local name=$1 pidfile="$R/$1.pid" i
  shift
  rm -f "$pidfile"
  # shellcheck disable=SC2016
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "$@" </dev/null >"$DIR/logs/$name.log" 2>&1 &
  for i in $(seq 1 100); do [[ -s "$pidfile" ]] && break; sleep 0.05; done
  [[ -s "$pidfile" ]] || die "$name did not start"
  echo "$name $(cat "$pidfile")" >> "$DIR/pids"
}
# wait_until DESC NAME CMD... : polls CMD until it succeeds; fails when process NAME exits or on timeout
wait_until() {
  local desc=$1 name=$2 deadline pid
  shift 2
  deadline=$(( $(date +%s) + TIMEOUT ))
  pid="$(awk -v n="$name" '$1 == n {p = $2} END {print p}' "$DIR/pids")"
  until "$@" >/dev/null 2>&1; do
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$DIR/logs/$name.log" >&2 || true; die "$name exited while waiting for $desc"
    fi
    if (( $(date +%s) > deadline )); then
      tail -n 30 "$DIR/logs/$name.log" >&2 || true; die "timed out after ${TIMEOUT}s waiting for $desc"
    fi
    sleep 0.2
  done
  log "$desc (+$(( ($(now_ms) - T0) / 1000 ))s)"
}

# ---- PKI: a CA, the API server's serving cert, its kubelet client cert, the SA keys, tokens --
mkdir -p "$P" "$K"
(
  cd "$P"
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key
  openssl req -x509 -new -key ca.key -subj "/CN=agenthooks-node-ca" -days 30 -out ca.crt 2>/dev/null
  issue() { # issue NAME SUBJECT EXT_KEY_USAGE [SANS]
    openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"
    openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
    {
      echo "basicConstraints=critical,CA:FALSE"
      echo "keyUsage=critical,digitalSignature,keyEncipherment"
      echo "extendedKeyUsage=$3"
      [[ -n "${4:-}" ]] && echo "subjectAltName=$4"
    } > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
  }
  issue apiserver "/CN=kube-apiserver" serverAuth \
    "IP:$NODE_IP,IP:$API_SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  chmod 600 ./*.key
)
# One static token per identity: user,uid,"groups"
: > "$P/tokens.csv"
chmod 600 "$P/tokens.csv"
kubeconfig() { # kubeconfig NAME USER GROUPS
  local token
  token="$(head -c 24 /dev/urandom | od -An -vtx1 | tr -d ' \n')"
  echo "$token,$2,$2${3:+,\"$3\"}" >> "$P/tokens.csv"
  cat > "$K/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: agenthooks-node
  cluster: {server: "https://$NODE_IP:$API_PORT", certificate-authority: "$P/ca.crt"}
users:
- name: $1
  user: {token: "$token"}
contexts:
- name: agenthooks-node
  context: {cluster: agenthooks-node, user: $1, namespace: default}
current-context: agenthooks-node
KC
  chmod 600 "$K/$1.kubeconfig"
}
kubeconfig admin agenthooks-node-admin system:masters
kubeconfig kube-controller-manager system:kube-controller-manager ""
kubeconfig kube-scheduler system:kube-scheduler ""
kubeconfig kubelet "system:node:$NODE_NAME" system:nodes
kubeconfig kube-proxy system:kube-proxy ""
cp "$K/admin.kubeconfig" "$DIR/kubeconfig"

# ---- network: the bridge first (API server and kubelet bind to its address) -----------------
ip link add "$BRIDGE" type bridge
ip addr add "$NODE_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
# Pods' packets are routed from their own table: back into the bridge (Pods, and Service
# traffic kube-proxy rewrote to a Pod) and nowhere else; the host's own addresses (the API
# server) are in the local table, read first. Nothing from a Pod leaves this machine.
ip route add "$POD_SUBNET" dev "$BRIDGE" src "$NODE_IP" table "$ROUTE_TABLE"
ip route add unreachable default table "$ROUTE_TABLE"
ip rule add from "$CLUSTER_CIDR" iif "$BRIDGE" lookup "$ROUTE_TABLE" priority "$ROUTE_PRIORITY"
# Host traffic to a Service IP that kube-proxy did not rewrite stays on the bridge too.
ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP"
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1

# ---- containerd 2 with CRI --------------------------------------------------------------------
CD="$R/containerd"
mkdir -p "$CD" "$R/cni/net.d"
cat > "$R/cni/net.d/10-agenthooks-node.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "agenthooks-node",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$R/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall", "backend": "iptables"}
  ]
}
JSON
cat > "$CD/config.toml" <<TOML
# containerd for the harness node only: its own socket, root and state under DIR.
version = 3
root = "$CD/root"
state = "$CD/state"
[grpc]
  address = "$CD/containerd.sock"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$CD/opt"
  [plugins."io.containerd.nri.v1.nri"]
    disable = true
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "registry.k8s.io/pause:3.10.1"
  [plugins."io.containerd.cri.v1.runtime"]
    # No CAP_SYS_RESOURCE on these machines: a sandbox may not lower its oom_score_adj.
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_cdi = false
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "$B/runc"
          Root = "$CD/runc"
          SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["$SET/cni"]
      conf_dir = "$R/cni/net.d"
      max_conf_num = 1
TOML
# The shim is found on PATH.
start containerd env PATH="$B:$PATH" "$B/containerd" --config "$CD/config.toml"
CTR=("$B/ctr" --address "$CD/containerd.sock" --namespace k8s.io)
ctr_version() { "${CTR[@]}" version 2>>"$DIR/logs/ctr.log"; }
wait_until "containerd up" containerd ctr_version

# The node's own images, made like e2e/images/build.sh makes ours (no registry).
IMG="$R/images"
mkdir -p "$IMG"
rootfs() { rm -rf "$IMG/$1"; mkdir -p "$IMG/$1/bin" "$IMG/$1/etc" "$IMG/$1/tmp"; chmod 1777 "$IMG/$1/tmp"; }
rootfs pause; install -m 0755 "$B/pause" "$IMG/pause/bin/pause"
"$ROOT/e2e/images/oci-archive.sh" "$IMG/pause" registry.k8s.io/pause:3.10.1 "$IMG/pause.tar" \
  '{"Entrypoint":["/bin/pause"],"User":"65535:65535"}'
rootfs coredns; install -m 0755 "$B/coredns" "$IMG/coredns/bin/coredns"
"$ROOT/e2e/images/oci-archive.sh" "$IMG/coredns" "agenthooks.test/coredns:v$COREDNS_VERSION" "$IMG/coredns.tar" \
  '{"Entrypoint":["/bin/coredns"],"User":"65532:65532"}'
# The "agent": busybox (sh, wget, nc, nslookup, ...) to call the dispatcher from a Pod.
"$ROOT/e2e/images/agent.sh" "$B/busybox" "$IMG/agent.tar"
for img in "$IMG/pause.tar" "$IMG/coredns.tar" "$IMG/agent.tar" "${EXTRA_IMAGES[@]}"; do
  # (ctr warns on stderr that cgroup v1 is deprecated: kept out of the way, but kept)
  "${CTR[@]}" images import "$img" >/dev/null 2>>"$DIR/logs/ctr.log" || { cat "$DIR/logs/ctr.log" >&2; die "ctr images import $img failed"; }
done
log "images: $("${CTR[@]}" images ls -q 2>>"$DIR/logs/ctr.log" | grep -v '^sha256:' | tr '\n' ' ')"

# ---- etcd + kube-apiserver + kube-controller-manager + kube-scheduler ------------------------
start etcd "$CP/etcd" --name=node --data-dir="$R/etcd" \
  --listen-client-urls="http://$NODE_IP:2379" --advertise-client-urls="http://$NODE_IP:2379" \
  --listen-peer-urls="http://$NODE_IP:2380" --initial-advertise-peer-urls="http://$NODE_IP:2380" \
  --initial-cluster="node=http://$NODE_IP:2380" --initial-cluster-state=new \
  --listen-metrics-urls="http://$NODE_IP:2381" --unsafe-no-fsync --log-level=warn
start kube-apiserver "$CP/kube-apiserver" \
  --etcd-servers="http://$NODE_IP:2379" \
  --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port="$API_PORT" \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
  --token-auth-file="$P/tokens.csv" --anonymous-auth=false \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --api-audiences=https://kubernetes.default.svc.cluster.local \
  --service-account-signing-key-file="$P/sa.key" --service-account-key-file="$P/sa.pub" \
  --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
  --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP --profiling=false --v=1
wait_until "kube-apiserver ready" kube-apiserver "${KUBECTL[@]}" --request-timeout=5s get --raw /readyz
start kube-controller-manager "$B/kube-controller-manager" \
  --kubeconfig="$K/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$K/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$K/kube-controller-manager.kubeconfig" \
  --use-service-account-credentials=true --service-account-private-key-file="$P/sa.key" \
  --root-ca-file="$P/ca.crt" --cluster-cidr="$CLUSTER_CIDR" --service-cluster-ip-range="$SERVICE_CIDR" \
  --flex-volume-plugin-dir="$R/kcm-flexvolume" \
  --leader-elect=false --bind-address="$NODE_IP" --secure-port=10257 --profiling=false --v=1
start kube-scheduler "$B/kube-scheduler" \
  --kubeconfig="$K/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="$K/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$K/kube-scheduler.kubeconfig" \
  --leader-elect=false --bind-address="$NODE_IP" --secure-port=10259 --profiling=false --v=1

# ---- kubelet + kube-proxy ---------------------------------------------------------------------
mkdir -p "$R/kubelet" "$R/pod-logs"
cat > "$R/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$CD/containerd.sock
imageServiceEndpoint: unix://$CD/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false          # kubelet 1.35 refuses cgroup v1 by default; these machines have it
failSwapOn: false
oomScoreAdj: 0               # no CAP_SYS_RESOURCE: lowering it fails
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: $NODE_IP
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [$DNS_SERVICE_IP]
resolvConf: ""               # Pods get the cluster's DNS only: no name outside it resolves
podLogsDir: $R/pod-logs
volumePluginDir: $R/kubelet-volume-plugins
serializeImagePulls: false
# a test node shares its disk with the build: evict for disk only when it is truly full
# (2% of a 252 GiB disk is 5.4 GB, and a cold build leaves less than that free at times)
evictionHard: {memory.available: 100Mi, nodefs.available: 256Mi, imagefs.available: 256Mi, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
rotateCertificates: false
serverTLSBootstrap: false
YAML
start kubelet "$B/kubelet" --config="$R/kubelet.yaml" --kubeconfig="$K/kubelet.kubeconfig" \
  --root-dir="$R/kubelet" --cert-dir="$R/kubelet/pki" --node-ip="$NODE_IP" \
  --hostname-override="$NODE_NAME" --v=1
cat > "$R/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $K/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $NODE_NAME
clusterCIDR: $CLUSTER_CIDR
bindAddress: $NODE_IP
healthzBindAddress: $NODE_IP:10256
metricsBindAddress: $NODE_IP:10249
nodePortAddresses: [$NODE_IP/32]
iptables: {localhostNodePorts: false}
oomScoreAdj: 0
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
start kube-proxy "$B/kube-proxy" --config="$R/kube-proxy.yaml" --v=1
wait_until "node $NODE_NAME Ready" kubelet "${KUBECTL[@]}" wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s

# ---- CoreDNS: the dispatchers find the operator by its Service name --------------------------
"${KUBECTL[@]}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  # cluster.local only: no forward plugin, so no query leaves the cluster
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 5
        }
        cache 5
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      priorityClassName: system-cluster-critical
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
        # port 53 without a capability (an added one is not effective for a non-root user)
        sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: "0"}]
      containers:
      - name: coredns
        image: agenthooks.test/coredns:v$COREDNS_VERSION
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        livenessProbe: {httpGet: {path: /health, port: 8080}, periodSeconds: 10}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 1}
        resources: {requests: {cpu: 20m, memory: 32Mi}, limits: {memory: 128Mi}}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_SERVICE_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
YAML
wait_until "CoreDNS ready" kubelet "${KUBECTL[@]}" -n kube-system rollout status deploy/coredns --timeout=2s

# ---- watchdog: down.sh when the owner exits ----------------------------------------------------
if [[ -n "${AGENTHOOKS_E2E_OWNER_PID:-}" ]]; then
  owner="$AGENTHOOKS_E2E_OWNER_PID"
  starttime() { local s; s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1; s="${s##*) }"; set -- $s; echo "${20}"; }
  owner_start="$(starttime "$owner")" || die "owner pid $owner does not exist"
  # shellcheck disable=SC2016
  start watchdog bash -c '
    owner=$1 owner_start=$2 dir=$3 down=$4
    starttime() { local s; s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1; s="${s##*) }"; set -- $s; echo "${20}"; }
    trap "" HUP INT
    while [[ "$(starttime "$owner")" == "$owner_start" ]]; do sleep 1; done
    echo "owner $owner exited: tearing the node down"
    exec "$down" "$dir"
  ' watchdog "$owner" "$owner_start" "$DIR" "$HERE/down.sh"
fi

cat > "$DIR/env" <<ENV
KUBECONFIG=$DIR/kubeconfig
KUBECACHEDIR=$KUBECACHEDIR
CONTAINER_RUNTIME_ENDPOINT=unix://$CD/containerd.sock
NODE_BIN=$B
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
APISERVER_URL=https://$NODE_IP:$API_PORT
ENV
ok=1
log "node up in $(( ($(now_ms) - T0) / 1000 ))s (k8s v$K8S_VERSION, containerd v$CONTAINERD_VERSION; dir $DIR)"
echo "KUBECONFIG=$DIR/kubeconfig"
