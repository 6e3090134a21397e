#!/usr/bin/env bash
# Everything CI runs, in order: tools, lint, unit and e2e tests.
# Prints each step with its duration; exits non-zero on the first failure.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "${HACK_DIR}")"
cd "${REPO_DIR}"
BIN="${REPO_DIR}/.venv/bin"

step() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
started=${SECONDS}

step "building missing tools (cached in ~/.cache/kcp-shard-operator)"
hack/tools.sh build kubernetes etcd kwok helm kcp

step "lint: ruff check, ruff format --check, mypy --strict"
"${BIN}/ruff" check operator tests bench
"${BIN}/ruff" format --check operator tests bench
"${BIN}/mypy" --strict

step "pytest: unit and end-to-end tests"
set +e
"${BIN}/pytest" -v --durations=15 --timeout=900 "$@"
code=$?
set -e
if [[ ${code} -eq 5 ]]; then
  # Exit 5 means pytest collected nothing: for this project that is a broken test run.
  echo "pytest collected no tests; failing" >&2
  code=1
fi
step "finished in $((SECONDS - started))s with exit code ${code}"
exit "${code}"
