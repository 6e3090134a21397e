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

# The Python dependencies, pinned with their hashes by `make lock` (pip-tools' pip-compile):
# requirements-runtime.lock the package's own (the image installs these), requirements.lock
# those and the test and docs extras and the build backend, at the same versions (.venv).
RUNTIME_LOCK := requirements-runtime.lock
LOCK := requirements.lock
PIP_TOOLS_VERSION := 7.6.2
LOCK_VENV := .venv-lock
PIP_COMPILE = CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet \
  --generate-hashes --allow-unsafe --strip-extras --no-emit-find-links $(LOCK_ARGS)

$(BIN)/kcp-shard-operator: pyproject.toml $(LOCK)
	@echo ">> creating $(VENV): the dependencies of $(LOCK), then the package (editable)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes -r $(LOCK)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/pip check  # a dependency pyproject.toml names and $(LOCK) lacks: run `make lock`
	@touch $@

.PHONY: install
install: $(BIN)/kcp-shard-operator ## create .venv from requirements.lock (test and docs extras), the package editable

$(LOCK_VENV)/bin/pip-compile:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install -q 'pip-tools==$(PIP_TOOLS_VERSION)'

.PHONY: lock
lock: $(LOCK_VENV)/bin/pip-compile ## pin the Python dependencies from pyproject.toml (LOCK_ARGS=--upgrade: newest)
	$(PIP_COMPILE) -o $(RUNTIME_LOCK) pyproject.toml
	$(PIP_COMPILE) --all-extras --build-deps-for editable -c $(RUNTIME_LOCK) -o $(LOCK) pyproject.toml

.PHONY: lint
lint: install ## ruff check, ruff format --check, mypy --strict, lint-imports (the layers)
	$(BIN)/ruff check operator testkit tests bench hack
	$(BIN)/ruff format --check operator testkit tests bench hack
	$(BIN)/mypy --strict
	$(BIN)/lint-imports

.PHONY: docs
docs: install ## build the docs site into site/ (mkdocs build --strict: broken links and pages outside the nav fail)
	$(BIN)/mkdocs build --strict

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
e2e-kind: install ## real pods on kind: chart, in-cluster operator, root + non-root kcp shards Ready, storage, data kept, the cache server, virtual-workspace servers, the demo, user access, OIDC and ServiceAccount tokens, leader election and the cache NetworkPolicy
	$(BIN)/pytest -v -m kind tests/kind/test_real_shards.py tests/kind/test_storage.py tests/kind/test_durability.py tests/kind/test_cacheserver.py tests/kind/test_virtual_workspaces.py tests/kind/test_no_false_alarm.py tests/kind/test_demo.py tests/kind/test_user_access.py tests/kind/test_oidc_access.py tests/kind/test_replicated_trust.py

.PHONY: e2e-upgrade
e2e-upgrade: install ## rolling and patch upgrade e2e on kind with real kcp pods and data checks; prints the timelines
	$(BIN)/pytest -v -s -m kind tests/kind/test_upgrade.py tests/kind/test_patch_upgrade.py tests/kind/test_installation_restore.py

.PHONY: s3copy-test
s3copy-test: ## the S3 uploader of the backup image (hack/s3copy) against a real SeaweedFS (built first)
	hack/tools.sh build seaweedfs
	eval "$$(hack/tools.sh env)" && cd hack/s3copy && CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local go test -count=1 .

.PHONY: e2e-backup
e2e-backup: install s3copy-test ## backups on kind: a verified snapshot of each running shard on demand, data checks, figures; a shard on an external etcd backed up through its endpoints and TLS; a root whose data was lost restored from its scheduled backup; a root deleted with its data claim made again from the manifest of its backup; a whole installation restored to its backups before an upgrade; backups into a real S3 store (SeaweedFS, built from its Go module: ~10 min cold) and a restore from one
	$(BIN)/pytest -v -s -m kind tests/kind/test_backup.py tests/kind/test_external_etcd_backup.py tests/kind/test_restore_data_lost.py tests/kind/test_restore_new_shard.py tests/kind/test_installation_restore.py tests/kind/test_backup_s3.py

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
generate: install ## regenerate the CRD, its chart copy and values schema, install.yaml, the API reference and the render golden files
	$(BIN)/kcp-shard-operator crd > manifests/crds/kcpshard.dev.yaml
	$(BIN)/python hack/chart-schema.py manifests/crds/kcpshard.dev.yaml charts/kcp-shard-operator/values.schema.json
	$(BIN)/kcp-shard-operator api-reference > docs/reference/api.md
	$(MAKE) --no-print-directory manifests
	UPDATE_GOLDEN=1 $(BIN)/pytest -q tests/unit/installation/test_golden_render.py

.PHONY: migrate-golden
migrate-golden: install ## rewrite the migrate-values golden outputs and reports (review the diff)
	UPDATE_GOLDEN=1 $(BIN)/pytest -q tests/unit/migrate/test_migrate_golden.py tests/unit/migrate/test_migrate_cli.py

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
