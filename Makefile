# relay: make help lists the targets.
GO          ?= go
BIN         ?= bin/relay
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
NFPM        ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.48.0

.DEFAULT_GOAL := help

# A failing test's lines can be far up a long log: the test targets keep
# their output and, when they fail, end with each failure's lines again
# (with testify's continuation lines, such as the error under "Error:").
SHELL := /bin/bash
GOTEST = echo "$(GO) test $(1)"; log=$$(mktemp); $(GO) test $(1) 2>&1 | tee $$log; rc=$${PIPESTATUS[0]}; \
	if [ $$rc -ne 0 ]; then echo; echo "=== what failed (again, from the output above):"; \
		grep -aE '^[[:space:]]*(--- FAIL|Error Trace:|Error:|Messages:|Test:)|^ +[[:space:]] {12}[[:space:]][^[:space:]]|^panic:|^FAIL|^WARNING: DATA RACE|race detected|^[^[:space:]]+\.go:[0-9]+:[0-9]+: |^[[:space:]]+Test[^ ]+ \(|^[[:space:]]+[[:alnum:]_]+_test\.go:[0-9]+: ' $$log | cut -c1-400 | tail -80 \
		| grep . || echo "(no failure lines recognised: see the output above)"; fi; \
	rm -f $$log; exit $$rc

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/relay
	$(GO) build -o $(BIN) ./cmd/relay

.PHONY: run
run: build ## Run relay with an embedded NATS server on 127.0.0.1:4222 (data in ./relay-data)
	@echo "quickstart: deliveries to loopback (127.0.0.0/8, ::1) are allowed so 'relay sink' works; production relays refuse them"
	@echo "the HTTP API: http://127.0.0.1:8088/v1, the dashboard: http://127.0.0.1:8088/ui/ (create a key to sign in: bin/relay api-key create --name me --scope admin)"
	./$(BIN) run --allow-net 127.0.0.0/8 --allow-net ::1 --api-addr 127.0.0.1:8088

.PHONY: deps
deps: ## Install what the tests need that Go does not fetch (redis-server, chromium, tinyproxy, rabbitmq-server, from Debian)
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v tinyproxy >/dev/null 2>&1 || missing="$$missing tinyproxy"; \
	command -v rabbitmq-server >/dev/null 2>&1 || missing="$$missing rabbitmq-server"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing (Debian packages)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

.PHONY: test
test: deps ## Run every test but the fault-injection suite, with the race detector
	$(GO) vet ./...
	@$(call GOTEST,-race -count=1 -timeout 15m -skip '^TestFault' ./...)

.PHONY: screenshots
screenshots: deps ## Write a PNG of each dashboard page to docs/images (the browser tests, in Debian's chromium)
	RELAY_SCREENSHOTS=$(CURDIR)/docs/images $(GO) test -count=1 -run 'Test' ./ui

.PHONY: test-faults
test-faults: deps ## Run the fault-injection suite (real processes killed, stopped, cut off), with the race detector
	@$(call GOTEST,-race -count=1 -timeout 15m -run '^TestFault' -v ./integration)

SOAK ?= 10m

.PHONY: soak
soak: deps ## Soak test: SOAK (10m) of steady load, 5% failures, a replica restarted every minute; checks loss and memory
	RELAY_SOAK=$(SOAK) $(GO) test -count=1 -timeout 30m -run '^TestSoak$$' -v ./integration

.PHONY: test-race
test-race: deps ## Run the suite 3 times with the race detector, to shake out flaky timing
	$(GO) test -race -count=3 -timeout 45m ./...

# A count, not a duration: Go 1.26's fuzzer can fail spuriously, with no
# failing input, at a -fuzztime deadline (golang/go#75804). A duration
# (FUZZTIME=30s) still works, with that risk.
FUZZTIME ?= 20000x

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 20000x, a count of executions, as CI does)
	@for pkg in ./relay ./stream ./dlq ./api; do \
		for f in $$($(GO) test $$pkg -list '^Fuzz' | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
		done; \
	done

# The container image (deploy/image/Containerfile): FROM scratch around a
# static binary built here. podman runs with runc and the cgroupfs manager and
# the project's containers.conf (docs/deploy.md#container-image).
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)
VERSION  := $(VERSION)# once: the tree may change while the target runs
COMMIT   := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(if $(shell git status --porcelain 2>/dev/null),-dirty)
BUILDDATE:= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
ARCH     ?= amd64
IMAGE    ?= localhost/relay:$(VERSION)-$(ARCH)
IMAGECTX := bin/image/$(ARCH)
VERSIONPKG := github.com/relaydev/relay/internal/version
PODMAN   := CONTAINERS_CONF=$(CURDIR)/deploy/image/containers.conf podman --runtime /usr/sbin/runc --cgroup-manager=cgroupfs

.PHONY: podman
podman: ## Install podman and runc (Debian) if missing
	@if ! command -v podman >/dev/null 2>&1 || [ ! -x /usr/sbin/runc ]; then \
		echo "installing podman runc (Debian packages)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc >/dev/null; \
	fi

