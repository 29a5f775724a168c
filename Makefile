# fnbridge Makefile. `make help` lists the targets.
#
# Every tool is pinned and installed into .tools/ (git-ignored) by `make
# tools`, so a fresh machine needs only Go, Node.js/npm, python3 and bash
# (and curl, which the demo calls).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

TOOLS        := $(CURDIR)/.tools
TOOLS_BIN    := $(TOOLS)/bin
NPM_DIR      := $(TOOLS)/npm
NODE_BIN     := $(NPM_DIR)/node_modules/@restatedev

RESTATE_VERSION          := 1.7.12
BUF_VERSION              := 1.75.0
PROTOC_GEN_GO_VERSION    := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
GRPCURL_VERSION          := v1.9.3
STATICCHECK_VERSION      := v0.8.2

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/fnbridge/fnbridge/internal/version.Version=$(VERSION)

BUF := $(NPM_DIR)/node_modules/@bufbuild/buf-linux-x64/bin/buf

# Tests find the real components through these variables; in CI (CI=true)
# a missing one fails the test instead of skipping it.
export RESTATE_SERVER_BIN := $(NODE_BIN)/restate-server-linux-x64/bin/restate-server
export RESTATE_CLI_BIN    := $(NODE_BIN)/restate-linux-x64/bin/restate
export GRPCURL_BIN        := $(TOOLS_BIN)/grpcurl
export H2SPEC_BIN         := $(TOOLS_BIN)/h2spec
export BRIDGE_BIN         := $(CURDIR)/bin/bridge

.PHONY: help
help: ## Describe useful make targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## .*$$' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "%-14s %s\n", $$1, $$2}'

.PHONY: tools
tools: $(TOOLS)/.npm-$(RESTATE_VERSION)-$(BUF_VERSION) $(TOOLS)/.go-tools ## Install pinned tools into .tools/

# HAProxy, the load balancer of the cluster tests, is a system package
# (Debian's haproxy), not a pinned tool: installed with apt-get when missing
# and the machine allows it (root, apt-get). Otherwise the cluster tests
# skip, except under CI=true, where a missing HAProxy fails here already.
# Only the targets that run the cluster tests (test, e2e, chaos,
# chaos-cluster) depend on it: demo, lint and build never touch the
# system's packages.
.PHONY: haproxy
haproxy: ## Install HAProxy (Debian's package, for the cluster tests) when missing and allowed
	@if ! command -v haproxy >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			export DEBIAN_FRONTEND=noninteractive; \
			apt-get install -y --no-install-recommends haproxy \
				|| { apt-get update && apt-get install -y --no-install-recommends haproxy; }; \
		elif [ "$${CI:-}" = true ]; then \
			echo "HAProxy is missing and cannot be installed here (needs root and apt-get); CI needs it for the cluster tests"; exit 1; \
		else \
			echo "note: HAProxy is missing (install the haproxy package); the cluster tests will skip"; \
		fi; \
	fi

$(TOOLS)/.npm-$(RESTATE_VERSION)-$(BUF_VERSION):
	mkdir -p $(NPM_DIR)
	cd $(NPM_DIR) && npm install --no-audit --no-fund --prefix . \
		@restatedev/restate-server@$(RESTATE_VERSION) \
		@restatedev/restate@$(RESTATE_VERSION) \
		@bufbuild/buf@$(BUF_VERSION)
	test -x $(RESTATE_SERVER_BIN) && test -x $(RESTATE_CLI_BIN) && test -x $(BUF)
	touch $@

# h2spec (the HTTP/2 conformance suite) has no go.mod of its own: tools/go.mod
# pins it and its dependencies.
$(TOOLS)/.go-tools: Makefile tools/go.mod tools/go.sum
	mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS_BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(TOOLS_BIN) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	GOBIN=$(TOOLS_BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	cd tools && GOBIN=$(TOOLS_BIN) go install github.com/summerwind/h2spec/cmd/h2spec
	touch $@

.PHONY: build
build: ## Build bin/bridge
	go build -ldflags "$(LDFLAGS)" -o bin/bridge ./cmd/bridge

.PHONY: proto
proto: tools ## Regenerate Go code from proto/ with the pinned buf and plugins
	$(BUF) generate --template buf.gen.yaml

.PHONY: proto-check
proto-check: tools ## Fail when committed generated code differs from a fresh regeneration
	tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(BUF) generate --template buf.gen.yaml -o $$tmp; \
	diff -r -x '*.proto' -x 'testdata' -x 'doc.go' $$tmp/proto proto \
		|| { echo "generated code in proto/ is stale: run 'make proto' and commit"; exit 1; }

.PHONY: vet
vet: ## go vet
	go vet ./...

.PHONY: fmt-check
fmt-check: ## Fail when gofmt would change a file or go.mod/go.sum are not tidy
	@unformatted=$$(git ls-files -z -- '*.go' | xargs -0 gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change these files (run gofmt -w):"; echo "$$unformatted"; exit 1; fi
	@go mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit"; exit 1; }
	@cd bench/sdkgo && go mod tidy -diff || { echo "bench/sdkgo: go.mod/go.sum are not tidy: run 'go mod tidy' there and commit"; exit 1; }
	@cd tools && go mod tidy -diff || { echo "tools: go.mod/go.sum are not tidy: run 'go mod tidy' there and commit"; exit 1; }

.PHONY: lint
lint: tools vet fmt-check ## go vet + gofmt + go mod tidy + staticcheck (pinned)
	$(TOOLS_BIN)/staticcheck ./...

.PHONY: test
test: tools haproxy build lint proto-check ## Install tools, build, lint, and run every test (unit, e2e, short fuzz)
	go test -race -count=1 -timeout 40m ./...
	scripts/fuzz.sh 10s

.PHONY: e2e
e2e: tools haproxy build ## Run only the end-to-end tests against real restate-server, python3 and bash (RUN=regexp: only those)
	go test -race -count=1 -timeout 30m $(if $(value RUN),-run '$(subst ','\'',$(value RUN))') ./e2e/...

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 60s)
	scripts/fuzz.sh $${FUZZTIME:-60s}

.PHONY: chaos
# The faults come on a clock (the bridge every 3-6 s until 75% is done), so
# a host slow to start processes makes both the run and its fault count
# grow: 5.5 min on a quick host, 23 on one where a fork took 6 ms.
chaos: tools haproxy build ## Run the full chaos test: 10,000 invocations with bridge, worker and restate-server faults
	CHAOS_FULL=1 go test -count=1 -run TestChaos -timeout 45m -v ./e2e/

.PHONY: chaos-cluster
chaos-cluster: tools haproxy build ## Run the cluster chaos test: 3 restate-server nodes, 3 bridges behind HAProxy, node and replica faults
	CHAOS_CLUSTER_FULL=1 go test -count=1 -run TestChaosCluster -timeout 40m -v ./e2e/

.PHONY: bench
bench: tools build ## Run the benchmarks side by side and write bench/RESULTS.md
	@if [ -x bench/run.sh ]; then bench/run.sh; else echo "bench/run.sh is missing"; exit 1; fi

.PHONY: demo
demo: tools build ## Start restate-server and bridge serve with examples/, register, invoke, stop
	scripts/demo.sh

.PHONY: clean
clean: ## Remove build outputs (keeps .tools)
	rm -rf bin
