# agenthooks — the two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
LISTEN ?= 127.0.0.1:8080
CLUSTER_DIR ?= $(CURDIR)/.cluster

# A fresh clone (CI) builds without incremental state: ~8 GB of target/ that nobody there
# reuses. A working tree that has it keeps it.
ifeq ($(wildcard $(CURDIR)/target/debug/incremental),)
export CARGO_INCREMENTAL ?= 0
endif

.PHONY: run test test-node e2e-kind deps build crds openapi lint bench bench-opa cluster cluster-down controlplane node fuzz fuzz-build fuzz-replay

## run: the dispatcher in standalone mode on the sample hooks, on $(LISTEN). Callers send
## the token made once into .agenthooks-caller-token (caller acme-runtime, tenant acme:
## .agenthooks-callers.yaml lists its sha256); history and dry runs need the admin token,
## made once into .agenthooks-admin-token
run:
	@test -s .agenthooks-admin-token || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > .agenthooks-admin-token)
	@test -s .agenthooks-caller-token || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > .agenthooks-caller-token)
	@printf 'callers:\n  - name: acme-runtime\n    tokenSha256: "%s"\n    tenants: [acme]\n' "$$(sha256sum < .agenthooks-caller-token | cut -d' ' -f1)" > .agenthooks-callers.yaml
	$(CARGO) run -p agenthooks-dispatcher -- --hooks config/samples --listen $(LISTEN) --callers-file .agenthooks-callers.yaml --admin-token-file .agenthooks-admin-token

## deps: install what a fresh Debian machine lacks for the tests
deps:
	@bash scripts/install-deps.sh

## test: every test: unit (with the policy test suite of config/samples/tests, run by
## dispatcher/tests/policy_tests.rs), end-to-end on a real kube-apiserver + etcd, then the chart tier on a
## real node (root; the node's binaries built once and cached by version; its images pack
## the debug build that the tests already made, so a test run compiles nothing twice:
## `make test-node` packs a release build)
test: deps
	bash scripts/install-deps.sh node
	bash scripts/install-deps.sh runtimes
	bash e2e/controlplane/build.sh >/dev/null
	bash e2e/controlplane/build-helm.sh >/dev/null
	bash e2e/argocd-health/build.sh >/dev/null
	bash e2e/node/build.sh >/dev/null
	bash scripts/install-deps.sh schemathesis
	bash scripts/install-deps.sh browser
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-fail-fast
	AGENTHOOKS_IMAGE_BIN_DIR=$(CURDIR)/target/debug $(CARGO) test -p agenthooks-e2e --test chart_node -- --ignored --nocapture --test-threads=1

## test-node: the chart tier on a real single-node cluster (root; e2e/node/README.md): the
## node's binaries (built once, cached by version), the release images as the Dockerfile
## makes them, then on one node in turn: helm install, server-side dry runs and RBAC,
## leader failover and dispatcher rollout under load, faults, audit on PostgreSQL and on
## a volume, helm upgrade to Standard and uninstall, kubectl apply -k config/default; the
## node is torn down and the host checked. Then `make cluster NODE=1` and `make
## cluster-down` once. AGENTHOOKS_NODE_SCENARIOS=a,b runs some scenarios only;
## AGENTHOOKS_E2E_KUBECONFIG runs them on an existing cluster
test-node: deps
	bash scripts/install-deps.sh node
	bash e2e/controlplane/build.sh >/dev/null
	bash e2e/controlplane/build-helm.sh >/dev/null
	bash e2e/node/build.sh >/dev/null
	$(CARGO) test -p agenthooks-e2e --test chart_node -- --ignored --nocapture --test-threads=1

## e2e-kind: the chart tier on a kind cluster, for a machine with Docker and kind (not the
## CI machines: no registry there; docs/kind.md): creates the cluster agenthooks-e2e from
## e2e/kind/cluster.yaml, builds both images with `docker build --target`, loads them and the
## agent image with `kind load docker-image`, runs the chart tier against the cluster
## (AGENTHOOKS_E2E_KUBECONFIG) and deletes it, passed or failed (KEEP=1 keeps it)
e2e-kind:
	bash e2e/kind/run.sh

## node: build (or find cached) the real node's binaries
node:
	bash e2e/node/build.sh

build:
	$(CARGO) build --workspace

## crds: regenerate the CRD YAML from the Rust types
crds:
	$(CARGO) run -q -p agenthooks-crds --bin crdgen -- --write

