//! The chart tier on a real node (issue 11): `charts/agenthooks` on a single-node cluster
//! whose kubelet runs the images that `e2e/images/build.sh` builds like the Dockerfile
//! does, exercised by "agent" Pods that call the dispatcher through its Service.
//!
//! One node for the whole tier: [`support::run`] starts it, runs the scenarios below in
//! order (each timed in an `E2E-FIGURE scenario_<name>_s` line), prints the cluster's state
//! when one fails, and always tears the node down; the run fails if `down.sh` finds the
//! host different from before (iptables, links, routes, sysctls, mounts, cgroups, paths).
//! `AGENTHOOKS_NODE_SCENARIOS=name,...` runs only some (each installs what it needs).
//!
//! Ignored by `cargo test` (it needs root, builds release images and starts a node: a few
//! minutes once the binaries are cached, many minutes cold); `make test-node` runs it.

mod audit;
mod edition;
mod failover;
mod faults;
mod install;
mod kustomize;
mod manifests;
mod rollout;
mod support;

#[test]
#[ignore = "needs root and starts a real node (kubelet, containerd): make test-node"]
fn chart_tier_on_a_real_node() {
    support::run(&[
        ("install", install::run),
        ("manifests", manifests::run),
        ("leader-failover", failover::run),
        ("rollout", rollout::run),
        ("faults", faults::run),
        ("audit", audit::run),
        ("edition-uninstall", edition::run),
        ("kustomize", kustomize::run),
    ]);
}
