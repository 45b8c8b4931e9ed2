# execplane — run `make help` for the targets.
#
# Everything here builds from the project's own files and the Go module proxy: tools are
# pinned by go.mod `tool` directives (protoc plugins) and by hack/tools/go.mod (buf,
# staticcheck); the local cluster's binaries by hack/{k8s,etcd,kwok}-tools.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The Go toolchain. The machine's Go (1.26, GOTOOLCHAIN=local) fetches this patched release
# from the module proxy on first use (about 76 MB, once per machine): Go 1.26.8's standard
# library has vulnerabilities the code calls (net/http, crypto/tls, crypto/x509, os,
# html/template), which `make vuln` refuses. Override with make GOTOOLCHAIN=...
export GOTOOLCHAIN := go1.27.3
GO        ?= go
TOOLS     := $(GO) tool -modfile=hack/tools/go.mod
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -s -w -X github.com/execplane/execplane/internal/version.Version=$(VERSION) \
             -X github.com/execplane/execplane/internal/version.Commit=$(COMMIT)
BINARIES  := gateway controller execctl execplane-dev helper e2b
# No DWARF from the compiler: every binary is linked with -w, which drops it anyway, and a build
# without it compiles ~7 % faster (the first make demo on a machine; docs/quickstart.md). The
# local cluster's builds use the same flags (hack/fixture-go.sh), so packages are shared.
GCFLAGS   := all=-dwarf=false
GO_TEST_FLAGS ?=
# Builds the cluster binaries on first use (cached by version) and prints their directory: all
# of them (make test), or the parts a target runs (hack/build-cluster-bins.sh).
CLUSTER_BIN = $$(hack/build-cluster-bins.sh)
# The same for the real node's containerd and kubelet.
NODE_BIN = $$(hack/build-node-bins.sh)
# The same for the CSI sidecars and csi-sanity beside the real node (make test, not make demo).
CSI_BIN = $$(hack/build-csi-bins.sh)
# The same for cert-manager's controller, which test/deploy runs (not make demo or deploy).
CERT_MANAGER_BIN = $$(hack/build-cert-manager.sh)

.PHONY: help
help: ## Show this help.
	@echo "execplane — durable, isolated workspaces on Kubernetes"
	@echo
	@echo "Quick start:  make demo   (run it)    make test   (test it)"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/gateway, bin/controller, bin/execctl, bin/execplane-dev (the local stack), bin/e2b (the E2B front end) and a static bin/helper.
	@mkdir -p bin
	$(GO) build -trimpath -gcflags '$(GCFLAGS)' -ldflags '$(LDFLAGS)' -o bin/ ./cmd/gateway ./cmd/controller ./cmd/execctl ./cmd/execplane-dev ./cmd/e2b
	CGO_ENABLED=0 $(GO) build -trimpath -gcflags '$(GCFLAGS)' -ldflags '$(LDFLAGS)' -o bin/helper ./cmd/helper

# The product images, built in Go without Docker (internal/dev/devimage; docs/deployment.md,
# "Images"): the gateway, controller, helper and e2b static (CGO_ENABLED=0) for each of PLATFORMS
# under bin/<os>_<arch>/, then one OCI image layout per image under IMAGES_DIR. Reproducible:
# every timestamp is SOURCE_DATE_EPOCH, the commit's time, so one commit gives the same
# digests. PLATFORMS=linux/amd64,linux/arm64 gives image indexes (cross-compiled; the example
# executor's busybox userland is this machine's, so its index holds this platform alone).
PLATFORMS         ?= linux/$(shell $(GO) env GOARCH)
IMAGES_DIR        ?= bin/images
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
REGISTRY          ?=
INSECURE          ?=
define build-images
	@for p in $$(tr , ' ' <<< '$(PLATFORMS)'); do \
	  echo "go build gateway controller helper e2b for $$p (CGO_ENABLED=0) into bin/$${p%%/*}_$${p#*/}"; \
	  for b in gateway controller helper e2b; do \
	    CGO_ENABLED=0 GOOS=$${p%%/*} GOARCH=$${p#*/} $(GO) build -trimpath -gcflags '$(GCFLAGS)' -ldflags '$(LDFLAGS)' -o bin/$${p%%/*}_$${p#*/}/$$b ./cmd/$$b; \
	  done; \
	done
	@$(GO) build -trimpath -gcflags '$(GCFLAGS)' -ldflags '$(LDFLAGS)' -o bin/execplane-dev ./cmd/execplane-dev
	@bin/execplane-dev images -bin bin -out $(IMAGES_DIR) -platforms '$(PLATFORMS)' -version '$(VERSION)' -commit '$(COMMIT)' -created '$(SOURCE_DATE_EPOCH)' $(1)
