#!/usr/bin/env bash
# The README's main job: a local cluster, the operator installed with its Helm
# chart, the operator process running with the chart's ServiceAccount token,
# the samples applied (a CacheServer, a root Shard, shard-1 and a FrontProxy) and shown Ready.
#
#   hack/demo.sh up     (make demo)
#   hack/demo.sh down   stop the operator process and delete the cluster
#
# kwok pods run no containers, so the chart's operator Deployment is scheduled
# but never executes; the same code runs here as a local process instead, with
# exactly the RBAC the chart grants, and without asking kcp (--no-kcp-checks: no kcp
# runs in kwok's pods). CLUSTER=kind runs everything as real pods.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" demo

STATE_DIR="${REPO_DIR}/.cluster"
export CLUSTER_KUBECONFIG="${CLUSTER_KUBECONFIG:-${STATE_DIR}/kubeconfig}"
export KUBECONFIG="${CLUSTER_KUBECONFIG}"
RELEASE="kcp-shard-operator"
OPERATOR_NS="kcp-shard-operator"
SAMPLES_NS="kcp-samples"
PID_FILE="${STATE_DIR}/operator.pid"
OPERATOR_LOG="${STATE_DIR}/operator.log"
OPERATOR_KUBECONFIG="${STATE_DIR}/operator-kubeconfig"

stop_operator() {
  if [[ -f "${PID_FILE}" ]]; then
    kill "$(cat "${PID_FILE}")" 2>/dev/null || true
    rm -f "${PID_FILE}"
  fi
}

write_operator_kubeconfig() {
  local token server ca
  token="$(kubectl -n "${OPERATOR_NS}" create token "${RELEASE}" --duration=24h)"
  server="$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')"
  ca="$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
  umask 077
  cat >"${OPERATOR_KUBECONFIG}" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: demo
    cluster: {server: "${server}", certificate-authority-data: "${ca}"}
users:
  - name: ${RELEASE}
    user: {token: "${token}"}
contexts:
  - name: demo
    context: {cluster: demo, user: ${RELEASE}, namespace: ${OPERATOR_NS}}
current-context: demo
KUBECONFIG
}

KINDS="cacheservers,shards,frontproxies"

# Until every object of the samples' kinds in namespace $1 has a status.observedGeneration
# (the operator's first pass writes it): one without it after $2 seconds is in a namespace
# no operator serves.
wait_served() {
  local ns="$1" deadline=$((SECONDS + $2)) unserved
  while :; do
    unserved="$(kubectl -n "${ns}" get "${KINDS}" --no-headers \
      -o custom-columns=KIND:.kind,NAME:.metadata.name,OBSERVED:.status.observedGeneration |
      awk '$3 == "<none>" { printf "%s %s, ", $1, $2 }')"
    [[ -z "${unserved}" ]] && return
    ((SECONDS < deadline)) ||
      die "${unserved}in namespace ${ns} have no status after $2s: no operator serves ${ns}; add it to the chart's watchNamespaces (or set clusterWide=true)"
    sleep 2
  done
}

# Until every CacheServer, Shard and FrontProxy of namespace $1 is Ready (at most $2 s).
wait_ready() {
  kubectl -n "$1" wait "${KINDS}" --all --for=jsonpath='{.status.phase}'=Ready --timeout="$2s"
}

# CLUSTER=kind: real pods. The images are built and loaded, the operator runs in-cluster
# from its image, and the samples are applied as they are: the operator issues every
# certificate and kubeconfig, kind's local-path provisioner backs the claims, and the kcp
# image the Shards default to is the local build of that release (hack/image.sh kcp).
# The chart watches the samples' namespace only (watchNamespaces: a Role there, as
# docs/installation.md installs it onto kind), so the namespace exists before the chart.
up_kind() {
  local start=${SECONDS} ns="${SAMPLES_NS}"
  log "building the operator and kcp images and loading them into the kind cluster"
  make -C "${REPO_DIR}" --no-print-directory image
  kubectl apply -f "${REPO_DIR}/manifests/samples/00-namespace.yaml"
  log "installing the chart, watching namespace ${ns}"
  helm upgrade --install "${RELEASE}" "${REPO_DIR}/charts/kcp-shard-operator" \
    --namespace "${OPERATOR_NS}" --create-namespace --wait --timeout 300s --set image.pullPolicy=Never \
    --set-json "watchNamespaces=[\"${ns}\"]"
  kubectl -n "${OPERATOR_NS}" rollout restart "deployment/${RELEASE}"
  kubectl -n "${OPERATOR_NS}" rollout status "deployment/${RELEASE}" --timeout=180s
  log "applying manifests/samples/ (a cache server, a root Shard, shard-1 and a front-proxy, nothing else)"
  kubectl apply -f "${REPO_DIR}/manifests/samples/"
  wait_served "${ns}" 60
  log "waiting for all of them to be Ready (real kcp pods, verified by the operator)"
  wait_ready "${ns}" 900
  kubectl -n "${ns}" get "${KINDS},deployments,pods,secrets"
  log "demo ready in $((SECONDS - start))s; the operator runs in namespace ${OPERATOR_NS}"
  echo "export KUBECONFIG=${KUBECONFIG}"
  echo "kcp through its front-proxy: kubectl -n ${ns} port-forward svc/kcp-front-proxy 6443 &"
  echo "  .venv/bin/kcp-shard-operator kubeconfig kcp --front-proxy -n ${ns} --server https://localhost:6443 -o kcp.kubeconfig"
}

up() {
  local start=${SECONDS}
  make -C "${REPO_DIR}" --no-print-directory install
  "${HACK_DIR}/cluster.sh" up
  "${HACK_DIR}/tools.sh" build helm
  load_tools
  if [[ "${CLUSTER:-kwok}" == kind ]]; then
    up_kind
    return
  fi
  log "installing the chart (CRD, RBAC, operator Deployment)"
  helm upgrade --install "${RELEASE}" "${REPO_DIR}/charts/kcp-shard-operator" \
    --namespace "${OPERATOR_NS}" --create-namespace --set clusterWide=true --wait --timeout 180s
  log "starting the operator locally with the chart's ServiceAccount token (log: ${OPERATOR_LOG})"
  stop_operator
  write_operator_kubeconfig
  KUBECONFIG="${OPERATOR_KUBECONFIG}" nohup "${REPO_DIR}/.venv/bin/kcp-shard-operator" run \
    --all-namespaces --standalone --liveness-port "${DEMO_LIVENESS_PORT:-18080}" \
    --metrics-port "${DEMO_METRICS_PORT:-18090}" --no-kcp-checks \
    >"${OPERATOR_LOG}" 2>&1 &
  echo $! >"${PID_FILE}"
  log "applying manifests/samples/"
  kubectl apply -f "${REPO_DIR}/manifests/samples/"
  log "waiting for every sample to be Ready"
  wait_ready "${SAMPLES_NS}" 180
  kubectl -n "${SAMPLES_NS}" get "${KINDS},deployments"
  log "demo ready in $((SECONDS - start))s; operator pid $(cat "${PID_FILE}")"
  echo "export KUBECONFIG=${KUBECONFIG}"
}

down() {
  stop_operator
  "${HACK_DIR}/cluster.sh" down
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
