# Sourced by up.sh and down.sh: the node's fixed names and addresses, and small helpers.
# One node per machine: the bridge, its addresses and the policy-routing table are fixed.

NODE_NAME=agenthooks-node
BRIDGE=ahnode0                 # the Pods' bridge; its address is the node IP
NODE_IP=10.244.0.1
POD_SUBNET=10.244.0.0/24       # host-local IPAM on this node
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.0.0.0/24
API_SERVICE_IP=10.0.0.1        # the `kubernetes` Service
DNS_SERVICE_IP=10.0.0.10       # CoreDNS
API_PORT=6443
ROUTE_TABLE=4244               # Pods' traffic is routed from this table only (see up.sh)
ROUTE_PRIORITY=4244
MARKER_DIR=/run/agenthooks-node  # MARKER_DIR/dir names the running node's DIR

# Paths outside DIR that the components write to whatever their flags say (kubelet's
# device-plugin and container-log dirs, libcni's result cache, containerd's fixed run dir for
# shim sockets, ...). down.sh removes those that did not exist when up.sh started.
FIXED_PATHS=(/var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods
  /run/containerd /var/run/containerd /run/netns /var/run/netns /run/runc
  /usr/libexec/kubernetes /etc/cni /opt/cni /etc/kubernetes /var/lib/containerd
  /opt/containerd /run/nri /var/run/nri /var/lib/nri)

# sysctls down.sh puts back when they differ from the baseline (the kubelet sets
# vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops and
# kernel.keys.*; up.sh sets ip_forward and bridge-nf-call-*). Any other difference is reported.
SYSCTL_RESTORE='^(kernel\.panic|kernel\.panic_on_oops|kernel\.keys\.root_max(keys|bytes)|vm\.overcommit_memory|vm\.panic_on_oom|net\.ipv4\.ip_forward|net\.ipv4\.conf\.(all|default)\.[a-z_]+|net\.ipv6\.conf\.(all|default)\.forwarding|net\.bridge\.bridge-nf-call-(iptables|ip6tables|arptables)|net\.netfilter\.nf_conntrack_max|net\.netfilter\.nf_conntrack_tcp_timeout_(established|close_wait)) ='
# Keys that move on their own (counters, random values): never compared.
SYSCTL_VOLATILE='^(kernel\.random\.|kernel\.ns_last_pid|fs\.(dentry-state|file-nr|inode-nr|inode-state|quota\.)|kernel\.pty\.nr|net\.netfilter\.nf_conntrack_count|kernel\.tainted|fs\.binfmt_misc|dev\.|net\.ipv4\.neigh\.|net\.ipv6\.neigh\.|net\.ipv4\.conf\.(veth|ahnode)|net\.ipv6\.conf\.(veth|ahnode)|net\.ipv4\.route\.|net\.ipv6\.route\.|vm\.stat_refresh|kernel\.sched_domain|net\.core\.default_qdisc|fs\.aio-nr|kernel\.perf_event_max_sample_rate)'

log() { echo "[node] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now_ms() { date +%s%3N; }

# The iptables chains the node's components create (kubelet, kube-proxy: KUBE-*; CNI: CNI-*).
OUR_CHAINS='^(KUBE|CNI)-'

# snapshot DIR : what down.sh compares the host with
snapshot() {
  local d=$1
  mkdir -p "$d"
  sysctl -a 2>/dev/null | grep -Ev "$SYSCTL_VOLATILE" | sort > "$d/sysctls"
  iptables-save 2>/dev/null | normalize_rules > "$d/iptables"
  ip6tables-save 2>/dev/null | normalize_rules > "$d/ip6tables"
  if command -v nft >/dev/null; then nft list tables 2>/dev/null | sort > "$d/nft-tables"; else : > "$d/nft-tables"; fi
  ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort > "$d/links"
  { ip -4 route show table all; ip -6 route show table all; } 2>/dev/null | grep -v ' proto kernel ' | grep -vE '^(local|broadcast|multicast|anycast) ' | sort > "$d/routes"
  { ip -4 rule; ip -6 rule; } 2>/dev/null | sort > "$d/rules"
  awk '{print $2}' /proc/mounts | sort > "$d/mounts"
  find /sys/fs/cgroup -maxdepth 2 -type d -name kubepods 2>/dev/null | sort > "$d/cgroups"
  local p
  for p in "${FIXED_PATHS[@]}"; do if [[ -e "$p" || -L "$p" ]]; then echo "$p"; fi; done > "$d/paths"
}
# iptables-save without comments, counters and generated headers
normalize_rules() { grep -v '^#' | sed -E 's/ \[[0-9]+:[0-9]+\]$//' || true; }
