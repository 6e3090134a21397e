# The shared header of the scripts in hack/, sourced first with the script's log tag:
#
#   # shellcheck source=lib.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" TAG
#
# Strict mode; HACK_DIR, REPO_DIR, CACHE_DIR (KCP_SHARD_CACHE, default
# ~/.cache/kcp-shard-operator) and the pinned versions of versions.env; progress output
# (log and die on stderr as "[TAG HH:MM:SS] ...", step, timed) and the helpers several
# scripts use.
set -euo pipefail

LOG_TAG="${1:?usage: source hack/lib.sh TAG}"
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034  # used by the scripts that source this file
REPO_DIR="$(dirname "${HACK_DIR}")"
# shellcheck disable=SC2034
CACHE_DIR="${KCP_SHARD_CACHE:-${HOME}/.cache/kcp-shard-operator}"
# shellcheck source=versions.env
source "${HACK_DIR}/versions.env"

log() { printf '[%s %s] %s\n' "${LOG_TAG}" "$(date +%H:%M:%S)" "$*" >&2; }

die() {
  log "ERROR: $*"
  exit 1
}

# A headline on stdout: one step of a long run.
step() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# timed WHAT COMMAND...: COMMAND between "building WHAT ..." and "built WHAT in Ns".
timed() {
  local what="$1"
  shift
  local start=${SECONDS}
  log "building ${what} ..."
  "$@"
  log "built ${what} in $((SECONDS - start))s"
}

# The pinned tools on PATH and their paths exported (KCP_BINARY, KIND_BINARY...).
load_tools() {
  eval "$("${HACK_DIR}/tools.sh" env)"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# The Debian mirror this machine's apt uses (DEBIAN_MIRROR overrides it).
debian_mirror() {
  if [[ -n "${DEBIAN_MIRROR:-}" ]]; then
    echo "${DEBIAN_MIRROR}"
    return
  fi
  local found
  found="$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
  [[ -n "${found}" ]] || found="$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)"
  echo "${found:-http://deb.debian.org/debian}"
}
