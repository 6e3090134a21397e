#!/usr/bin/env bash
# The operator image and kcp images, built without a container registry.
#
#   hack/image.sh operator        kcp-shard-operator:<appVersion> from the Dockerfile
#   hack/image.sh kcp             kcp images of the kcp binaries hack/tools.sh builds
#   hack/image.sh kcp-upgrade     the image of the newer kcp of make e2e-upgrade
#   hack/image.sh kcp-patch       the image of the patch release of make e2e-patch-upgrade
#   hack/image.sh kcp-next        the image of the newest kcp that builds (KCP_NEXT_VERSION)
#   hack/image.sh kube-router     kube-router's NetworkPolicy firewall for the kind tests
#   hack/image.sh backup          the backup sidecar: etcdctl, etcdutl (ETCD_VERSION), busybox, s3copy
#   hack/image.sh s3              SeaweedFS's weed (SEAWEEDFS_VERSION): the S3 store of the S3 backup test
#   hack/image.sh names           print the image names, one a line
#   hack/image.sh load CLUSTER    load those that are built into the kind cluster CLUSTER
#
# The operator's base is python:3.11-slim-bookworm when docker has it (pulled or loaded);
# otherwise Debian's python3 from a debootstrap rootfs, built once and cached as
# kcp-shard-operator-kind/python:<suite>-<key>. The package and its dependencies are
# built into a wheelhouse on the host (containers here cannot reach the package index).
# kcp images are FROM scratch with the static binary at /kcp (what the rendered
# Deployment runs): kcp-shard-operator-kind/kcp:v<KCP_VERSION> and, for the stand-in
# without the identitycache controller, :v<KCP_VERSION>-without-identitycache; the first is
# also tagged ghcr.io/kcp-dev/kcp:v<KCP_VERSION>, the image the samples' Shards default to.
# hack/kind.sh check runs first (root, disk, a running Docker engine).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" image

PREFIX=kcp-shard-operator-kind
export DOCKER_BUILDKIT=0
APP_VERSION="$(awk '$1 == "appVersion:" { gsub(/"/, "", $2); print $2 }' "${REPO_DIR}/charts/kcp-shard-operator/Chart.yaml")"
OPERATOR_IMAGE="${OPERATOR_IMAGE:-kcp-shard-operator:${APP_VERSION}}"
KCP_IMAGE_REPOSITORY="${PREFIX}/kcp"
UPSTREAM_PYTHON=python:3.11-slim-bookworm
UPSTREAM_KCP=ghcr.io/kcp-dev/kcp

# debootstrap_image TAG PACKAGES CMD: Debian's DEBIAN_SUITE minbase with PACKAGES (comma-separated)
# as image TAG, its command CMD (JSON); built once and cached under TAG.
debootstrap_image() {
  local tag="$1" packages="$2" work started=${SECONDS}
  if image_exists "${tag}"; then
    log "base ${tag}: cached"
    return
  fi
  mkdir -p "${CACHE_DIR}/kind"
  work="$(mktemp -d "${CACHE_DIR}/kind/base.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '${work}'" EXIT
  log "debootstrap ${DEBIAN_SUITE} with ${packages} (no registry: the base is built from Debian packages)"
  debootstrap --variant=minbase --include="${packages}" "${DEBIAN_SUITE}" \
    "${work}/rootfs" "$(debian_mirror)" >"${work}/debootstrap.log" 2>&1 ||
    { tail -n 20 "${work}/debootstrap.log" >&2; exit 1; }
  rm -rf "${work}/rootfs/var/lib/apt/lists/"* "${work}/rootfs/var/cache/apt/"*.bin \
    "${work}/rootfs/var/cache/apt/archives/"*.deb
  tar -C "${work}/rootfs" -c . | docker import --change "CMD $3" - "${tag}" >/dev/null
  rm -rf "${work}"
  trap - EXIT
  log "base ${tag} built in $((SECONDS - started))s"
}

python_base() {
  if image_exists "${UPSTREAM_PYTHON}"; then
    echo "${UPSTREAM_PYTHON}"
    return
  fi
  local packages=python3,python3-venv,ca-certificates key tag
  key="$(echo "${packages} ${DEBIAN_SUITE}" | sha256sum | cut -c1-10)"
  tag="${PREFIX}/python:${DEBIAN_SUITE}-${key}"
  debootstrap_image "${tag}" "${packages}" '["python3"]' >&2
  echo "${tag}"
}

