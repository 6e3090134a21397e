# kcp-shard-operator. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CLUSTER ?= kwok
export CLUSTER
export KUBECONFIG ?= $(CURDIR)/.cluster/kubeconfig

.PHONY: help
help: ## list targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(BIN)/kcp-shard-operator: pyproject.toml
	@echo ">> creating $(VENV) and installing the package with test extras"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

.PHONY: install
install: $(BIN)/kcp-shard-operator ## create .venv with an editable install and test extras

.PHONY: lint
lint: install ## ruff check, ruff format --check, mypy --strict, lint-imports (the layers)
	$(BIN)/ruff check operator testkit tests bench
	$(BIN)/ruff format --check operator testkit tests bench
	$(BIN)/mypy --strict
	$(BIN)/lint-imports

.PHONY: fmt
fmt: install ## format and autofix
	$(BIN)/ruff format operator testkit tests bench
	$(BIN)/ruff check --fix operator testkit tests bench

.PHONY: unit
unit: install ## unit tests only (no cluster, no tool built), on every core (pytest-xdist)
	$(BIN)/pytest -q -m 'not e2e' -n auto

.PHONY: test
test: install ## everything CI runs: build missing tools, lint, unit and e2e tests
	hack/run-tests.sh

.PHONY: bench
bench: install ## benchmarks: print figures, write them to bench/results/*.json
	$(BIN)/python bench/bench.py
	$(BIN)/python bench/operator_bench.py

.PHONY: tools
tools: ## build the pinned cluster tools into ~/.cache/kcp-shard-operator
	hack/tools.sh build

.PHONY: kcp
kcp: ## build kcp (KCP_VERSION) and the stand-in kcp-without-identitycache into the tools cache
	hack/tools.sh build kcp

.PHONY: kcp-test
kcp-test: install kcp ## e2e tests of cleanup-identitycache against a real root shard + shard-1
	$(BIN)/pytest -v tests/e2e/test_cleanup_cli.py

.PHONY: cluster-up
cluster-up: ## start the local cluster (CLUSTER=kwok default, or kind) and print its KUBECONFIG
	CLUSTER=$(CLUSTER) hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## delete the local cluster
	CLUSTER=$(CLUSTER) hack/cluster.sh down

.PHONY: cluster-status
cluster-status: ## show the local cluster's components, version and nodes
	CLUSTER=$(CLUSTER) hack/cluster.sh status

.PHONY: image
image: install ## operator and kcp images (no registry needed); loaded into the kind cluster CLUSTER_NAME if it runs
	hack/image.sh operator
	hack/image.sh kcp
	if hack/kind.sh kind get clusters 2>/dev/null | grep -x "$${CLUSTER_NAME:-kcp-shard-operator}" >/dev/null; then \
	  hack/image.sh load "$${CLUSTER_NAME:-kcp-shard-operator}"; fi

.PHONY: e2e-kind
e2e-kind: install ## real pods on kind: chart, in-cluster operator, root + non-root kcp shards Ready, storage, data kept, the cache server, the demo
	$(BIN)/pytest -v -m kind tests/kind/test_real_shards.py tests/kind/test_storage.py tests/kind/test_durability.py tests/kind/test_cacheserver.py tests/kind/test_demo.py

.PHONY: e2e-upgrade
e2e-upgrade: install ## rolling and patch upgrade e2e on kind with real kcp pods and data checks; prints the timelines
	$(BIN)/pytest -v -s -m kind tests/kind/test_upgrade.py tests/kind/test_patch_upgrade.py

.PHONY: e2e-patch-upgrade
e2e-patch-upgrade: install ## patch upgrade and rollback on kind, /readyz never failing, data checks
	$(BIN)/pytest -v -s -m kind tests/kind/test_patch_upgrade.py

.PHONY: demo
demo: ## the main job: cluster up, chart installed, operator running, samples Ready (CLUSTER=kind: real pods)
	hack/demo.sh up

.PHONY: demo-down
demo-down: ## stop the demo operator and delete the cluster
	hack/demo.sh down

.PHONY: run
run: install ## run the operator locally against $$KUBECONFIG
	$(BIN)/kcp-shard-operator run --all-namespaces

.PHONY: generate
generate: install ## regenerate the CRD, its chart copy, install.yaml and the render golden files
	$(BIN)/kcp-shard-operator crd > manifests/crds/kcpshard.dev.yaml
	$(MAKE) --no-print-directory manifests
	UPDATE_GOLDEN=1 $(BIN)/pytest -q tests/test_golden_render.py

.PHONY: migrate-golden
migrate-golden: install ## rewrite the migrate-values golden outputs and reports (review the diff)
	UPDATE_GOLDEN=1 $(BIN)/pytest -q tests/test_migrate_golden.py tests/test_migrate_cli.py

CHART := charts/kcp-shard-operator

.PHONY: manifests
manifests: ## copy the CRD into the chart and render manifests/install.yaml from it (helm template)
	cp manifests/crds/kcpshard.dev.yaml $(CHART)/crds/kcpshard.dev.yaml
	hack/render-install.sh > manifests/install.yaml.tmp
	mv manifests/install.yaml.tmp manifests/install.yaml

.PHONY: chart-lint
chart-lint: ## helm lint --strict the chart with its default values and each ci/*-values.yaml
	hack/tools.sh build helm
	eval "$$(hack/tools.sh env)"; \
	helm lint --strict $(CHART); \
	for values in $(CHART)/ci/*-values.yaml; do helm lint --strict $(CHART) -f "$$values"; done
