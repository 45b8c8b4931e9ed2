# execplane — run `make help` for the targets.
#
# Everything here builds from the project's own files and the Go module proxy: tools are
# pinned by go.mod `tool` directives (protoc plugins) and by hack/tools/go.mod (buf,
# staticcheck); the local cluster's binaries by hack/{k8s,etcd,kwok}-tools.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
TOOLS     := $(GO) tool -modfile=hack/tools/go.mod
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -s -w -X github.com/execplane/execplane/internal/version.Version=$(VERSION) \
             -X github.com/execplane/execplane/internal/version.Commit=$(COMMIT)
BINARIES  := gateway controller execctl helper
GO_TEST_FLAGS ?=

.PHONY: help
help: ## Show this help.
	@echo "execplane — durable, isolated workspaces on Kubernetes"
	@echo
	@echo "Quick start:  make demo   (run it)    make test   (test it)"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/gateway, bin/controller, bin/execctl and a static bin/helper.
	@mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/gateway ./cmd/gateway
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/controller ./cmd/controller
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/execctl ./cmd/execctl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/helper ./cmd/helper

.PHONY: generate
generate: ## Regenerate the Go code committed beside proto/ (and other generated files).
	$(TOOLS) buf generate

.PHONY: verify
verify: ## Fail when generated code is stale or go.mod files are untidy.
	hack/verify-generated.sh
	hack/verify-tidy.sh

.PHONY: lint
lint: ## gofmt, go vet, staticcheck (pinned) and buf lint.
	@unformatted=$$(find . -name '*.go' -not -path './.cache/*' -not -path './bin/*' -print0 | xargs -0 gofmt -l); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS) staticcheck ./...
	$(TOOLS) buf lint

.PHONY: test
test: build lint verify ## Lint, verify generated code, and run every test with -race (uses the local cluster).
	EXECPLANE_HELPER_BIN=$(CURDIR)/bin/helper $(GO) test -race -count=1 $(GO_TEST_FLAGS) ./...

.PHONY: test-unit
test-unit: ## Run the unit tests only (no local cluster), with -race.
	$(GO) test -race -short -count=1 $(GO_TEST_FLAGS) ./...

.PHONY: demo
demo: build ## Build what is needed and run the demo (see README).
	@echo "execplane $(VERSION): built $(addprefix bin/,$(BINARIES))."
	@for b in $(BINARIES); do bin/$$b --version >/dev/null 2>&1 || bin/$$b version >/dev/null; done
	@echo "The gateway and controller are not implemented yet; the demo grows with them."

.PHONY: clean
clean: ## Remove build output (the cached cluster binaries are kept; see docs/development.md).
	rm -rf bin .state