endef

.PHONY: images
images: executor-debs ## Build the gateway, controller, helper, executor and e2b images in Go (no Docker) as OCI layouts under bin/images, reproducibly; prints each digest (PLATFORMS=linux/amd64,linux/arm64 for indexes).
	$(call build-images)

.PHONY: images-push
images-push: executor-debs ## make images, then push each image to REGISTRY=host[:port][/prefix] by digest and tag it VERSION (INSECURE=1: plain HTTP; 127.0.0.1 and localhost always are).
	@if [ -z '$(REGISTRY)' ]; then echo "usage: make images-push REGISTRY=host[:port][/prefix] [INSECURE=1]" >&2; exit 2; fi
	$(call build-images,-push '$(REGISTRY)' $(if $(filter 1 true yes,$(INSECURE)),-insecure))

.PHONY: generate
generate: npm-packages ## Regenerate committed code: protobuf Go, deepcopy, CRD YAML, clientset/listers/informers, the Python and TypeScript SDKs' protobuf modules.
	$(TOOLS) buf generate
	hack/update-codegen.sh
	hack/gen-python.sh
	cd sdk/typescript && npm run --silent generate

.PHONY: verify
verify: npm-packages ## Fail when generated code is stale or go.mod files are untidy.
	hack/verify-generated.sh
	hack/verify-tidy.sh

.PHONY: node-packages
node-packages: ## Install, idempotently, the Debian packages of the local cluster's real node (runc, CNI plugins, busybox-static).
	@hack/install-node-packages.sh

.PHONY: executor-debs
executor-debs: ## Download, idempotently, the Debian packages of the executor image (hack/executor-debs.lock, checked by SHA-256, cached by the lock's hash).
	@hack/executor-debs.sh fetch >/dev/null

.PHONY: python-packages
python-packages: ## Install, idempotently, the Debian packages of the Python SDK (python3-grpcio, python3-protobuf, python3-pytest, protoc and grpc_python_plugin).
	@hack/install-python-packages.sh

.PHONY: npm-packages
npm-packages: ## Install, idempotently, node (from Debian when missing) and the npm packages of every package-lock.json (npm ci).
	@hack/install-npm-packages.sh

.PHONY: vuln
vuln: ## Check the module against the pinned offline vulnerability database (govulncheck).
	hack/vuln.sh

# Hand-written Go files: generated code follows its generators' layout.
GO_SOURCES = find . -name '*.go' -not -path './.cache/*' -not -path './bin/*' -not -path './.state/*' \
  -not -path './pkg/generated/*' -not -name '*.pb.go' -not -name '*.connect.go' -not -name 'zz_generated.*'
LOCAL_MODULE := github.com/execplane/execplane

.PHONY: fmt
fmt: ## gofmt and group imports (standard, third-party, this module) with goimports (pinned).
	$(GO_SOURCES) -print0 | xargs -0 gofmt -w
	$(GO_SOURCES) -print0 | xargs -0 $(TOOLS) goimports -w -local $(LOCAL_MODULE)

.PHONY: lint
lint: ## gofmt, import grouping (goimports), go vet, staticcheck (pinned) and buf lint.
	@unformatted=$$(find . -name '*.go' -not -path './.cache/*' -not -path './bin/*' -print0 | xargs -0 gofmt -l); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	@misgrouped=$$($(GO_SOURCES) -print0 | xargs -0 $(TOOLS) goimports -l -local $(LOCAL_MODULE)); \
	  if [ -n "$$misgrouped" ]; then echo "imports not grouped (standard, third-party, $(LOCAL_MODULE)); run make fmt:"; echo "$$misgrouped"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS) staticcheck $$($(GO) list ./... | grep -v /pkg/generated/) # generated code is the generators' business
	$(TOOLS) buf lint

