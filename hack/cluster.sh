#!/usr/bin/env bash
# A local Kubernetes cluster for development, the demo and the e2e tests.
#
#   hack/cluster.sh up | down | status
#
# CLUSTER=kwok (default): kwokctl with the binary runtime and the binaries that
# hack/tools.sh builds (real etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler; fake nodes and pods by kwok), bound to 127.0.0.1, RBAC on, and a
# default StorageClass (the controller-manager's hostPath provisioner).
# CLUSTER=kind: a kind cluster with real kubelets (hack/kind.sh: needs root and a Docker
# engine, which it installs and starts on Debian; builds kind and its images offline).
#
# Environment:
#   CLUSTER_NAME        cluster name (default kcp-shard-operator)
#   CLUSTER_NODES       number of fake kwok nodes (default 3)
#   CLUSTER_KUBECONFIG  kubeconfig to write (default <repo>/.cluster/kubeconfig);
#                       ~/.kube/config is never touched
#   KCP_SHARD_CACHE     cache root (default ~/.cache/kcp-shard-operator)
#   KWOK_LOG_LEVEL      kwokctl log level (default WARN; INFO or DEBUG to see more)
#   CLUSTER_WAIT_TIMEOUT  how long kwokctl/kind/kubectl wait for readiness (default 180s)
#   CLUSTER_AUDIT_POLICY  kwok only: audit policy file; the API server then writes
#                       ${KWOK_WORKDIR}/clusters/<name>/logs/audit.log (the benchmarks count
#                       the operator's requests there)
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" cluster

CLUSTER="${CLUSTER:-kwok}"
CLUSTER_NAME="${CLUSTER_NAME:-kcp-shard-operator}"
CLUSTER_NODES="${CLUSTER_NODES:-3}"
CLUSTER_KUBECONFIG="${CLUSTER_KUBECONFIG:-${REPO_DIR}/.cluster/kubeconfig}"
export KWOK_WORKDIR="${CACHE_DIR}/kwok"
WAIT_TIMEOUT="${CLUSTER_WAIT_TIMEOUT:-180s}"

[[ "$(realpath -m "${CLUSTER_KUBECONFIG}")" != "$(realpath -m "${HOME}/.kube/config")" ]] ||
  die "refusing to write ${CLUSTER_KUBECONFIG}: pick a kubeconfig of its own"

kubectl_c() { kubectl --kubeconfig "${CLUSTER_KUBECONFIG}" "$@"; }

# Six ports for a new cluster's components, from 32766 down as kwokctl picks them, that no
# kwok.yaml in the workdir names and no socket uses. kwokctl would pick free ones itself, but it
# sees neither the ports of the clusters being created beside it nor those of a stopped
# component (the binary runtime records no host ports): a cluster created while the e2e tests
# have stopped another's API server would take its port. Run under the creation lock of kwok_up.
kwok_free_ports() {
  local wanted=6 port=32767 taken
  # No cluster yet (the glob matches nothing) is no port taken, not a failed pipeline: under
  # pipefail the failing cat would end this function with no port at all.
  taken=" $({ cat "${KWOK_WORKDIR}"/clusters/*/kwok.yaml 2>/dev/null || true; } |
    sed -n 's/^ *[A-Za-z]*[Pp]ort: \([0-9][0-9]*\)$/\1/p' | tr '\n' ' ') "
  taken+=" $(ss -Htan | awk '{ sub(/.*:/, "", $4); print $4 }' | tr '\n' ' ') "
  while ((wanted > 0 && port > 10000)); do
    port=$((port - 1))
    [[ "${taken}" == *" ${port} "* ]] && continue
    echo "${port}"
    wanted=$((wanted - 1))
  done
}

