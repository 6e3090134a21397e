#!/usr/bin/env bash
# Build the pinned local-cluster tools from their Go modules into a
# version-keyed cache, reusing what is already there.
#
#   hack/tools.sh build [kubernetes|etcd|kwok|helm|kcp ...]   build what is missing (kcp: on request)
#   hack/tools.sh build kind kubernetes-node crictl coredns local-path-provisioner
#                                                         kind and its node's binaries (hack/kind.sh)
#   hack/tools.sh build kcp-upgrade                       the newer kcp of make e2e-upgrade
#   hack/tools.sh build kcp-patch                         the patch release of make e2e-patch-upgrade
#   hack/tools.sh build kcp-next                          the newest kcp that builds (KCP_NEXT_VERSION)
#   hack/tools.sh build kube-router                       the NetworkPolicy firewall of the kind tests
#   hack/tools.sh build etcd-tools                        etcdctl and etcdutl (the backup image)
#   hack/tools.sh build seaweedfs                         weed, the S3 store of the S3 backup test
#   hack/tools.sh env                                     print export lines
#
# Environment: KCP_SHARD_CACHE (default ~/.cache/kcp-shard-operator) holds the
# sources and, unless KCP_SHARD_TOOLS_DIR names another directory, the binaries
# (CI points KCP_SHARD_TOOLS_DIR at an empty directory, so that a target that
# forgets to build a tool it uses fails there).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" tools

TOOLS_DIR="${KCP_SHARD_TOOLS_DIR:-${CACHE_DIR}/tools}"
SRC_DIR="${CACHE_DIR}/src"
export CGO_ENABLED=0
export GOFLAGS=-mod=mod
export GOTOOLCHAIN=local

K8S_DIR="${TOOLS_DIR}/kubernetes-${KUBERNETES_VERSION}"
ETCD_DIR="${TOOLS_DIR}/etcd-${ETCD_VERSION}"
ETCD_TOOLS_DIR="${TOOLS_DIR}/etcd-tools-${ETCD_VERSION}"
KWOK_DIR="${TOOLS_DIR}/kwok-${KWOK_VERSION}"
HELM_DIR="${TOOLS_DIR}/helm-${HELM_VERSION}"
KCP_DIR="${TOOLS_DIR}/kcp-${KCP_VERSION}"
KCP_UPGRADE_DIR="${TOOLS_DIR}/kcp-${KCP_UPGRADE_VERSION}"
KCP_PATCH_DIR="${TOOLS_DIR}/kcp-${KCP_PATCH_VERSION}"
KCP_NEXT_DIR="${TOOLS_DIR}/kcp-${KCP_NEXT_VERSION}"
KIND_DIR="${TOOLS_DIR}/kind-${KIND_VERSION}"
K8S_NODE_DIR="${TOOLS_DIR}/kubernetes-node-${KUBERNETES_VERSION}"
CRICTL_DIR="${TOOLS_DIR}/crictl-${CRICTL_VERSION}"
COREDNS_DIR="${TOOLS_DIR}/coredns-${COREDNS_VERSION}"
LOCAL_PATH_DIR="${TOOLS_DIR}/local-path-provisioner-${LOCAL_PATH_PROVISIONER_VERSION}"
KUBE_ROUTER_DIR="${TOOLS_DIR}/kube-router-${KUBE_ROUTER_VERSION}"
SEAWEEDFS_DIR="${TOOLS_DIR}/seaweedfs-${SEAWEEDFS_VERSION}"

k8s_ldflags() {
  local v="$1" minor
  minor="$(echo "${v}" | cut -d. -f2)"
  local flags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
    flags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  echo "${flags}"
}

# The wrapper module that builds commands of k8s.io/kubernetes; prints its directory.
kubernetes_module() {
  local v="${KUBERNETES_VERSION}" staging_version mod_file work
  staging_version="v0.${v#v1.}"
  work="${SRC_DIR}/kubernetes-${v}"
  mkdir -p "${work}"
  mod_file="$(go mod download -json "k8s.io/kubernetes@${v}" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  {
    echo "module kcp-shard-operator/tools/kubernetes"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes ${v}"
    echo
    # kubernetes requires its staging modules at v0.0.0; pin each to its tag.
    grep -E '^\s+k8s\.io/[a-z0-9-]+ v0\.0\.0$' "${mod_file}" | awk -v sv="${staging_version}" \
      '{ printf "replace %s => %s %s\n", $1, $1, sv }'
  } >"${work}/go.mod"
  echo "${work}"
}