# Fuzzing budget per target: make test runs FUZZTIME_SHORT, make fuzz FUZZTIME.
FUZZTIME ?= 1m
FUZZTIME_SHORT ?= 3s

.PHONY: test
test: build lint verify vuln node-packages executor-debs npm-packages python-packages ## Lint, verify generated code, check for called vulnerabilities, run every test with -race (uses the local cluster; the fault suite with a short budget, its report printed), then each fuzz target briefly.
	@mkdir -p .cache && rm -f $(CHAOS_REPORT)
	EXECPLANE_CHAOS_REPORT=$(CHAOS_REPORT) EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) EXECPLANE_NODE_BIN=$(NODE_BIN) EXECPLANE_HELPER_BIN=$(CURDIR)/bin/helper \
	  EXECPLANE_CERT_MANAGER_BIN=$(CERT_MANAGER_BIN) EXECPLANE_CSI_BIN=$(CSI_BIN) \
	  $(GO) test -race -count=1 -timeout 30m $(GO_TEST_FLAGS) ./...
	@if [ -f $(CHAOS_REPORT) ]; then cat $(CHAOS_REPORT); fi
	FUZZTIME=$(FUZZTIME_SHORT) hack/fuzz.sh

# The fault suite (test/chaos, docs/chaos.md): make test runs it for 100 s (a round of every fault class), its negative
# controls (each check against builds that break what it checks) and the soak for a minute; make chaos for
# CHAOS_DURATION, make soak for SOAK_DURATION, replaying CHAOS_SEED when given. Their reports go to CHAOS_REPORT.
CHAOS_DURATION ?= 10m
CHAOS_OPS      ?= 100000
SOAK_DURATION  ?= 30m
CHAOS_SEED     ?=
CHAOS_REPORT   ?= $(CURDIR)/.cache/chaos-report.txt

.PHONY: soak
soak: build ## The soak: SOAK_DURATION (default 30m) of load at 80 % of the measured capacity with network faults; resources must come back to their baseline (docs/chaos.md).
	@mkdir -p .cache
	EXECPLANE_SOAK_DURATION=$(SOAK_DURATION) EXECPLANE_CHAOS_SEED=$(CHAOS_SEED) EXECPLANE_CHAOS_REPORT=$(CHAOS_REPORT) \
	  EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) EXECPLANE_HELPER_BIN=$(CURDIR)/bin/helper \
	  $(GO) test -race -count=1 -v -timeout 4h -run 'TestSoak$$' ./test/chaos/

.PHONY: chaos
chaos: build ## The fault suite with a long budget: CHAOS_DURATION (default 10m) or CHAOS_OPS operations of clients and seeded faults; CHAOS_SEED=<n> replays a run (docs/chaos.md).
	@mkdir -p .cache
	EXECPLANE_CHAOS_DURATION=$(CHAOS_DURATION) EXECPLANE_CHAOS_OPS=$(CHAOS_OPS) EXECPLANE_CHAOS_SEED=$(CHAOS_SEED) EXECPLANE_CHAOS_REPORT=$(CHAOS_REPORT) \
	  EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) EXECPLANE_HELPER_BIN=$(CURDIR)/bin/helper \
	  $(GO) test -race -count=1 -v -timeout 4h -run 'TestChaos$$' ./test/chaos/

# The rolling upgrade under load (test/chaos/upgrade_test.go; docs/chaos.md): the chart on
# the real node, the fault suite's agents, an SDK client, a detached command and a terminal
# running for UPGRADE_LOAD while helm upgrade rolls both Deployments to another build.
UPGRADE_LOAD ?= 3m

.PHONY: upgrade-test
upgrade-test: build node-packages ## helm upgrade to another build while a load runs (UPGRADE_LOAD, default 3m) on the real node: calls, retries, cut calls (0), history checks; report in CHAOS_REPORT (docs/chaos.md).
	@mkdir -p .cache
	EXECPLANE_UPGRADE_TEST=$(UPGRADE_LOAD) EXECPLANE_CHAOS_REPORT=$(CHAOS_REPORT) \
	  EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) EXECPLANE_NODE_BIN=$(NODE_BIN) EXECPLANE_HELPER_BIN=$(CURDIR)/bin/helper \
	  $(GO) test -race -count=1 -v -timeout 30m -tags upgrade -run 'TestRollingUpgradeUnderLoad$$' ./test/chaos/

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 1m).
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