.PHONY: image
image: podman ## Build the OCI image IMAGE (FROM scratch, ARCH=amd64 or arm64) and print its size
	rm -rf $(IMAGECTX) && mkdir -p $(IMAGECTX)/tmp $(IMAGECTX)/data
	CGO_ENABLED=0 GOOS=linux GOARCH=$(ARCH) $(GO) build -trimpath -tags urfave_cli_no_docs \
		-ldflags "-s -w -X $(VERSIONPKG).Version=$(VERSION) -X $(VERSIONPKG).Commit=$(COMMIT) -X $(VERSIONPKG).Date=$(BUILDDATE)" \
		-o $(IMAGECTX)/relay ./cmd/relay
	cp /etc/ssl/certs/ca-certificates.crt $(IMAGECTX)/
	$(PODMAN) build --arch $(ARCH) -t $(IMAGE) -f deploy/image/Containerfile \
		--build-arg VERSION=$(VERSION) --build-arg REVISION=$(COMMIT) \
		--build-arg CREATED=$(BUILDDATE) $(IMAGECTX)
	@echo "$(IMAGE): $$($(PODMAN) image inspect --format '{{.Size}}' $(IMAGE)) bytes uncompressed"

.PHONY: image-test
image-test: image deps ## Test the image under podman: one node killed and restarted on its volume, a three-node cluster
	@export RELAY_IMAGE=$(IMAGE) CONTAINERS_CONF=$(CURDIR)/deploy/image/containers.conf; \
		$(call GOTEST,-count=1 -timeout 20m -v ./deploy/image)

# The front-door docs stay short: reference and design live in docs/.
DOC_LIMITS := README.md:20480 BENCHMARKS.md:15360

.PHONY: lint
lint: ## gofmt, go vet, staticcheck, and README.md / BENCHMARKS.md within their size limits
	@fail=0; for fl in $(DOC_LIMITS); do f=$${fl%%:*}; max=$${fl##*:}; size=$$(wc -c < $$f); \
		if [ $$size -gt $$max ]; then echo "$$f is $$size bytes, over its limit of $$max: move detail to docs/"; fail=1; fi; \
	done; exit $$fail
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	@$(MAKE) --no-print-directory shape

.PHONY: shape
shape: ## The engine stays one package among others: none over 25% of the code, relay's go doc under 60 lines (issue 38)
	@$(GO) list -f '{{.ImportPath}}{{range .GoFiles}} {{$$.Dir}}/{{.}}{{end}}' ./... | \
		while read -r pkg files; do [ -n "$$files" ] && echo "$$(cat $$files | wc -l) $$pkg"; done | \
		awk '{ n[$$2] = $$1; total += $$1 } END { for (p in n) if (n[p] * 4 > total) { printf "%s holds %d of %d non-test lines, over 25%%\n", p, n[p], total; bad = 1 } exit bad }'
	@n=$$($(GO) doc -short ./relay | wc -l); if [ $$n -ge 60 ]; then echo "go doc -short ./relay is $$n lines, 60 or more: the engine's API grew"; exit 1; fi

.PHONY: docs
docs: ## Regenerate docs/cli.md from the CLI definition (TestCLIDocsUpToDate fails when it is stale)
	$(GO) run ./cmd/relay docs cli > docs/cli.md.tmp && mv docs/cli.md.tmp docs/cli.md

.PHONY: bench
bench: build deps ## End-to-end benchmark (report in bench-results/, see BENCHMARKS.md), then the Go micro-benchmarks
	$(GO) run ./cmd/relay-bench -relay $(BIN) -out bench-results -shared
	$(GO) test -run '^$$' -bench . -benchmem ./relay ./api ./webhook

.PHONY: bench-cluster
bench-cluster: build ## Scenario (r): a 3-node NATS cluster, two relay replicas against the minimal loop (about 8 minutes; report in bench-results-cluster/)
	$(GO) run ./cmd/relay-bench -relay $(BIN) -out bench-results-cluster -scenarios r

# Helm is not a Debian package: chart-test builds it, pinned, from the Go
# module proxy into bin/ (once; later runs reuse it).
HELM_VERSION ?= v4.3.2
HELM         := bin/helm-$(HELM_VERSION)
CHART        := deploy/helm/relay
CHART_PROFILES := $(sort $(wildcard $(CHART)/ci/*-values.yaml))

$(HELM):
	@echo "building Helm $(HELM_VERSION) from the Go module proxy into $(HELM) (Helm is not packaged in Debian)"
	@mkdir -p bin/.helm && GOBIN=$(CURDIR)/bin/.helm $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION) && mv bin/.helm/helm $@ && rmdir bin/.helm

.PHONY: chart-test
chart-test: $(HELM) ## helm lint and helm template of the Helm chart for every values profile, then the Go checks of the rendered manifests
	$(HELM) lint --strict $(CHART)
	@for f in $(CHART_PROFILES); do \
		echo "helm lint --strict and helm template, $$f"; \
		$(HELM) lint --strict --quiet $(CHART) -f $$f || exit 1; \
		$(HELM) template rel $(CHART) --namespace hooks -f $$f > /dev/null || exit 1; \
	done
	@export RELAY_HELM=$(CURDIR)/$(HELM); $(call GOTEST,-count=1 -v ./deploy/helm/charttest)

.PHONY: dist
dist: ## Release archives (linux, darwin; amd64, arm64), .deb and .rpm (nfpm) and SHA256SUMS in dist/
	NFPM="$(NFPM)" deploy/packaging/dist.sh

.PHONY: dist-test
dist-test: dist ## Install dist/'s .deb here (dpkg, as root), check files, user, unit and binary, then purge it
	deploy/packaging/test.sh

.PHONY: clean
clean: ## Remove bin/ and dist/ (not relay-data/)
	rm -rf bin dist
