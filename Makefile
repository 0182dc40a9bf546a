# Bloodraven: the two commands a new user needs are `make playground` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo

.PHONY: help
help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## Build etcd, kube-apiserver, kubectl, the node's binaries, helm and cert-manager from the Go module proxy (cached by version)
	hack/build-k8s.sh
	hack/build-helm.sh
	hack/build-cert-manager.sh

.PHONY: crd
crd: ## Regenerate charts/bloodraven/crds from the Rust types
	$(CARGO) xtask crd

.PHONY: check
check: ## fmt, clippy (warnings are errors), the CRD and OpenAPI drift checks, the chart's lint and template checks
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings
	$(CARGO) xtask crd --check
	$(CARGO) xtask openapi --check
	hack/chart.sh check

.PHONY: chart
chart: ## Regenerate charts/bloodraven/files/webhook-configurations.yaml from `bloodraven-webhook configurations`
	hack/chart.sh webhooks

.PHONY: openapi
openapi: ## Regenerate docs/deploy-api.openapi.yaml from the Rust types
	$(CARGO) xtask openapi

.PHONY: unit
unit: ## Unit and property tests (the e2e crate's too: its own logic, no cluster)
	$(CARGO) test --locked --workspace --exclude bloodraven-e2e
	$(CARGO) test --locked -p bloodraven-e2e --lib --bins
	cd nemesis/checker && go test ./...

.PHONY: deps
deps: ## Install the Debian packages the tests, benchmarks and playground need (MariaDB, containerd, …) when missing (root)
	hack/deps.sh

.PHONY: e2e
e2e: deps tools ## End-to-end tests: real kube-apiserver + etcd and a real node (kubelet, containerd), real MariaDB sites, the real operator
	hack/e2e.sh

.PHONY: nemesis
nemesis: deps tools ## Randomized combined faults on the real stack, judged by the checker (NEMESIS_SEEDS, NEMESIS_SECONDS, E2E_FLAVORS; docs/nemesis.md)
	hack/nemesis.sh

.PHONY: nemesis-short
nemesis-short: deps tools ## The nemesis' regression schedule, short: seed 1, 60 s, both flavors (part of make test)
	NEMESIS_SEEDS="$${NEMESIS_SEEDS:-1}" NEMESIS_SECONDS="$${NEMESIS_SECONDS:-60}" hack/nemesis.sh

.PHONY: figures
figures: deps tools ## Print figures: operator RSS with 1 and 50 groups, probe-to-status latency (release build)
	hack/e2e.sh --figures

.PHONY: bench-failover
bench-failover: deps tools ## Failover benchmark: client write unavailability over 20 planned failovers, kill -9 → writable over 10 kills, MariaDB and MySQL side by side (release build; BENCH_FLAVORS)
	hack/e2e.sh --bench-failover

.PHONY: bench
bench: deps tools ## Deploy-API renewal benchmark beside a plain Lease CAS baseline (release build; BENCH_RATE, BENCH_WORKERS, BENCH_SECONDS, BENCH_GROUPS)
	hack/e2e.sh --bench

.PHONY: bench-sidecar
bench-sidecar: deps tools ## Sidecar benchmark: revocation → SIGTERM p50/p99 over 50 revocations at TTL 30 and 120, with the watch and with renewals alone side by side; sidecar RSS; start → both leases held (release-sidecar build)
	hack/e2e.sh --bench-sidecar

.PHONY: bench-webhook
bench-webhook: deps tools ## Webhook benchmark: admission latency through kube-apiserver at 100 req/s, p50/p99 beside a no-op webhook in the same run; webhook RSS (release build; BENCH_RATE, BENCH_SECONDS)
	hack/e2e.sh --bench-webhook

.PHONY: bench-migrate
bench-migrate: deps ## Migration-runner benchmark: a reader's longest stall behind a blocked ALTER with the defaults beside the server's default lock timeouts, --on-blocker fail and wait, in one run, MariaDB and MySQL side by side (release build; BENCH_HOLD_SECONDS, BENCH_FLAVORS)
	hack/e2e.sh --bench-migrate

.PHONY: images
images: ## Build the project's OCI images here (static operator binary; no daemon, no registry) into ~/.cache/bloodraven/images
	hack/images.sh build

.PHONY: release
release: ## The kubectl plugin's release archive and its krew manifest, in dist/ (RELEASE_URL: where the archive will be served)
	hack/release.sh build

.PHONY: release-check
release-check: tools ## Build the release archive, validate its krew manifest and install it with krew into a temporary root
	hack/release.sh check

.PHONY: test
test: check unit release-check e2e nemesis-short ## Everything CI runs: checks, unit tests, the plugin's krew install, the e2e suite, then the nemesis' short schedule

.PHONY: playground
playground: tools ## Build and start a local playground: control plane, two MariaDB sites (FLAVOR=mysql: MySQL 9.7), the operator, group `playground`
	FLAVOR=$(FLAVOR) hack/playground.sh up

.PHONY: playground-down
playground-down: ## Stop every process of the playground
	hack/playground.sh down