.PHONY: test-per-exec
test-per-exec: build node-packages npm-packages ## Run the end-to-end suite (test/integration) with every gateway's helper sessions off (--sessions=false): one exec per operation.
	EXECPLANE_E2E_SESSIONS=false EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) EXECPLANE_NODE_BIN=$(NODE_BIN) EXECPLANE_HELPER_BIN=$(CURDIR)/bin/helper \
	  $(GO) test -race -count=1 -timeout 30m $(GO_TEST_FLAGS) ./test/integration/

.PHONY: test-unit
test-unit: ## Run the unit tests only (no local cluster), with -race.
	$(GO) test -race -short -count=1 $(GO_TEST_FLAGS) ./...

.PHONY: bench-controller
bench-controller: ## Controller at scale: N environments (BENCH_N, default 10000) on KWOK, vs raw object creation, with its API writes (usage ledgers apart) to Ready, idle and suspended; BENCH_ARGS="-heap-profile=heap.pb.gz" keeps its heap profile.
	EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) $(GO) run ./bench/controllerscale -n $(or $(BENCH_N),10000) $(BENCH_ARGS)

.PHONY: bench-fork
bench-fork: build bin/pause node-packages ## Fork → Ready (CreateSnapshot, then Ensure from it) of a 100 MiB workspace on the real node, by the copy and the csi method, beside Ensure cold and warm (docs/benchmarks.md).
	EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) EXECPLANE_NODE_BIN=$(NODE_BIN) EXECPLANE_CSI_BIN=$(CSI_BIN) $(GO) run ./bench/fork $(BENCH_ARGS)

.PHONY: bench-ensure
bench-ensure: build bin/pause node-packages ## Ensure → Ready (cold ÷ raw PVC + Pod, resume, warm pool hits and claims/s) on a fake node with a real cluster's delays; BENCH_ARGS="-node real -pool 20" on the real node (docs/benchmarks.md).
	EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) EXECPLANE_NODE_BIN=$(NODE_BIN) $(GO) run ./bench/ensure $(BENCH_ARGS)

.PHONY: bench-gateway
bench-gateway: build bin/pause node-packages ## Gateway overhead on the fake and the real node: data calls, 5 MiB transfers, streamed command output, cold and warm sessions against a persistent raw exec, and RPC/s, each ÷ its baseline (docs/benchmarks.md).
	EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) EXECPLANE_NODE_BIN=$(NODE_BIN) $(GO) run ./bench/gateway $(BENCH_ARGS)

.PHONY: bench-e2b
bench-e2b: build bin/pause node-packages npm-packages ## The E2B front end with the unmodified E2B SDK ÷ the Go SDK: commands.run('echo hi'), 1 MiB files, creates from a warm pool and cold; BENCH_ARGS="-nodes kwok,real" for the real node too (docs/benchmarks.md).
	EXECPLANE_CLUSTER_BIN=$(CLUSTER_BIN) EXECPLANE_NODE_BIN=$(NODE_BIN) $(GO) run ./bench/e2b $(BENCH_ARGS)

.PHONY: node-bins
node-bins: ## Build the real node's containerd, shim, ctr and kubelet (once; cached by version).
	@hack/build-node-bins.sh

.PHONY: cluster-bins
cluster-bins: ## Build the local cluster's pinned binaries (once; cached by version).
	@hack/build-cluster-bins.sh

# The development stack of make demo / cluster-up (bin/execplane-dev; docs/quickstart.md).
# Executors run on the real node (containerd + runc + a kubelet; needs root); DEV_NODE=kwok
# keeps them on the fake nodes, for machines without the runtime.
DEV_STATE ?= .state/dev
DEV_NODE  ?= real
DEV_UP = EXECPLANE_CLUSTER_BIN=$$(hack/build-cluster-bins.sh core $(if $(filter real,$(DEV_NODE)),,kwok)) \
  $(if $(filter real,$(DEV_NODE)),EXECPLANE_NODE_BIN=$(NODE_BIN)) \
  bin/execplane-dev up --state-dir $(DEV_STATE) --node $(DEV_NODE) --helper bin/helper --pause bin/pause
DEV_PREREQS = demo-build

