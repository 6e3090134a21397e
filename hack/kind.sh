#!/usr/bin/env bash
# kind on a machine without registry access (CLUSTER=kind in hack/cluster.sh).
#
#   hack/kind.sh check                       host checks; installs and starts the Docker engine
#   hack/kind.sh up NAME KUBECONFIG          node image (built when missing), then the cluster
#   hack/kind.sh down NAME KUBECONFIG        delete the cluster and, when unused, its network
#   hack/kind.sh load NAME IMAGE...          load local docker images into the cluster's node
#   hack/kind.sh kind ARGS...                run the pinned kind (with the docker shim if needed)
#
# The host checks come first and create nothing; each failure is one line and exit 2:
# not root (debootstrap, chroot and dockerd need it), less than KIND_MIN_FREE_GIB
# (default 10) GiB free for the cache or for Docker, no Docker engine, dockerd not running.
# On Debian, missing docker.io and debootstrap are installed with apt-get and a stopped
# dockerd is started (log: <cache>/dockerd.log) unless KCP_SHARD_APT_INSTALL=0 or
# KCP_SHARD_START_DOCKERD=0; DOCKERD names another dockerd binary.
#
# Hosts whose capability bounding set lacks CAP_SYS_RESOURCE (detected on dockerd's process)
# cannot run `docker run --privileged`, which kind hard-codes: kind then runs with a docker
# shim that grants every other capability instead, and the node image gets an entrypoint
# step that remounts /sys and the cgroups read-write (hack/kind/images.sh).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" kind

MIN_FREE_GIB="${KIND_MIN_FREE_GIB:-10}"
DOCKERD="${DOCKERD:-dockerd}"
CAP_SYS_RESOURCE=24

fail() {
  printf 'hack/kind.sh: %s\n' "$*" >&2
  exit 2
}

# The closest existing directory at or above $1.
existing_parent() {
  local dir="$1"
  until [[ -d "${dir}" ]]; do dir="$(dirname "${dir}")"; done
  echo "${dir}"
}

check_disk() {
  local dir free
  dir="$(existing_parent "$1")"
  free=$(($(df -Pk "${dir}" | awk 'NR == 2 { print $4 }') / 1024 / 1024))
  ((free >= MIN_FREE_GIB)) ||
    fail "disk too small: ${MIN_FREE_GIB} GiB must be free for $2 in ${dir}, ${free} GiB are; free some space or set KCP_SHARD_CACHE"
}

docker_up() { timeout 20 docker info >/dev/null 2>&1; }

# install_package COMMAND PACKAGE WHAT: apt-get install PACKAGE when COMMAND is missing.
install_package() {
  command -v "$1" >/dev/null && return 0
  if [[ "${KCP_SHARD_APT_INSTALL:-1}" == 0 ]] || ! command -v apt-get >/dev/null; then
    fail "$3"
  fi
  log "installing $2 with apt-get (log: /tmp/kcp-shard-operator-apt.log)"
  {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2"
  } >/tmp/kcp-shard-operator-apt.log 2>&1 || fail "apt-get install $2 failed: see /tmp/kcp-shard-operator-apt.log"
}

start_dockerd() {
  docker_up && return 0
  if [[ -n "${DOCKER_HOST:-}" || "${KCP_SHARD_START_DOCKERD:-1}" == 0 ]]; then
    fail "dockerd is not running: start it (systemctl start docker, or dockerd &)"
  fi
  mkdir -p "${CACHE_DIR}"
  log "starting dockerd (log: ${CACHE_DIR}/dockerd.log)"
  setsid nohup "${DOCKERD}" >>"${CACHE_DIR}/dockerd.log" 2>&1 </dev/null &
  local deadline=$((SECONDS + 60))
  until docker_up; do
    ((SECONDS < deadline)) || fail "dockerd did not start within 60s: see ${CACHE_DIR}/dockerd.log"
    sleep 1
  done
}

cmd_check() {
  ((EUID == 0)) || fail "not root: building kind's images needs root (debootstrap, chroot, dockerd); run as root or with sudo"
  check_disk "${CACHE_DIR}" "the image build cache"
  check_disk /var/lib/docker "Docker's images"
  install_package "${DOCKERD}" docker.io "no Docker engine: install one (Debian: apt-get install docker.io debootstrap)"
  start_dockerd
  install_package debootstrap debootstrap "no debootstrap: install it (apt-get install debootstrap)"
}