build_kubernetes() {
  local work
  work="$(kubernetes_module)"
  mkdir -p "${K8S_DIR}"
  (cd "${work}" && go build -trimpath -ldflags "$(k8s_ldflags "${KUBERNETES_VERSION}")" -o "${K8S_DIR}/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl)
}

build_kubernetes_node() {
  local work
  work="$(kubernetes_module)"
  mkdir -p "${K8S_NODE_DIR}"
  (cd "${work}" && go build -trimpath -ldflags "$(k8s_ldflags "${KUBERNETES_VERSION}")" -o "${K8S_NODE_DIR}/" \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubeadm \
    k8s.io/kubernetes/cmd/kube-proxy)
}

# go install of a module's command at a version into a directory.
go_install() {
  local dir="$1"
  shift
  mkdir -p "${dir}"
  GOFLAGS= GOBIN="${dir}" go install -trimpath -ldflags "-s -w" "$@"
}

build_kind() { go_install "${KIND_DIR}" "sigs.k8s.io/kind@${KIND_VERSION}"; }
build_crictl() { go_install "${CRICTL_DIR}" "sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}"; }
build_coredns() { go_install "${COREDNS_DIR}" "github.com/coredns/coredns@${COREDNS_VERSION}"; }
build_kube_router() {
  CGO_ENABLED=0 go_install "${KUBE_ROUTER_DIR}" "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@${KUBE_ROUTER_VERSION}"
}
build_local_path_provisioner() {
  go_install "${LOCAL_PATH_DIR}" "github.com/rancher/local-path-provisioner@${LOCAL_PATH_PROVISIONER_VERSION}"
}

build_etcd() {
  local work="${SRC_DIR}/etcd-${ETCD_VERSION}"
  mkdir -p "${work}" "${ETCD_DIR}"
  printf 'module kcp-shard-operator/tools/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
    "${ETCD_VERSION}" >"${work}/go.mod"
  (cd "${work}" && go build -trimpath -ldflags "-s -w" -o "${ETCD_DIR}/etcd" go.etcd.io/etcd/server/v3)
}

# etcdctl (snapshot save from a running etcd) and etcdutl (snapshot status and restore) of the
# etcd release the project pins, each from its own Go module.
build_etcd_tools() {
  local work="${SRC_DIR}/etcd-tools-${ETCD_VERSION}"
  mkdir -p "${work}" "${ETCD_TOOLS_DIR}"
  printf 'module kcp-shard-operator/tools/etcd-tools\n\ngo 1.24\n\nrequire (\n\tgo.etcd.io/etcd/etcdctl/v3 %s\n\tgo.etcd.io/etcd/etcdutl/v3 %s\n)\n' \
    "${ETCD_VERSION}" "${ETCD_VERSION}" >"${work}/go.mod"
  (cd "${work}" &&
    go build -trimpath -ldflags "-s -w" -o "${ETCD_TOOLS_DIR}/etcdctl" go.etcd.io/etcd/etcdctl/v3 &&
    go build -trimpath -ldflags "-s -w" -o "${ETCD_TOOLS_DIR}/etcdutl" go.etcd.io/etcd/etcdutl/v3)
}

# weed from a writable copy of its module: go install refuses a module with replace
# directives, and a build inside the module cache cannot write its go.sum.
build_seaweedfs() {
  local module="github.com/seaweedfs/seaweedfs" work="${SRC_DIR}/seaweedfs-${SEAWEEDFS_VERSION}" dir
  dir="$(GOFLAGS= go mod download -json "${module}@${SEAWEEDFS_VERSION}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  rm -rf "${work}"
  mkdir -p "${SRC_DIR}" "${SEAWEEDFS_DIR}"
  cp -r "${dir}" "${work}"
  chmod -R u+w "${work}"
  (cd "${work}" && go build -trimpath -ldflags "-s -w" -o "${SEAWEEDFS_DIR}/weed" ./weed)
}

build_kwok() {
  mkdir -p "${KWOK_DIR}"
  GOFLAGS= GOBIN="${KWOK_DIR}" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}" \
    "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" "sigs.k8s.io/kwok/cmd/kwokctl@${KWOK_VERSION}"
}

build_helm() {
  mkdir -p "${HELM_DIR}"
  GOFLAGS= GOBIN="${HELM_DIR}" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
}

build_kcp() {
  "${HACK_DIR}/kcp-build.sh" "${KCP_VERSION}" "${KCP_DIR}" "${SRC_DIR}/kcp-${KCP_VERSION}"
}