.PHONY: demo-build
demo-build: ## Build what make demo runs (DEV_NODE=kwok: for the fake nodes), a line per stage with its progress; the go commands' output in .state/build.log.
	@hack/build-demo.sh $(DEV_NODE)

.PHONY: kubectl
kubectl: ## Build kubectl for the local cluster (once, cached by version: about 2 min), beside its binaries; make demo prints where.
	@dir=$$(hack/build-cluster-bins.sh core kubectl) && echo "$$dir/kubectl"

# The real node's sandbox process, for the local stack's pause image (static, like the helper).
.PHONY: bin/pause
bin/pause:
	@CGO_ENABLED=0 $(GO) build -trimpath -gcflags '$(GCFLAGS)' -o bin/pause ./internal/dev/pause

.PHONY: cluster-up
cluster-up: $(DEV_PREREQS) ## Start the local cluster alone in the background (KUBECONFIG printed; DEV_NODE=kwok: no real node).
	@$(DEV_UP)

.PHONY: cluster-down
cluster-down: ## Stop what cluster-up or demo started.
	@bin/execplane-dev down --state-dir $(DEV_STATE)

.PHONY: demo
demo: $(DEV_PREREQS) ## Build (a line per stage; the first run on a machine takes minutes), start the local cluster (executors on its real node; DEV_NODE=kwok: on a fake node) with a controller and a gateway, and walk a client through a session.
	@$(DEV_UP) --controller bin/controller --gateway bin/gateway --e2b bin/e2b
	@bin/execplane-dev demo --state-dir $(DEV_STATE)
	@echo
	@echo "The stack keeps running. Try it by hand:"
	@echo "  source $(DEV_STATE)/caller.env      # EXECPLANE_ADDRESS, _CA, _CERT, _KEY; KUBECONFIG"
	@echo "  source $(DEV_STATE)/e2b.env         # E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY: E2B SDK programs, unchanged (docs/e2b.md)"
	@echo "  bin/execplane-dev demo              # the walkthrough again"
	@echo "  kubectl get executionenvironments -A   # kubectl: bin/execplane-dev status"
	@echo "Stop it with: make demo-down"

.PHONY: demo-down
demo-down: ## Stop everything make demo started.
	@bin/execplane-dev down --state-dir $(DEV_STATE)

# make deploy: execplane installed as an operator installs it (internal/dev/devdeploy;
# docs/deployment.md "Trying the chart on the local cluster"): the images of make images
# pushed to the local cluster's registry, the chart installed with helm install --wait, two
# controllers and two gateways as Pods on the real node, the walkthrough through the
# gateway's NodePort. Not part of make demo.
DEPLOY_STATE ?= .state/deploy

# helm, pinned in hack/tools/go.mod.
.PHONY: bin/helm
bin/helm:
	@$(GO) build -modfile=hack/tools/go.mod -o bin/helm helm.sh/helm/v3/cmd/helm

.PHONY: deploy
deploy: build bin/pause bin/helm node-packages images ## Push the images to the local cluster's registry, helm install --wait the chart on its real node (2 controllers, 2 gateways as Pods) and walk a client through the gateway's Service.
	@EXECPLANE_CLUSTER_BIN=$$(hack/build-cluster-bins.sh core kubectl) EXECPLANE_NODE_BIN=$(NODE_BIN) bin/execplane-dev up --state-dir $(DEPLOY_STATE) --node real \
	  --helper bin/helper --pause bin/pause --chart deploy/helm/execplane --images $(IMAGES_DIR) --helm bin/helm
	@bin/execplane-dev demo --state-dir $(DEPLOY_STATE)
	@echo
	@echo "The release keeps running. Try it by hand:"
	@echo "  source $(DEPLOY_STATE)/caller.env      # EXECPLANE_ADDRESS (the NodePort), _CA, _CERT, _KEY; KUBECONFIG"
	@echo "  kubectl -n execplane get pods -o wide"
	@echo "  bin/helm -n execplane status execplane   # KUBECONFIG from caller.env"
	@echo "Stop it with: make deploy-down"

.PHONY: deploy-down
deploy-down: ## Stop everything make deploy started.
	@bin/execplane-dev down --state-dir $(DEPLOY_STATE)

.PHONY: clean
clean: ## Remove build output (the cached cluster binaries are kept; see docs/development.md).
	rm -rf bin .state
