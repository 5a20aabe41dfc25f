# ratelimit — make help lists the targets.
GO       ?= go
PKGS     ?= ./...
FUZZTIME ?= 10s
# Modules of their own that test and lint cover too (grpc/, otel/, envoy/: so that
# other users never download gRPC, OpenTelemetry or go-control-plane).
MODULES  ?= grpc otel envoy
# Tests and scripts use REDIS_ADDR when set, else 127.0.0.1:6379; the demo
# uses an embedded Redis unless REDIS_ADDR is set.

.PHONY: help demo test test-short lint fuzz bench bench-compare script-cost redis-up redis-down cluster-up cluster-down sentinel-up sentinel-down

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-z-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

demo: ## run the demo: three instances sharing one limit (embedded Redis)
	$(GO) run ./cmd/ratelimit-demo

# test runs every module even when one fails, and fails after them; the
# output is go test's without -v, and a last line counts the skipped tests.
test: ## run every test with -race (real Redis at REDIS_ADDR; skipped when absent unless RATELIMIT_REQUIRE_REDIS=1)
	@failed=$$(mktemp); \
	{ $(GO) test -json -race -shuffle=on -count=1 -timeout 10m $(PKGS) || echo . >>$$failed; \
	for m in $(MODULES); do (cd $$m && $(GO) test -json -race -shuffle=on -count=1 -timeout 10m ./...) || echo $$m >>$$failed; done; \
	} 2>&1 | $(GO) run scripts/testsum.go; \
	list=$$(tr '\n' ' ' <$$failed); rm -f $$failed; \
	if [ -n "$$list" ]; then echo "make test: failed in: $$list"; exit 1; fi

test-short: ## fast tests only (memory store, miniredis)
	$(GO) test -short -count=1 $(PKGS)

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	@command -v staticcheck >/dev/null 2>&1 || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$$(command -v staticcheck || echo $$($(GO) env GOPATH)/bin/staticcheck) $(PKGS)
	set -e; sc=$$(command -v staticcheck || echo $$($(GO) env GOPATH)/bin/staticcheck); for m in $(MODULES); do (cd $$m && $$sc ./...); done

fuzz: ## run each fuzz target for FUZZTIME (default 10s)
	@./scripts/fuzz.sh $(FUZZTIME)

bench: ## library benchmarks with -benchmem
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

bench-compare: ## side-by-side comparison with other Go rate limiters (bench/, its own module); QUICK=1 for a short run
	cd bench && $(GO) run ./cmd/compare $(if $(QUICK),-quick,)

script-cost: ## Redis instructions per decision of the token-bucket script (valgrind's callgrind; load-independent)
	@./scripts/script-cost.sh

redis-up: ## start a local redis-server on REDIS_ADDR if none answers
	@./scripts/redis-up.sh

redis-down: ## stop the redis-server that redis-up started
	@./scripts/redis-down.sh

cluster-up: ## start a local Redis Cluster: 3 primaries + 3 replicas on 127.0.0.1:7000-7005 (CLUSTER_PORT, CLUSTER_PRIMARIES, CLUSTER_REPLICAS)
	@./scripts/cluster-up.sh

cluster-down: ## stop the cluster that cluster-up started
	@./scripts/cluster-down.sh

sentinel-up: ## start a local Sentinel setup: primary 6390, replica 6391, sentinels 26390-26392 (SENTINEL_PORT, SENTINEL_DATA_PORT)
	@./scripts/sentinel-up.sh

sentinel-down: ## stop the Sentinel setup that sentinel-up started
	@./scripts/sentinel-down.sh
