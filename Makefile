# scoreflow: event-driven cluster scoring for Open Cluster Management.
# `make help` lists the targets.

SHELL := /usr/bin/env bash
GO ?= go
# Where `make tools` caches the real servers (outside the clone, shared by clones).
SCOREFLOW_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/scoreflow
export SCOREFLOW_CACHE
# Executions per fuzz target in `make test`: a few seconds each on 2 cores. A count has no deadline
# to race in Go's fuzz coordinator (hack/fuzz.sh); `make fuzz FUZZTIME=5m` fuzzes for longer.
FUZZTIME ?= 50000x
TEST_TIMEOUT ?= 30m
# A fleet benchmark alone takes about 25 minutes here.
BENCH_TIMEOUT ?= 2h

FUZZ_PKGS := ./pkg/contract

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "; printf "Targets:\n"} /^[a-zA-Z0-9_\/-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo "Tools cache: $(SCOREFLOW_CACHE) (set SCOREFLOW_CACHE to move it)"

# The servers `scoreflow run` starts (tools.ForRun): `make run` builds only these; `make tools`
# and `make test` build every one (kube-controller-manager, the addon manager and the governance
# policy propagator only serve tests).
RUN_TOOLS := etcd kube-apiserver prometheus placement knative

.PHONY: tools
tools: ## Build every real server tests use into the cache: kube-apiserver, etcd, kube-controller-manager (garbage collector only), Prometheus (also with its Kubernetes discovery), the OCM placement controller and addon manager, Knative Eventing, the governance policy propagator, Jaeger (once; minutes the first time, with progress).
	@tools/build.sh

.PHONY: tools/run
tools/run: ## Build only the servers `make run` needs: etcd, kube-apiserver, Prometheus, the placement controller, Knative Eventing.
	@tools/build.sh $(RUN_TOOLS)

.PHONY: build
build: ## Compile every package and put each function and the CLI in bin/.
	@mkdir -p bin
	@echo "build: the functions and the CLI into bin/ (cold: a few minutes)"
	$(GO) build -o bin/ ./functions/... ./cmd/scoreflow
	$(GO) build ./...
	@echo "built: $$(ls bin | tr '\n' ' ')"

# Flags for `scoreflow run` (e.g. RUN_ARGS=--lock-wait=10m).
RUN_ARGS ?=

.PHONY: run
run: tools/run build ## Run the whole flow locally on real Knative Eventing: hub, placement controller, Prometheus with demo data, every function. Ctrl-C stops it.
	bin/scoreflow run $(RUN_ARGS)

.PHONY: browser
browser: ## Install Debian's Chromium if missing (the scores page's test drives it headless; uses sudo unless root).
	@hack/install-chromium.sh

.PHONY: cbc
cbc: ## Install COIN-OR CBC if missing (pkg/optimizer/solver checks its optima against CBC's and times both; uses sudo unless root).
	@hack/install-cbc.sh

.PHONY: run-oidc
run-oidc: tools/run build ## The same with Knative's sender identity on and the oidc variant (config/oidc; scoreflow run --oidc).
	bin/scoreflow run --oidc $(RUN_ARGS)

.PHONY: run-tls
run-tls: tools/run build ## The same with Knative's transport encryption strict and sender identity on (config/oidc-tls; scoreflow run --tls --oidc; a local CA stands in for cert-manager).
	bin/scoreflow run --tls --oidc $(RUN_ARGS)

.PHONY: run-tracing
run-tracing: tools/run build ## The same with traces: Jaeger (built on first use, minutes) holds every hop of every event; its UI's address is printed (scoreflow run --tracing).
	@tools/build.sh jaeger
	bin/scoreflow run --tracing $(RUN_ARGS)

.PHONY: dsf-deps
dsf-deps: ## Install Debian's FastAPI, uvicorn, pydantic, Jinja2 and requests if missing (the DSF tests run DSF's own scorers unmodified; uses sudo unless root).
	@hack/install-dsf-deps.sh

.PHONY: test
test: tools browser dsf-deps cbc lint ## Run every test (unit, integration against a real hub and Prometheus, end-to-end; with -race where our code shares memory between goroutines) and a short fuzz run.
	@GO=$(GO) TEST_TIMEOUT=$(TEST_TIMEOUT) hack/test.sh
	@$(MAKE) --no-print-directory fuzz

.PHONY: unit
unit: browser dsf-deps cbc ## Run the tests that need no built servers (no `make tools`; the Debian packages yes): a green run in minutes (hack/unit.sh says which).
	@GO=$(GO) hack/unit.sh

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME executions (default 50000x; make fuzz FUZZTIME=5m runs each 5 minutes); a finding prints its input.
	@GO=$(GO) FUZZTIME=$(FUZZTIME) hack/fuzz.sh $(FUZZ_PKGS)