# KwokctlConfiguration FILE PORT...: the options that have no command-line flag, and the
# components' ports (kwok_free_ports).
write_kwokctl_config() {
  local ports=("${@:2}")
  cat >"$1" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  kubeVersion: ${KUBERNETES_VERSION}
  etcdVersion: ${ETCD_VERSION#v}
  securePort: true
  kubeAuthorization: true
  kubeAdmission: true
  kubeApiserverBinary: ${KWOK_KUBE_APISERVER_BINARY}
  kubeControllerManagerBinary: ${KWOK_KUBE_CONTROLLER_MANAGER_BINARY}
  kubeSchedulerBinary: ${KWOK_KUBE_SCHEDULER_BINARY}
  kubectlBinary: ${KWOK_KUBECTL_BINARY}
  etcdBinary: ${KWOK_ETCD_BINARY}
  kwokControllerBinary: ${KWOK_CONTROLLER_BINARY}
  kubeAuditPolicy: "${CLUSTER_AUDIT_POLICY:-}"
  etcdPeerPort: ${ports[0]}
  etcdPort: ${ports[1]}
  kubeApiserverPort: ${ports[2]}
  kubeControllerManagerPort: ${ports[3]}
  kubeSchedulerPort: ${ports[4]}
  kwokControllerPort: ${ports[5]}
componentsPatches:
# The API server's default Service range is a /24: about 250 Services, fewer than the
# Shards a benchmark creates.
- name: kube-apiserver
  extraArgs:
  - key: service-cluster-ip-range
    value: 10.96.0.0/16
# Claims of shards on embedded etcd need a provisioner: the controller-manager's own
# hostPath one creates their volumes under /tmp/hostpath_pv on this machine (kwok runs no
# container, so nothing mounts them) and deletes them with their claims.
- name: kube-controller-manager
  extraArgs:
  - key: enable-hostpath-provisioner
    value: "true"
EOF
}

# The default StorageClass, served by the hostPath provisioner of kube-controller-manager.
kwok_storage_class() {
  log "creating the default StorageClass standard (kubernetes.io/host-path)"
  kubectl_c apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
EOF
}

wait_apiserver() {
  log "waiting for the API server to be healthy"
  local deadline=$((SECONDS + 120))
  until kubectl_c get --raw /readyz >/dev/null 2>&1; do
    ((SECONDS < deadline)) ||
      die "API server not ready after 120s (kubeconfig ${CLUSTER_KUBECONFIG}); try: $0 down && $0 up"
    sleep 1
  done
}

wait_nodes() {
  log "waiting for ${CLUSTER_NODES} node(s) to be Ready"
  local deadline=$((SECONDS + 120))
  until [[ "$(kubectl_c get nodes --no-headers 2>/dev/null | wc -l)" -ge "${CLUSTER_NODES}" ]]; do
    ((SECONDS < deadline)) || die "fewer than ${CLUSTER_NODES} nodes registered after 120s"
    sleep 1
  done
  kubectl_c wait --for=condition=Ready nodes --all --timeout="${WAIT_TIMEOUT}" >/dev/null
  log "waiting for the default ServiceAccount (controller-manager is running)"
  until kubectl_c get serviceaccount default -n default >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "no default ServiceAccount after 120s: kube-controller-manager down?"
    sleep 1
  done
}

# kwokctl for this cluster; its INFO lines repeat what this script logs.
kw() { kwokctl -v "${KWOK_LOG_LEVEL:-WARN}" --name "${CLUSTER_NAME}" "$@"; }

kwok_exists() {
  kwokctl get clusters 2>/dev/null | grep -x "${CLUSTER_NAME}" >/dev/null # no -q: see kind.sh
}

kwok_up() {
  load_tools
  "${HACK_DIR}/tools.sh" build kubernetes etcd kwok
  if kwok_exists; then
    log "kwok cluster ${CLUSTER_NAME} exists; starting any stopped component"
    kw start cluster
  else
    local config lock_fd ports
    # One creation at a time (the e2e tests' xdist workers each create one): the ports
    # kwok_free_ports picks are taken once the cluster is up.
    mkdir -p "${KWOK_WORKDIR}"
    exec {lock_fd}>"${KWOK_WORKDIR}/create.lock"
    if ! flock -n "${lock_fd}"; then
      log "another kwok cluster is being created; waiting for it"
      flock -w 600 "${lock_fd}" || die "${KWOK_WORKDIR}/create.lock still held after 600s"
    fi
    mapfile -t ports < <(kwok_free_ports)
    ((${#ports[@]} == 6)) || die "no 6 free ports below 32767 for the components of ${CLUSTER_NAME}"
    config="$(mktemp --suffix .kwokctl.yaml)"
    write_kwokctl_config "${config}" "${ports[@]}"
    log "creating kwok cluster ${CLUSTER_NAME} (binary runtime, Kubernetes ${KUBERNETES_VERSION}, workdir ${KWOK_WORKDIR})"
    # An empty --kubeconfig keeps kwokctl from editing any kubeconfig (default ~/.kube/config).
    # The components it starts outlive it: they must not inherit the lock.
    kw --config "${config}" create cluster \
      --kubeconfig "" --wait "${WAIT_TIMEOUT}" {lock_fd}>&-
    exec {lock_fd}>&-
    rm -f "${config}"
  fi
  mkdir -p "$(dirname "${CLUSTER_KUBECONFIG}")"
  (umask 077 && kw get kubeconfig >"${CLUSTER_KUBECONFIG}")
  wait_apiserver
  log "scaling to ${CLUSTER_NODES} fake node(s)"
  kw scale node --replicas "${CLUSTER_NODES}"
  wait_nodes
  kwok_storage_class
}

kwok_down() {
  load_tools
  if kwok_exists; then
    log "deleting kwok cluster ${CLUSTER_NAME}"
    kw delete cluster --kubeconfig "${CLUSTER_KUBECONFIG}"
  else
    log "no kwok cluster ${CLUSTER_NAME}"
  fi
  rm -f "${CLUSTER_KUBECONFIG}"
}

# kind: hack/kind.sh checks the host (root, disk, Docker engine; exit 2 with one line),
# builds the node image without registry access when missing, and creates the cluster.
kind_up() {
  "${HACK_DIR}/tools.sh" build kubernetes
  load_tools
  "${HACK_DIR}/kind.sh" up "${CLUSTER_NAME}" "${CLUSTER_KUBECONFIG}"
  wait_apiserver
  CLUSTER_NODES=1 wait_nodes
}

kind_down() {
  "${HACK_DIR}/kind.sh" down "${CLUSTER_NAME}" "${CLUSTER_KUBECONFIG}"
}

cmd_up() {
  local start=${SECONDS}
  case "${CLUSTER}" in
    kwok) kwok_up ;;
    kind) kind_up ;;
    *) die "unknown CLUSTER=${CLUSTER} (kwok or kind)" ;;
  esac
  log "cluster ${CLUSTER_NAME} is up in $((SECONDS - start))s; server version $(
    kubectl_c version -o json | sed -n '/serverVersion/,/}/s/.*"gitVersion": "\(.*\)".*/\1/p'
  )"
  echo "export KUBECONFIG=${CLUSTER_KUBECONFIG}"
}