# Whether dockerd runs without CAP_SYS_RESOURCE (so --privileged fails): 1 or 0.
unprivileged() {
  local pid bounding
  pid="$(pgrep -o -x dockerd || true)"
  [[ -n "${pid}" && -r "/proc/${pid}/status" ]] || { echo 0; return; }
  bounding="$(awk '/^CapBnd:/ { print $2 }' "/proc/${pid}/status")"
  if (((16#${bounding} >> CAP_SYS_RESOURCE) & 1)); then echo 0; else echo 1; fi
}

# PATH for kind: the docker shim first when the host needs it.
kind_path() {
  if [[ "$(unprivileged)" == 1 ]]; then
    local shim="${CACHE_DIR}/kind/shim"
    mkdir -p "${shim}"
    sed "s|@DOCKER@|$(command -v docker)|" "${HACK_DIR}/kind/docker-shim" >"${shim}/docker.tmp"
    chmod 0755 "${shim}/docker.tmp"
    mv "${shim}/docker.tmp" "${shim}/docker"
    echo "${shim}:${PATH}"
  else
    echo "${PATH}"
  fi
}

run_kind() {
  "${HACK_DIR}/tools.sh" build kind >&2
  load_tools
  PATH="$(kind_path)" "${KIND_BINARY}" "$@"
}

# grep reads the whole list: with -q it stops at the match, kind dies of SIGPIPE and pipefail
# reports the cluster as missing.
cluster_exists() { run_kind get clusters 2>/dev/null | grep -x "$1" >/dev/null; }

cmd_up() {
  local name="$1" kubeconfig="$2" node config
  cmd_check
  node="$(KIND_UNPRIVILEGED="$(unprivileged)" "${HACK_DIR}/kind/images.sh" node)"
  if cluster_exists "${name}"; then
    log "kind cluster ${name} exists"
    mkdir -p "$(dirname "${kubeconfig}")"
    run_kind export kubeconfig --name "${name}" --kubeconfig "${kubeconfig}" >&2
    return
  fi
  [[ -d /lib/modules ]] || touch "${CACHE_DIR}/kind/created-lib-modules"
  config="$(mktemp --suffix .kind.yaml)"
  cat >"${config}" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
nodes:
  - role: control-plane
    image: ${node}
EOF
  log "creating kind cluster ${name} (node image ${node})"
  mkdir -p "$(dirname "${kubeconfig}")"
  if ! run_kind create cluster --name "${name}" --config "${config}" --kubeconfig "${kubeconfig}" \
    --wait "${CLUSTER_WAIT_TIMEOUT:-240s}" >&2; then
    rm -f "${config}"
    log "kind create cluster failed; removing what it left"
    cmd_down "${name}" "${kubeconfig}"
    exit 1
  fi
  rm -f "${config}"
}

cmd_down() {
  local name="$1" kubeconfig="$2"
  docker_up || { log "no running Docker engine: no kind cluster to delete"; return; }
  if cluster_exists "${name}"; then
    log "deleting kind cluster ${name}"
    run_kind delete cluster --name "${name}" --kubeconfig "${kubeconfig}" >&2
  else
    log "no kind cluster ${name}"
  fi
  rm -f "${kubeconfig}"
  # kind's network is shared by its clusters: removed with the last one.
  if docker network inspect kind >/dev/null 2>&1 &&
    [[ "$(docker network inspect kind -f '{{len .Containers}}')" == 0 ]]; then
    log "removing the docker network kind (no cluster left on it)"
    docker network rm kind >/dev/null
  fi
  # docker creates an empty /lib/modules for kind's bind mount on hosts without one.
  if [[ -f "${CACHE_DIR}/kind/created-lib-modules" ]] && [[ -z "$(run_kind get clusters 2>/dev/null)" ]]; then
    rmdir /lib/modules 2>/dev/null || true
    rm -f "${CACHE_DIR}/kind/created-lib-modules"
  fi
}

cmd_load() {
  local name="$1"
  shift
  for image in "$@"; do
    log "loading ${image} into kind cluster ${name}"
    run_kind load docker-image "${image}" --name "${name}" >&2
  done
}

case "${1:-}" in
  check) cmd_check ;;
  up) cmd_up "$2" "$3" ;;
  down) cmd_down "$2" "$3" ;;
  load) shift; cmd_load "$@" ;;
  kind) shift; run_kind "$@" ;;
  *)
    echo "usage: $0 check | up NAME KUBECONFIG | down NAME KUBECONFIG | load NAME IMAGE... | kind ARGS..." >&2
    exit 2
    ;;
esac