## openapi: regenerate docs/openapi.json (what GET /openapi.json serves) from the Rust types
openapi:
	$(CARGO) run -q -p agenthooks-dispatcher -- openapi --write

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## bench: first issue 15's agenthooks against OPA (bench-opa, below); then dispatch overhead
## against a bare axum handler, side by side in one run; then
## issue 3's figures on a real control plane (status writes per hook under 2,000
## decisions/s, breaker trip -> open breaker seen by every dispatcher vs apply -> served); then
## issue 5's: audit rows/s into PostgreSQL while decisions run, latency audit on vs off; then
## issue 12's: decision latency with callers authenticated (callers file; Kubernetes, cached
## TokenReview) vs anonymous; then issue 13's: one real Claude Code tool turn with the agenthooks
## hook vs without (docs/runtimes.md); then issue 10's: the decision path of this tree against $(BENCH_BASE) (built in ~/.cache); then
## issue 11's on the real node (root): apply -> enforced by 3 dispatcher Pods vs the process
## tier, image sizes, Pod RSS idle and at 2,000 decisions/s; issue 13's: a runtime's native hook
## route and the command shim against /v1/dispatch; issue 15's on the real control plane: 10,000
## AgentHooks applied in chunks -> all Accepted and Ready, one kubectl apply edit -> enforced by
## both dispatchers (p50/p99), RSS of operator and dispatchers, side by side with 1,000
BENCH_BASE ?= 312fd1b
bench: deps bench-opa
	bash e2e/controlplane/build.sh >/dev/null
	$(CARGO) build --release -p agenthooks-operator -p agenthooks-dispatcher --bins
	$(CARGO) bench -p agenthooks-dispatcher --bench dispatch_overhead
	$(CARGO) bench -p agenthooks-dispatcher --bench telemetry_overhead
	$(CARGO) bench -p agenthooks-dispatcher --bench native_hooks
	$(CARGO) bench -p agenthooks-e2e --bench safeguards
	$(CARGO) bench -p agenthooks-e2e --bench audit
	$(CARGO) bench -p agenthooks-e2e --bench callers
	$(CARGO) bench -p agenthooks-e2e --bench scale
	bash scripts/install-deps.sh runtimes
	$(CARGO) bench -p agenthooks-e2e --bench runtimes
	bash bench/before-after.sh $(BENCH_BASE)
	bash scripts/install-deps.sh node
	bash e2e/node/build.sh >/dev/null
	bash e2e/controlplane/build-helm.sh >/dev/null
	$(CARGO) bench -p agenthooks-e2e --bench node

## bench-opa: agenthooks against OPA in one run (issue 15; bench/README.md): builds OPA and
## the bench's Go driver from e2e/opa/ (cached by version outside the repository), the
## release dispatcher, runs the bench (writes bench/report.md and bench/report.json) and
## draws bench/report.png
bench-opa:
	bash scripts/install-deps.sh bench
	bash e2e/opa/build.sh >/dev/null
	$(CARGO) build --release -p agenthooks-dispatcher --bins
	$(CARGO) bench -p agenthooks-e2e --bench opa
	/usr/bin/python3 bench/plot.py

controlplane:
	bash e2e/controlplane/build.sh

## cluster: a real control plane + CRDs + operator + two dispatchers, in the background;
## NODE=1: a real node instead (root; e2e/node/README.md) with the release images and the
## Helm chart installed (prints the KUBECONFIG line)
NODE ?=
cluster:
	bash scripts/cluster.sh $(if $(filter 1,$(NODE)),up-node,up) "$(CLUSTER_DIR)"

## cluster-down: stop either flavour; the node's host is put back and checked (exit 1 if not)
cluster-down:
	bash scripts/cluster.sh down "$(CLUSTER_DIR)"

## fuzz: each cargo-fuzz target (fuzz/, nightly) for $(FUZZ_SECONDS) s in turn, one process,
## a hang over 1 s or $(FUZZ_RSS_MB) MB of RSS counts as a crash; new inputs land in
## fuzz/corpus/<target>/, which is then minimised (fuzz/minimize.sh: the fewest inputs
## that, with fuzz/seeds/<target>/, cover every edge). Crashers go to
## fuzz/artifacts/<target>/ and stop the run. `make test` replays seeds and corpus.
FUZZ_SECONDS ?= 300
FUZZ_RSS_MB ?= 2048
FUZZ_TARGETS ?= dispatch_body manifest cel ssrf provider_answer
FUZZ_NICE ?= nice -n 10
fuzz: fuzz-build
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  mkdir -p corpus/$$t; \
	  dict=; test -f dict/$$t.dict && dict=-dict=dict/$$t.dict; \
	  $(FUZZ_NICE) $(CARGO) +nightly fuzz run $$t corpus/$$t seeds/$$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=1 -rss_limit_mb=$(FUZZ_RSS_MB) \
	    -print_final_stats=1 $$dict || exit 1; \
	  FUZZ_RSS_MB=$(FUZZ_RSS_MB) $(FUZZ_NICE) ./minimize.sh $$t || exit 1; \
	done
	@du -sh fuzz/corpus

fuzz-build:
	@$(CARGO) +nightly fuzz --version >/dev/null 2>&1 || $(CARGO) install cargo-fuzz
	cd fuzz && $(FUZZ_NICE) $(CARGO) +nightly fuzz build

## fuzz-replay: only the stable replay of fuzz/seeds and fuzz/corpus (also part of `make test`)
fuzz-replay:
	$(CARGO) test -p agenthooks-dispatcher --test fuzz_corpus