cmd_down() {
  case "${CLUSTER}" in
    kwok) kwok_down ;;
    kind) kind_down ;;
    *) die "unknown CLUSTER=${CLUSTER} (kwok or kind)" ;;
  esac
}

# Each component of the binary runtime by its pid file: kwokctl lists a component that has
# exited (the controller-manager and scheduler exit when they lose their leader election, as
# after a paused API server) as long as its pid file is there.
kwok_processes() {
  local pids="${KWOK_WORKDIR}/clusters/${CLUSTER_NAME}/pids" file name pid exited=()
  compgen -G "${pids}/*.pid" >/dev/null || die "no component of ${CLUSTER_NAME} has a pid file in ${pids}; start it with: $0 up"
  for file in "${pids}"/*.pid; do
    name="$(basename "${file}" .pid)"
    pid="$(<"${file}")"
    if [[ "${pid}" =~ ^[0-9]+$ ]] && { tr '\0' ' ' <"/proc/${pid}/cmdline"; } 2>/dev/null | grep -q -- "${name}" &&
      [[ "$(awk '{print $3}' "/proc/${pid}/stat" 2>/dev/null)" != Z ]]; then
      printf '%-26s running (pid %s)\n' "${name}" "${pid}"
    else
      printf '%-26s exited (pid %s)\n' "${name}" "${pid}"
      exited+=("${name}")
    fi
  done
  ((${#exited[@]} == 0)) ||
    die "${exited[*]} of ${CLUSTER_NAME} exited (log: ${KWOK_WORKDIR}/clusters/${CLUSTER_NAME}/logs/); start it again with: $0 up"
}

cmd_status() {
  load_tools
  if [[ "${CLUSTER}" == kwok ]]; then
    kwok_exists || die "no kwok cluster ${CLUSTER_NAME}"
    kwok_processes
  fi
  [[ -f "${CLUSTER_KUBECONFIG}" ]] || die "no kubeconfig at ${CLUSTER_KUBECONFIG}"
  kubectl_c version
  kubectl_c get --raw '/readyz?verbose' | tail -n 1
  kubectl_c get nodes
  echo "export KUBECONFIG=${CLUSTER_KUBECONFIG}"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 up | down | status" >&2
    exit 2
    ;;
esac
