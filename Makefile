# queuebox — run `make help` for the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin/queuebox
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# In a git checkout the binary also records its commit and the commit's time
# (queuebox version), even where GOFLAGS turns VCS stamping off.
BUILDVCS := $(if $(wildcard .git),-buildvcs=true)
# Integration tests use real PostgreSQL, NATS and RabbitMQ (see docs/testing.md).
TEST_FLAGS ?= -count=1 -timeout 12m

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/queuebox.
	$(GO) build $(BUILDVCS) -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/queuebox

.PHONY: test
test: ## Run the whole test suite (unit + integration against real services).
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt: these files need gofmt -w:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) -p 2 ./...

.PHONY: test-race
test-race: ## Run the test suite with the race detector.
	$(GO) test $(TEST_FLAGS) -race -p 2 ./...

.PHONY: test-sqlserver
test-sqlserver: ## Run the dialect conformance suite against SQL Server (QUEUEBOX_TEST_SQLSERVER_URL or Docker).
	$(GO) test $(TEST_FLAGS) -run SQLServer -v ./dialect/sqlserver/...

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 10s; "5000x" = a number of inputs).
	@for t in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include=*_test.go . | sed 's/func //' | sort -u); do \
	  pkg=$$(grep -rlE "^func $$t\(" --include=*_test.go . | head -1 | xargs dirname); \
	  echo "== $$pkg $$t"; $(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$${FUZZTIME:-10s} -timeout 5m $$pkg || exit 1; \
	done

.PHONY: test-faults
test-faults: ## Run the fault suite (internal/faults) against real services; QUEUEBOX_SOAK=1 for the 2-minute outage.
	QUEUEBOX_FAULTS=1 $(GO) test -count=1 -timeout 15m -v -run 'TestFault|TestHostile|TestSecrets|TestCheck|TestProxy' ./internal/faults/

.PHONY: fuzz-short
fuzz-short: ## Run every fuzz target on 20,000 generated inputs (CI).
	@# A count, not a duration: under load a duration-bound run can end with
	@# "context deadline exceeded" while an input is in flight (a false failure).
	$(MAKE) fuzz FUZZTIME=20000x

# golangci-lint at a pinned version through go run: the first run builds it
# into the Go build cache (minutes on two cores), later runs start at once.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: lint
lint: ## gofmt and golangci-lint (.golangci.yml: vet, staticcheck, errcheck, the layering, funlen).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GOLANGCI_LINT) run ./...

.PHONY: lint-tool
lint-tool: ## Build golangci-lint into the Go build cache (make lint does so on first use).
	$(GOLANGCI_LINT) version

.PHONY: docs
docs: ## Regenerate the command reference in docs/cli.md from the commands.
	$(GO) generate ./cmd/queuebox

.PHONY: bench
bench: build ## Run the throughput/latency benchmark against local PostgreSQL and NATS.
	./$(BIN) bench $(BENCH_FLAGS)

.PHONY: demo
demo: build ## Run the demo pipeline (needs only a reachable PostgreSQL).
	./$(BIN) demo

.PHONY: services
services: ## Start the local services the tests need, when they are down.
	./.ci/services

# --- packaging (docs/deploying.md) ---
DIST ?= dist
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
IMAGE ?= queuebox:$(subst +,-,$(VERSION))
CONTAINER_ENGINE ?= $(shell command -v docker >/dev/null 2>&1 && echo docker || echo podman)
IMAGE_PLATFORM ?= linux/$(shell $(GO) env GOARCH)
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
HELM ?= $(GO) run helm.sh/helm/v4/cmd/helm@v4.3.2
PROMTOOL ?= promtool

.PHONY: release
release: ## Build reproducible archives for PLATFORMS into DIST (default dist/) with SHA256SUMS; VERSION=v0.1.0.
	./scripts/release.sh "$(VERSION)" "$(DIST)" $(PLATFORMS)

.PHONY: image
image: ## Build the container image IMAGE from the release binary (CONTAINER_ENGINE=docker|podman, IMAGE_PLATFORM=linux/amd64).
	./scripts/release.sh -b "$(VERSION)" "$(DIST)" $(IMAGE_PLATFORM)
	install -m 0644 "$(CA_BUNDLE)" "$(DIST)/ca-certificates.crt"
	$(CONTAINER_ENGINE) build --platform "$(IMAGE_PLATFORM)" \
	  --build-arg VERSION="$(VERSION)" --build-arg REVISION="$$(git rev-parse HEAD)" \
	  --build-arg CREATED="$$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)" \
	  -t "$(IMAGE)" -f Dockerfile .

.PHONY: test-release
test-release: ## Check that two builds of HEAD give the same SHA256SUMS (scripts/test-release.sh).
	./scripts/test-release.sh

.PHONY: test-image
test-image: ## Build the image with podman and run it read-only against PostgreSQL and a webhook.
	$(MAKE) image IMAGE=queuebox:test CONTAINER_ENGINE=podman
	QUEUEBOX_TEST_IMAGE=queuebox:test $(GO) test -count=1 -v -run '^TestImage$$' ./deploy/

.PHONY: test-chart
test-chart: ## Lint and render the Helm chart and check it against the binary (HELM: go run helm@v4.3.2).
	$(HELM) lint --strict deploy/helm/queuebox
	QUEUEBOX_HELM="$(HELM)" $(GO) test -count=1 -v -run '^TestChart$$' ./deploy/

.PHONY: test-alerts
test-alerts: ## Check the Prometheus alerts and run their unit tests with promtool.
	$(PROMTOOL) check rules deploy/prometheus/alerts.yaml
	$(PROMTOOL) test rules deploy/prometheus/alerts_test.yaml