cmd_operator() {
  local base context started=${SECONDS}
  base="$(python_base)"
  context="$(mktemp -d)"
  # shellcheck disable=SC2064
  trap "rm -rf '${context}'" EXIT
  cp -r "${REPO_DIR}/Dockerfile" "${REPO_DIR}/.dockerignore" "${REPO_DIR}/pyproject.toml" \
    "${REPO_DIR}/README.md" "${REPO_DIR}/requirements-runtime.lock" "${REPO_DIR}/operator" \
    "${context}/"
  find "${context}/operator" -name __pycache__ -prune -exec rm -rf {} +
  log "building the wheelhouse (the locked dependencies' wheels and the package's) on the host"
  make -C "${REPO_DIR}" --no-print-directory install >&2
  # The wheels themselves, not wheels built here: their hashes are the lock's.
  "${REPO_DIR}/.venv/bin/pip" download -q --require-hashes --no-deps --only-binary=:all: \
    -r "${context}/requirements-runtime.lock" -d "${context}/wheelhouse" >&2
  "${REPO_DIR}/.venv/bin/pip" wheel -q --no-deps --no-build-isolation \
    --wheel-dir "${context}/wheelhouse" "${context}" >&2
  log "building ${OPERATOR_IMAGE} on ${base}"
  docker build -q --build-arg "BASE_IMAGE=${base}" -t "${OPERATOR_IMAGE}" "${context}" >/dev/null
  rm -rf "${context}"
  trap - EXIT
  log "${OPERATOR_IMAGE} built in $((SECONDS - started))s"
}

# kcp_image TAG BINARY: /kcp from BINARY, and /cache-server, /kcp-front-proxy and
# /virtual-workspaces built beside it.
kcp_image() {
  local context
  context="$(mktemp -d)"
  mkdir -p "${context}/tmp"
  chmod 1777 "${context}/tmp"
  cp "$2" "${context}/kcp"
  cp "$(dirname "$2")/cache-server" "$(dirname "$2")/kcp-front-proxy" \
    "$(dirname "$2")/virtual-workspaces" "${context}/"
  printf '%s\n' 'FROM scratch' 'COPY tmp /tmp' 'COPY kcp /kcp' 'COPY cache-server /cache-server' \
    'COPY kcp-front-proxy /kcp-front-proxy' 'COPY virtual-workspaces /virtual-workspaces' \
    'USER 65532:65532' 'ENTRYPOINT ["/kcp"]' >"${context}/Dockerfile"
  docker build -q -t "$1" "${context}" >/dev/null
  rm -rf "${context}"
  log "built $1 from $2"
}

cmd_kcp() {
  "${HACK_DIR}/tools.sh" build kcp >&2
  load_tools
  kcp_image "${KCP_IMAGE_REPOSITORY}:${KCP_VERSION}" "${KCP_BINARY}"
  kcp_image "${KCP_IMAGE_REPOSITORY}:${KCP_VERSION}-without-identitycache" \
    "$(dirname "${KCP_BINARY}")/kcp-without-identitycache"
  # Also under the Shards' default image name, which no registry serves here: the samples
  # (spec.version only) then run on kind from this build of the same kcp release.
  docker tag "${KCP_IMAGE_REPOSITORY}:${KCP_VERSION}" "${UPSTREAM_KCP}:${KCP_VERSION}"
  log "tagged ${UPSTREAM_KCP}:${KCP_VERSION} (built here from kcp ${KCP_VERSION})"
}

cmd_kcp_upgrade() {
  "${HACK_DIR}/tools.sh" build kcp-upgrade >&2
  load_tools
  kcp_image "${KCP_IMAGE_REPOSITORY}:${KCP_UPGRADE_VERSION}" "${KCP_UPGRADE_BINARY}"
}

cmd_kcp_patch() {
  "${HACK_DIR}/tools.sh" build kcp-patch >&2
  load_tools
  kcp_image "${KCP_IMAGE_REPOSITORY}:${KCP_PATCH_VERSION}" "${KCP_PATCH_BINARY}"
}

cmd_kcp_next() {
  "${HACK_DIR}/tools.sh" build kcp-next >&2
  load_tools
  kcp_image "${KCP_IMAGE_REPOSITORY}:${KCP_NEXT_VERSION}" "${KCP_NEXT_BINARY}"
}

# The backup sidecar of Shards with spec.backup (the default spec.backup.image): FROM scratch,
# etcdctl and etcdutl of the pinned etcd from their Go modules, Debian's static busybox
# (its sh, df, stat, sha256sum, rm) from the kind node's storage helper image, and s3copy
# (hack/s3copy: the uploader of the S3 target).
cmd_backup() {
  local context c tag="${BACKUP_IMAGE:-kcp-shard-operator-backup:${ETCD_VERSION}}"
  local helper="${PREFIX}/local-path-helper:busybox-${DEBIAN_SUITE}"
  "${HACK_DIR}/tools.sh" build etcd-tools >&2
  load_tools
  image_exists "${helper}" || die "${helper} is missing: hack/kind.sh builds it with the node image"
  context="$(mktemp -d)"
  mkdir -p "${context}/tmp"
  chmod 1777 "${context}/tmp"
  cp "${ETCDCTL_BINARY}" "${ETCDUTL_BINARY}" "${context}/"
  (cd "${HACK_DIR}/s3copy" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local \
    go build -trimpath -ldflags "-s -w" -o "${context}/s3copy" .)
  c="$(docker create "${helper}" /bin/busybox true)"
  docker cp -L "${c}:/bin/busybox" "${context}/busybox" >/dev/null
  docker rm -v "${c}" >/dev/null
  printf '%s\n' 'FROM scratch' 'COPY tmp /tmp' 'COPY etcdctl /etcdctl' 'COPY etcdutl /etcdutl' \
    'COPY busybox /busybox' 'COPY s3copy /s3copy' 'USER 65532:65532' 'ENTRYPOINT ["/busybox"]' \
    >"${context}/Dockerfile"
  docker build -q -t "${tag}" "${context}" >/dev/null
  rm -rf "${context}"
  log "built ${tag}"
}

