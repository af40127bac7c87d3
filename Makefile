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
deps: ## Install what the tests need that Go does not fetch (redis-server and chromium, from Debian)
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
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

.PHONY: docs
docs: ## Regenerate docs/cli.md from the CLI definition (TestCLIDocsUpToDate fails when it is stale)
	$(GO) run ./cmd/relay docs cli > docs/cli.md.tmp && mv docs/cli.md.tmp docs/cli.md

.PHONY: bench
bench: build deps ## End-to-end benchmark (report in bench-results/, see BENCHMARKS.md), then the Go micro-benchmarks
	$(GO) run ./cmd/relay-bench -relay $(BIN) -out bench-results -shared
	$(GO) test -run '^$$' -bench . -benchmem ./relay ./api

.PHONY: dist
dist: ## Release archives (linux, darwin; amd64, arm64), .deb and .rpm (nfpm) and SHA256SUMS in dist/
	NFPM="$(NFPM)" deploy/packaging/dist.sh

.PHONY: dist-test
dist-test: dist ## Install dist/'s .deb here (dpkg, as root), check files, user, unit and binary, then purge it
	deploy/packaging/test.sh

.PHONY: clean
clean: ## Remove bin/ and dist/ (not relay-data/)
	rm -rf bin dist