.PHONY: bench
bench: tools cbc ## Run the benchmarks: scoring, solver (beside CBC on the same instances) and writer units (per op); writer throughput and latency vs their baselines, end to end (fixed rounds); the fleet at 10,000 clusters, the writer's memory and a fleet's steady state at 1,000, 10,000 DSF agents through the agent gateway (about an hour here; docs/benchmarks.md holds one run's figures).
	@GO=$(GO) BENCH_TIMEOUT=$(BENCH_TIMEOUT) hack/bench.sh

.PHONY: lint
lint: ## gofmt and go vet.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: clean
clean: ## Remove bin/ (the tools cache stays: delete it by hand to rebuild the servers).
	rm -rf bin

# ---- Knative deployment ---------------------------------------------------------------------------
# Builds every function with ko and applies a variant of config/ (kustomize overlays of deploy/,
# brokers/, triggers/, eventtypes/ and oidc/) to KUBE_CONTEXT (`kn quickstart kind` makes a kind
# cluster named knative, context kind-knative). Re-applying a variant keeps it: it is the whole
# desired state, nothing is patched by hand. ko is needed only here:
# `go install github.com/google/ko@latest`. None of these targets is part of `make test`;
# test/deploy and config/ check the same YAML. See docs/quickstart.md.
KO ?= ko
KUBECTL ?= kubectl
KIND_CLUSTER_NAME ?= knative
# Where images go: kind.local loads them straight into the kind cluster's nodes.
KO_DOCKER_REPO ?= kind.local
# The context deploy and undeploy act on. Images loaded into a kind cluster belong to that cluster,
# so with kind.local it is kind-$(KIND_CLUSTER_NAME) whatever the current context is (`kind create
# cluster` switches the current context to the cluster it creates); with a registry, the current one.
KUBE_CONTEXT ?= $(if $(filter kind.local,$(KO_DOCKER_REPO)),kind-$(KIND_CLUSTER_NAME),$(shell $(KUBECTL) config current-context 2>/dev/null))
# The platform the images are built for: this machine's, which is what its kind nodes run (ko alone
# builds linux/amd64, which Apple silicon's arm64 nodes cannot run). For a registry serving nodes of
# both: PLATFORM=linux/amd64,linux/arm64.
PLATFORM ?= linux/$(shell $(GO) env GOARCH)
# What to deploy: a directory of config/ (VARIANT), or any kustomization (CONFIG), e.g. one of
# your own on top of a variant (oidc/README.md).
VARIANT ?= default
CONFIG ?= config/$(VARIANT)
VARIANTS := $(patsubst config/%/kustomization.yaml,%,$(wildcard config/*/kustomization.yaml))
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
KO_ENV = KO_CONFIG_PATH=ko.yaml KO_DOCKER_REPO=$(KO_DOCKER_REPO) KIND_CLUSTER_NAME=$(KIND_CLUSTER_NAME) VERSION=$(VERSION)

.PHONY: ko-installed
ko-installed:
	@command -v $(KO) >/dev/null || { echo "ko is not installed: go install github.com/google/ko@latest (see docs/quickstart.md)"; exit 1; }

.PHONY: variant
variant:
	@test -f $(CONFIG)/kustomization.yaml || { echo "$(CONFIG) has no kustomization.yaml: VARIANT is one of $(VARIANTS), or set CONFIG to a kustomization"; exit 1; }
	@test -n "$(KUBE_CONTEXT)" || { echo "no kubectl context: set KUBE_CONTEXT (kubectl config get-contexts lists them)"; exit 1; }

.PHONY: deploy
deploy: ko-installed variant ## Build the functions with ko and deploy VARIANT (default, oidc, tls, oidc-tls, kafka, kafka-oidc, large-fleet: config/; or CONFIG, a kustomization of your own) to KUBE_CONTEXT (kind-knative with kind images).
	@echo "deploy: $(CONFIG) to context $(KUBE_CONTEXT), images for $(PLATFORM) into $(KO_DOCKER_REPO)"
	set -o pipefail; $(KUBECTL) kustomize $(CONFIG) | $(KO_ENV) $(KO) apply --context=$(KUBE_CONTEXT) --platform=$(PLATFORM) -f -

.PHONY: undeploy
undeploy: variant ## Remove everything `make deploy VARIANT=...` created (the namespace, the cluster-wide RBAC, the broker, triggers and EventTypes).
	$(KUBECTL) --context=$(KUBE_CONTEXT) delete --ignore-not-found -k $(CONFIG)

.PHONY: publish/local
publish/local: ko-installed ## Build every function image into the local Docker daemon (ko.local) without deploying.
	KO_CONFIG_PATH=ko.yaml KO_DOCKER_REPO=ko.local VERSION=$(VERSION) $(KO) build --platform=$(PLATFORM) --base-import-paths ./functions/...
# ---- end Knative deployment -----------------------------------------------------------------------
