# scoreflow: event-driven cluster scoring for Open Cluster Management.
# `make help` lists the targets.

SHELL := /usr/bin/env bash
GO ?= go
# Where `make tools` caches the real servers (outside the clone, shared by clones).
SCOREFLOW_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/scoreflow
export SCOREFLOW_CACHE
FUZZTIME ?= 5s
TEST_TIMEOUT ?= 30m
# A fleet benchmark alone takes about 25 minutes here.
BENCH_TIMEOUT ?= 2h

FUNCTIONS := $(notdir $(wildcard functions/*))
FUZZ_PKGS := ./pkg/contract

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "; printf "Targets:\n"} /^[a-zA-Z0-9_\/-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo "Tools cache: $(SCOREFLOW_CACHE) (set SCOREFLOW_CACHE to move it)"

.PHONY: tools
tools: ## Build kube-apiserver, etcd, kube-controller-manager (garbage collector only), Prometheus, the OCM placement controller and addon manager and Knative Eventing into the cache (once; minutes the first time).
	@hack/build-tools.sh

.PHONY: build
build: ## Compile every package and put each function and the CLI in bin/.
	$(GO) build ./...
	@mkdir -p bin
	@for f in $(FUNCTIONS); do $(GO) build -trimpath -o bin/$$f ./functions/$$f || exit 1; done
	@if [ -d cmd/scoreflow ]; then $(GO) build -trimpath -o bin/scoreflow ./cmd/scoreflow; fi
	@echo "built: $$(ls bin | tr '\n' ' ')"

.PHONY: run
run: tools build ## Run the whole flow locally on real Knative Eventing: hub, placement controller, Prometheus with demo data, every function. Ctrl-C stops it.
	bin/scoreflow run

.PHONY: browser
browser: ## Install Debian's Chromium if missing (the scores page's test drives it headless; uses sudo unless root).
	@hack/install-chromium.sh

.PHONY: cbc
cbc: ## Install COIN-OR CBC if missing (pkg/optimize checks its optima against CBC's and times both; uses sudo unless root).
	@hack/install-cbc.sh

.PHONY: run-oidc
run-oidc: tools build ## The same with Knative's sender identity on and the oidc variant (config/oidc; scoreflow run --oidc).
	bin/scoreflow run --oidc

.PHONY: run-tls
run-tls: tools build ## The same with Knative's transport encryption strict and sender identity on (config/oidc-tls; scoreflow run --tls --oidc; a local CA stands in for cert-manager).
	bin/scoreflow run --tls --oidc

.PHONY: test
test: tools browser cbc lint ## Run every test (unit, integration against a real hub and Prometheus, end-to-end) and a short fuzz run.
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	@$(MAKE) --no-print-directory fuzz

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 5s; e.g. make fuzz FUZZTIME=5m).
	@for pkg in $(FUZZ_PKGS); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz: $$pkg $$t ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/scoreflow-fuzz.log 2>&1 || { cat /tmp/scoreflow-fuzz.log; exit 1; }; \
	  done; \
	done

.PHONY: bench
bench: tools cbc ## Run the benchmarks: scoring, solver (beside CBC on the same instances) and writer units (per op); writer throughput and latency vs their baselines, end to end (fixed rounds); the fleet at 10,000 clusters and the writer's memory at 1,000 (about an hour here; README's table is one run).
	$(GO) test -run '^$$' -bench . -benchmem -timeout $(BENCH_TIMEOUT) ./pkg/...
	$(GO) test -run '^$$' -bench 'ScoreWriter|EndToEnd' -benchtime 1x -timeout $(BENCH_TIMEOUT) ./test/...
	$(GO) test -run '^$$' -bench 'Fleet$$/clusters=10000$$' -benchtime 1x -timeout $(BENCH_TIMEOUT) ./test/writer
	$(GO) test -run '^$$' -bench 'FleetMemory/clusters=1000$$' -benchtime 1x -timeout $(BENCH_TIMEOUT) ./test/writer

.PHONY: lint
lint: ## gofmt and go vet.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: clean
clean: ## Remove bin/ (the tools cache stays: delete it by hand to rebuild the servers).
	rm -rf bin

# ---- Knative deployment ---------------------------------------------------------------------------
# Builds every function with ko and applies a variant of config/ (kustomize overlays of deploy/,
# brokers/, triggers/, eventtypes/ and oidc/) to the cluster of the current kubectl context
# (`kn quickstart kind` makes a kind cluster named knative). Re-applying a variant keeps it: it is
# the whole desired state, nothing is patched by hand. ko is needed only here:
# `go install github.com/google/ko@latest`. None of these targets is part of `make test`;
# test/deploy and config/ check the same YAML. See docs/quickstart.md.
KO ?= ko
KUBECTL ?= kubectl
KIND_CLUSTER_NAME ?= knative
# Where images go: kind.local loads them straight into the kind cluster's nodes.
KO_DOCKER_REPO ?= kind.local
# What to deploy: a directory of config/.
VARIANT ?= default
VARIANTS := $(patsubst config/%/kustomization.yaml,%,$(wildcard config/*/kustomization.yaml))
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
KO_ENV = KO_CONFIG_PATH=ko.yaml KO_DOCKER_REPO=$(KO_DOCKER_REPO) KIND_CLUSTER_NAME=$(KIND_CLUSTER_NAME) VERSION=$(VERSION)

.PHONY: ko-installed
ko-installed:
	@command -v $(KO) >/dev/null || { echo "ko is not installed: go install github.com/google/ko@latest (see docs/quickstart.md)"; exit 1; }

.PHONY: variant
variant:
	@test -f config/$(VARIANT)/kustomization.yaml || { echo "VARIANT=$(VARIANT): no such variant; one of: $(VARIANTS)"; exit 1; }

.PHONY: deploy
deploy: ko-installed variant ## Build the functions with ko and deploy VARIANT (default, oidc, tls, oidc-tls, kafka, kafka-oidc: config/) to the current cluster.
	set -o pipefail; $(KUBECTL) kustomize config/$(VARIANT) | $(KO_ENV) $(KO) apply -f -

.PHONY: undeploy
undeploy: variant ## Remove everything `make deploy VARIANT=...` created (the namespace, the cluster-wide RBAC, the broker, triggers and EventTypes).
	$(KUBECTL) delete --ignore-not-found -k config/$(VARIANT)

.PHONY: publish/local
publish/local: ko-installed ## Build every function image into the local Docker daemon (ko.local) without deploying.
	KO_CONFIG_PATH=ko.yaml KO_DOCKER_REPO=ko.local VERSION=$(VERSION) $(KO) build --base-import-paths ./functions/...
# ---- end Knative deployment -----------------------------------------------------------------------
