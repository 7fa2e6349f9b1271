# scoreflow: event-driven cluster scoring for Open Cluster Management.
# `make help` lists the targets.

SHELL := /usr/bin/env bash
GO ?= go
# Where `make tools` caches the real servers (outside the clone, shared by clones).
SCOREFLOW_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/scoreflow
export SCOREFLOW_CACHE
FUZZTIME ?= 5s
BENCHTIME ?= 1x
TEST_TIMEOUT ?= 30m

FUNCTIONS := $(notdir $(wildcard functions/*))
FUZZ_PKGS := ./pkg/contract

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "; printf "Targets:\n"} /^[a-zA-Z0-9_\/-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo "Tools cache: $(SCOREFLOW_CACHE) (set SCOREFLOW_CACHE to move it)"

.PHONY: tools
tools: ## Build kube-apiserver, etcd, Prometheus and the OCM placement controller into the cache (once; minutes the first time).
	@hack/build-tools.sh

.PHONY: build
build: ## Compile every package and put each function and the CLI in bin/.
	$(GO) build ./...
	@mkdir -p bin
	@for f in $(FUNCTIONS); do $(GO) build -trimpath -o bin/$$f ./functions/$$f || exit 1; done
	@if [ -d cmd/scoreflow ]; then $(GO) build -trimpath -o bin/scoreflow ./cmd/scoreflow; fi
	@echo "built: $$(ls bin | tr '\n' ' ')"

.PHONY: test
test: tools lint ## Run every test (unit, integration against a real hub and Prometheus, end-to-end) and a short fuzz run.
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
bench: tools ## Run the benchmarks (writer throughput vs a naive baseline, scoring, broker, end-to-end latency).
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout $(TEST_TIMEOUT) ./...

.PHONY: lint
lint: ## gofmt and go vet.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: clean
clean: ## Remove bin/ (the tools cache stays; delete $(SCOREFLOW_CACHE) to rebuild it).
	rm -rf bin
