// Command kind-config-check reads a kind cluster config as `kind create cluster --config`
// does, with kind's own types, so a test can check e2e/kind/cluster.yaml without Docker:
//
//	kind-config-check FILE
//
// It decodes FILE into kind's v1alpha4 Cluster (apiVersion kind.x-k8s.io/v1alpha4, kind
// Cluster; a field kind does not know is an error, as in kind), applies kind's defaults
// (v1alpha4.SetDefaultsCluster), refuses what kind refuses before creating anything (the
// cluster name, node roles and images, at least one control-plane node, the IP family,
// pod and service subnets, the proxy mode, port numbers), and prints the defaulted config
// as JSON. Exit status 1 with the reasons on stderr when FILE is not a config kind runs.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
)

// clusterName is what kind accepts as a cluster name (it becomes container names).
var clusterName = regexp.MustCompile(`^[a-z0-9.-]+$`)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kind-config-check FILE")
		os.Exit(2)
	}
	cfg, err := load(os.Args[1])
	if err == nil {
		err = check(cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

// load decodes path into kind's v1alpha4 types, strictly, and applies kind's defaults.
func load(path string) (*v1alpha4.Cluster, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var meta struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("no apiVersion/kind: %w", err)
	}
	if meta.APIVersion != "kind.x-k8s.io/v1alpha4" {
		return nil, fmt.Errorf("apiVersion %q: kind reads kind.x-k8s.io/v1alpha4", meta.APIVersion)
	}
	if meta.Kind != "Cluster" {
		return nil, fmt.Errorf("kind %q: kind reads Cluster", meta.Kind)
	}
	cfg := &v1alpha4.Cluster{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return nil, fmt.Errorf("not a v1alpha4 Cluster: %w", err)
	}
	v1alpha4.SetDefaultsCluster(cfg)
	return cfg, nil
}

// check returns every reason kind would refuse cfg at `kind create cluster`, joined.
func check(cfg *v1alpha4.Cluster) error {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	// kind names an unnamed cluster "kind"; a name given here must be one kind accepts
	if cfg.Name != "" && !clusterName.MatchString(cfg.Name) {
		bad("name %q: kind wants %s", cfg.Name, clusterName)
	}
	controlPlanes := 0
	for i, n := range cfg.Nodes {
		switch n.Role {
		case v1alpha4.ControlPlaneRole:
			controlPlanes++
		case v1alpha4.WorkerRole:
		default:
			bad("nodes[%d].role %q: control-plane or worker", i, n.Role)
		}
		if n.Image == "" {
			bad("nodes[%d].image is empty", i)
		}
		for j, m := range n.ExtraPortMappings {
			for what, p := range map[string]int32{"hostPort": m.HostPort, "containerPort": m.ContainerPort} {
				if p < -1 || p > 65535 {
					bad("nodes[%d].extraPortMappings[%d].%s %d: not a port", i, j, what, p)
				}
			}
		}
	}
	if controlPlanes == 0 {
		bad("nodes: no control-plane node")
	}
	nw := cfg.Networking
	switch nw.IPFamily {
	case v1alpha4.IPv4Family, v1alpha4.IPv6Family, v1alpha4.DualStackFamily:
	default:
		bad("networking.ipFamily %q: ipv4, ipv6 or dual", nw.IPFamily)
	}
	for what, subnets := range map[string]string{"podSubnet": nw.PodSubnet, "serviceSubnet": nw.ServiceSubnet} {
		for _, s := range strings.Split(subnets, ",") {
			if _, _, err := net.ParseCIDR(s); err != nil {
				bad("networking.%s %q: %v", what, s, err)
			}
		}
	}
	switch nw.KubeProxyMode {
	case v1alpha4.IPTablesProxyMode, v1alpha4.IPVSProxyMode, v1alpha4.NFTablesProxyMode, "none": // kind also takes "none" (no kube-proxy)
	default:
		bad("networking.kubeProxyMode %q: iptables, nftables, ipvs or none", nw.KubeProxyMode)
	}
	if nw.APIServerPort < -1 || nw.APIServerPort > 65535 {
		bad("networking.apiServerPort %d: not a port", nw.APIServerPort)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