# SeaweedFS's weed, FROM scratch: the S3-compatible store the S3 backup test runs in the
# cluster (tests/kind/test_backup_s3.py). Its data directory and /tmp are volumes.
cmd_s3() {
  local context tag="${PREFIX}/seaweedfs:${SEAWEEDFS_VERSION##*-}"
  "${HACK_DIR}/tools.sh" build seaweedfs >&2
  load_tools
  context="$(mktemp -d)"
  mkdir -p "${context}/tmp"
  chmod 1777 "${context}/tmp"
  cp "${WEED_BINARY}" "${context}/weed"
  printf '%s\n' 'FROM scratch' 'COPY tmp /tmp' 'COPY weed /weed' 'USER 65532:65532' \
    'ENTRYPOINT ["/weed"]' >"${context}/Dockerfile"
  docker build -q -t "${tag}" "${context}" >/dev/null
  rm -rf "${context}"
  log "built ${tag}"
}

# kube-router's network-policy controller for the kind tests (tests/kind/networkpolicies.py): the
# binary from its Go module on Debian's iptables and ipset.
cmd_kube_router() {
  local packages=iptables,ipset base context tag="${PREFIX}/kube-router:${KUBE_ROUTER_VERSION}"
  "${HACK_DIR}/tools.sh" build kube-router >&2
  load_tools
  base="${PREFIX}/netfilter:${DEBIAN_SUITE}-$(echo "${packages} ${DEBIAN_SUITE}" | sha256sum | cut -c1-10)"
  debootstrap_image "${base}" "${packages}" '["/bin/sh"]'
  context="$(mktemp -d)"
  cp "${KUBE_ROUTER_BINARY}" "${context}/kube-router"
  printf '%s\n' "FROM ${base}" 'COPY kube-router /kube-router' 'ENTRYPOINT ["/kube-router"]' \
    >"${context}/Dockerfile"
  docker build -q -t "${tag}" "${context}" >/dev/null
  rm -rf "${context}"
  log "built ${tag}"
}

cmd_names() {
  echo "${OPERATOR_IMAGE}"
  echo "${KCP_IMAGE_REPOSITORY}:${KCP_VERSION}"
  echo "${KCP_IMAGE_REPOSITORY}:${KCP_VERSION}-without-identitycache"
  echo "${UPSTREAM_KCP}:${KCP_VERSION}"
  echo "${KCP_IMAGE_REPOSITORY}:${KCP_UPGRADE_VERSION}"
  echo "${KCP_IMAGE_REPOSITORY}:${KCP_PATCH_VERSION}"
  echo "${KCP_IMAGE_REPOSITORY}:${KCP_NEXT_VERSION}"
  echo "${BACKUP_IMAGE:-kcp-shard-operator-backup:${ETCD_VERSION}}"
}

cmd_load() {
  local built=()
  for image in $(cmd_names); do
    if image_exists "${image}"; then built+=("${image}"); fi
  done
  "${HACK_DIR}/kind.sh" load "$1" "${built[@]}"
}

case "${1:-}" in
  operator) "${HACK_DIR}/kind.sh" check && cmd_operator ;;
  kcp) "${HACK_DIR}/kind.sh" check && cmd_kcp ;;
  kcp-upgrade) "${HACK_DIR}/kind.sh" check && cmd_kcp_upgrade ;;
  kcp-patch) "${HACK_DIR}/kind.sh" check && cmd_kcp_patch ;;
  kcp-next) "${HACK_DIR}/kind.sh" check && cmd_kcp_next ;;
  kube-router) "${HACK_DIR}/kind.sh" check && cmd_kube_router ;;
  backup) "${HACK_DIR}/kind.sh" check && cmd_backup ;;
  s3) "${HACK_DIR}/kind.sh" check && cmd_s3 ;;
  names) cmd_names ;;
  load) cmd_load "$2" ;;
  *) echo "usage: $0 operator | kcp | kcp-upgrade | kcp-patch | kcp-next | kube-router | backup | s3 | names | load CLUSTER" >&2; exit 2 ;;
esac