build_kcp_upgrade() {
  KCP_STANDIN=0 "${HACK_DIR}/kcp-build.sh" "${KCP_UPGRADE_VERSION}" "${KCP_UPGRADE_DIR}" \
    "${SRC_DIR}/kcp-${KCP_UPGRADE_VERSION}"
}

build_kcp_patch() {
  KCP_STANDIN=0 "${HACK_DIR}/kcp-build.sh" "${KCP_PATCH_VERSION}" "${KCP_PATCH_DIR}" \
    "${SRC_DIR}/kcp-${KCP_PATCH_VERSION}"
}

build_kcp_next() {
  KCP_STANDIN=0 KCP_MODULES="${KCP_NEXT_MODULES}" "${HACK_DIR}/kcp-build.sh" "${KCP_NEXT_VERSION}" \
    "${KCP_NEXT_DIR}" "${SRC_DIR}/kcp-${KCP_NEXT_VERSION}"
}

# Add `virtual-workspaces` to a kcp directory built before it was part of the build, in
# place and under the directory's lock: the binaries other worktrees run from it stay.
#   add_virtual_workspaces NAME DIR BUILD_FUNCTION
add_virtual_workspaces() {
  local name="$1" dir="$2" fn="$3" lock_fd
  [[ -x "${dir}/virtual-workspaces" ]] && return
  exec {lock_fd}>"${dir}.lock"
  flock "${lock_fd}"
  if [[ ! -x "${dir}/virtual-workspaces" ]]; then
    KCP_ONLY=virtual-workspaces timed "${name}: virtual-workspaces" "${fn}"
  fi
  exec {lock_fd}>&-
}

# Build a tool once: concurrent runs wait on a per-tool lock, and a directory
# counts as built only when its stamp exists (written after a finished build).
ensure() {
  local name="$1" marker="$2" fn="$3" dir stamp lock_fd
  dir="$(dirname "${marker}")"
  stamp="${dir}/.complete"
  if [[ -f "${stamp}" && -x "${marker}" ]]; then
    log "${name}: cached at ${dir}"
    return
  fi
  mkdir -p "${TOOLS_DIR}"
  exec {lock_fd}>"${dir}.lock"
  if ! flock -n "${lock_fd}"; then
    log "${name}: another build of it is running; waiting for it"
    flock "${lock_fd}"
  fi
  if [[ -f "${stamp}" && -x "${marker}" ]]; then
    log "${name}: built meanwhile at ${dir}"
  else
    rm -rf "${dir}"
    timed "${name}" "${fn}"
    [[ -x "${marker}" ]] || { log "${name}: the build left no ${marker}"; exit 1; }
    touch "${stamp}"
  fi
  exec {lock_fd}>&-
}

