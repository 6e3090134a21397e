#!/usr/bin/env bash
# Everything CI runs, in order: the demo, tools, lint, the docs, unit and e2e tests.
# Prints each step with its duration; exits non-zero on the first failure.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" run-tests

cd "${REPO_DIR}"
BIN="${REPO_DIR}/.venv/bin"
started=${SECONDS}

step "make demo: builds exactly the tools it uses (tools dir: ${KCP_SHARD_TOOLS_DIR:-the cache})"
demo_env=(CLUSTER_NAME=kcp-shard-operator-ci-demo
  CLUSTER_KUBECONFIG="${REPO_DIR}/.cluster/ci-demo.kubeconfig" DEMO_LIVENESS_PORT=18089
  DEMO_METRICS_PORT=18099)
trap 'env "${demo_env[@]}" hack/demo.sh down >/dev/null 2>&1 || true' EXIT
env "${demo_env[@]}" make --no-print-directory demo
env "${demo_env[@]}" hack/demo.sh down
trap - EXIT

step "building missing tools"
hack/tools.sh build kubernetes etcd kwok helm kcp

step "lint: ruff check, ruff format --check, mypy --strict, lint-imports"
"${BIN}/ruff" check operator testkit tests bench
"${BIN}/ruff" format --check operator testkit tests bench
"${BIN}/mypy" --strict
"${BIN}/lint-imports"

step "docs: mkdocs build --strict"
"${BIN}/mkdocs" build --strict

# pytest-xdist workers for the unit and kwok e2e tests. Each worker starts a kwok cluster of its
# own; most of an e2e test's time is spent waiting (on kcp starting, on the operator's passes),
# so more workers than the 2 cores pay off.
PYTEST_WORKERS="${PYTEST_WORKERS:-3}"
step "pytest: unit and end-to-end tests (${PYTEST_WORKERS} xdist workers)"
set +e
# The kind tests (real pods) are their own targets: make e2e-kind, make e2e-upgrade.
# --dist loadgroup: tests that share kcp processes (marked xdist_group) run on one worker.
"${BIN}/pytest" -v --durations=15 --timeout=900 -n "${PYTEST_WORKERS}" --dist loadgroup \
  -m "not kind" "$@"
code=$?
set -e
if [[ ${code} -eq 5 ]]; then
  # Exit 5 means pytest collected nothing: for this project that is a broken test run.
  echo "pytest collected no tests; failing" >&2
  code=1
fi

# Real pods on kind when its images were built before (a cold build of them takes ~15 min).
node_image_stamp="${CACHE_DIR}/kind/node-image"
if [[ -f "${node_image_stamp}" ]] && command -v dockerd >/dev/null; then
  step "kind e2e: chart, in-cluster operator, real kcp pods, storage, the cache server, the demo (node image $(cat "${node_image_stamp}"))"
  set +e
  "${BIN}/pytest" -v --durations=5 --timeout=1800 -m kind tests/kind/test_no_false_alarm.py \
    tests/kind/test_demo.py tests/kind/test_real_shards.py tests/kind/test_storage.py tests/kind/test_cacheserver.py
  kind_code=$?
  set -e
  [[ ${kind_code} -eq 0 ]] || code=${kind_code}
else
  step "kind e2e not run: no kind node image built on this machine yet (make e2e-kind builds it)"
fi
step "finished in $((SECONDS - started))s with exit code ${code}"
exit "${code}"