cmd_build() {
  local wanted=("$@")
  [[ ${#wanted[@]} -gt 0 ]] || wanted=(kubernetes etcd kwok helm)
  command -v go >/dev/null || { log "go is required (Go 1.26)"; exit 1; }
  local total_start=${SECONDS}
  for tool in "${wanted[@]}"; do
    case "${tool}" in
      kubernetes) ensure "kubernetes ${KUBERNETES_VERSION}" "${K8S_DIR}/kubectl" build_kubernetes ;;
      etcd) ensure "etcd ${ETCD_VERSION}" "${ETCD_DIR}/etcd" build_etcd ;;
      etcd-tools) ensure "etcdctl and etcdutl ${ETCD_VERSION}" "${ETCD_TOOLS_DIR}/etcdutl" build_etcd_tools ;;
      kwok) ensure "kwok ${KWOK_VERSION}" "${KWOK_DIR}/kwokctl" build_kwok ;;
      helm) ensure "helm ${HELM_VERSION}" "${HELM_DIR}/helm" build_helm ;;
      kcp)
        ensure "kcp ${KCP_VERSION}" "${KCP_DIR}/kcp-front-proxy" build_kcp
        add_virtual_workspaces "kcp ${KCP_VERSION}" "${KCP_DIR}" build_kcp
        ;;
      kcp-upgrade)
        ensure "kcp ${KCP_UPGRADE_VERSION}" "${KCP_UPGRADE_DIR}/kcp-front-proxy" build_kcp_upgrade
        add_virtual_workspaces "kcp ${KCP_UPGRADE_VERSION}" "${KCP_UPGRADE_DIR}" build_kcp_upgrade
        ;;
      kcp-patch)
        ensure "kcp ${KCP_PATCH_VERSION}" "${KCP_PATCH_DIR}/kcp-front-proxy" build_kcp_patch
        add_virtual_workspaces "kcp ${KCP_PATCH_VERSION}" "${KCP_PATCH_DIR}" build_kcp_patch
        ;;
      kcp-next)
        ensure "kcp ${KCP_NEXT_VERSION}" "${KCP_NEXT_DIR}/kcp-front-proxy" build_kcp_next
        add_virtual_workspaces "kcp ${KCP_NEXT_VERSION}" "${KCP_NEXT_DIR}" build_kcp_next
        ;;
      kind) ensure "kind ${KIND_VERSION}" "${KIND_DIR}/kind" build_kind ;;
      kubernetes-node)
        ensure "kubelet, kubeadm, kube-proxy ${KUBERNETES_VERSION}" "${K8S_NODE_DIR}/kube-proxy" build_kubernetes_node
        ;;
      crictl) ensure "crictl ${CRICTL_VERSION}" "${CRICTL_DIR}/crictl" build_crictl ;;
      coredns) ensure "coredns ${COREDNS_VERSION}" "${COREDNS_DIR}/coredns" build_coredns ;;
      seaweedfs) ensure "seaweedfs ${SEAWEEDFS_VERSION}" "${SEAWEEDFS_DIR}/weed" build_seaweedfs ;;
      kube-router) ensure "kube-router ${KUBE_ROUTER_VERSION}" "${KUBE_ROUTER_DIR}/kube-router" build_kube_router ;;
      local-path-provisioner)
        ensure "local-path-provisioner ${LOCAL_PATH_PROVISIONER_VERSION}" \
          "${LOCAL_PATH_DIR}/local-path-provisioner" build_local_path_provisioner
        ;;
      *) log "unknown tool: ${tool}"; exit 2 ;;
    esac
  done
  log "tools ready in $((SECONDS - total_start))s"
}

cmd_env() {
  echo "export PATH=\"${K8S_DIR}:${ETCD_DIR}:${KWOK_DIR}:${HELM_DIR}:\${PATH}\""
  echo "export KWOK_KUBE_VERSION=${KUBERNETES_VERSION}"
  echo "export KWOK_KUBE_APISERVER_BINARY=${K8S_DIR}/kube-apiserver"
  echo "export KWOK_KUBE_CONTROLLER_MANAGER_BINARY=${K8S_DIR}/kube-controller-manager"
  echo "export KWOK_KUBE_SCHEDULER_BINARY=${K8S_DIR}/kube-scheduler"
  echo "export KWOK_KUBECTL_BINARY=${K8S_DIR}/kubectl"
  echo "export KWOK_ETCD_BINARY=${ETCD_DIR}/etcd"
  echo "export KWOK_CONTROLLER_BINARY=${KWOK_DIR}/kwok"
  echo "export KCP_SHARD_TOOLS_DIR=${TOOLS_DIR}"
  echo "export KCP_BINARY=${KCP_DIR}/kcp"
  echo "export KCP_UPGRADE_BINARY=${KCP_UPGRADE_DIR}/kcp"
  echo "export KCP_PATCH_BINARY=${KCP_PATCH_DIR}/kcp"
  echo "export KCP_NEXT_BINARY=${KCP_NEXT_DIR}/kcp"
  echo "export KIND_BINARY=${KIND_DIR}/kind"
  echo "export KUBERNETES_DIR=${K8S_DIR} KUBERNETES_NODE_DIR=${K8S_NODE_DIR} ETCD_BINARY=${ETCD_DIR}/etcd"
  echo "export CRICTL_BINARY=${CRICTL_DIR}/crictl COREDNS_BINARY=${COREDNS_DIR}/coredns"
  echo "export LOCAL_PATH_PROVISIONER_BINARY=${LOCAL_PATH_DIR}/local-path-provisioner"
  echo "export KUBE_ROUTER_BINARY=${KUBE_ROUTER_DIR}/kube-router"
  echo "export WEED_BINARY=${SEAWEEDFS_DIR}/weed"
  echo "export ETCDCTL_BINARY=${ETCD_TOOLS_DIR}/etcdctl ETCDUTL_BINARY=${ETCD_TOOLS_DIR}/etcdutl"
}

case "${1:-build}" in
  build) shift || true; cmd_build "$@" ;;
  env) cmd_env ;;
  *) echo "usage: $0 build [tool...] | env" >&2; exit 2 ;;
esac
