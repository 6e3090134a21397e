#!/usr/bin/env bash
# The kind base and node images, built without a container registry: a Debian rootfs
# from debootstrap (containerd, runc and CNI plugins are Debian's), kind's base files from
# its Go module, and every image the node pre-loads (pause, etcd, coredns, control plane,
# kube-proxy, local-path-provisioner and its helper) from binaries hack/tools.sh builds and
# Debian's packages. Replaces `kind build node-image`, which fetches pause, etcd, coredns,
# kindnetd and local-path images from registries.
#
#   hack/kind/images.sh node     build what is missing; print the node image's name
#   hack/kind/images.sh keys     print the cache keys of the base and the node image
#
# Called by hack/kind.sh after its host checks (root, disk, a running Docker engine).
# Images are tagged kcp-shard-operator-kind/{base,node}:<version>-<key>, where each key
# hashes the versions and the functions that build the image, the entrypoint patch and
# whether the host needs it (KIND_UNPRIVILEGED=1): a change rebuilds them, nothing else does.
# kindnetd is not served by the Go module proxy: the node has a single-node bridge CNI
# instead (the cluster config sets networking.disableDefaultCNI). The default StorageClass
# `standard` is kind's own manifest (local-path-provisioner, volumes under
# /var/local-path-provisioner on the node, deleted with their claim) pointed at the local
# images: the provisioner built from its Go module, the helper pod's sh, mkdir and rm from
# Debian's busybox-static.
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh" kind-images

KIND_HACK="${HACK_DIR}/kind"
WORK_ROOT="${CACHE_DIR}/kind"
PREFIX=kcp-shard-operator-kind
UNPRIVILEGED="${KIND_UNPRIVILEGED:-0}"
export DOCKER_BUILDKIT=0 GOTOOLCHAIN=local
ETCD_IMAGE_TAG="${ETCD_VERSION#v}-0"
# kubeadm pulls pause 3.10.1, kind's containerd config sandboxes with 3.10.
PAUSE_TAGS=(3.10.1 3.10)
# systemd and the node's runtime, plus what kind's base image installs (jq, pigz, curl...).
BASE_PACKAGES=systemd,systemd-sysv,dbus,iptables,iproute2,mount,ca-certificates,containerd,runc
BASE_PACKAGES+=,containernetworking-plugins,procps,kmod,libseccomp2,conntrack,ethtool,socat
BASE_PACKAGES+=,util-linux,nftables,bash,ebtables,libpam-systemd,jq,pigz,curl,e2fsprogs
# The static busybox of local-path-provisioner's helper image (copied out of the rootfs).
BASE_PACKAGES+=,busybox-static
STORAGE_PROVISIONER_IMAGE="${PREFIX}/local-path-provisioner:${LOCAL_PATH_PROVISIONER_VERSION}"
STORAGE_HELPER_IMAGE="${PREFIX}/local-path-helper:busybox-${DEBIAN_SUITE}"

# Cache keys: the versions and the code (function bodies) each image is built from.
base_key() {
  {
    echo "${KIND_VERSION} ${CRICTL_VERSION} ${DEBIAN_SUITE} ${UNPRIVILEGED} ${BASE_PACKAGES}"
    declare -f debootstrap_rootfs make_base_rootfs base_image
    cat "${KIND_HACK}/patch-entrypoint.py"
  } | sha256sum | cut -c1-10
}

node_key() {
  {
    echo "$(base_key) ${KUBERNETES_VERSION} ${ETCD_VERSION} ${COREDNS_VERSION} ${PAUSE_TAGS[*]}"
    echo "${LOCAL_PATH_PROVISIONER_VERSION} ${STORAGE_PROVISIONER_IMAGE} ${STORAGE_HELPER_IMAGE}"
    declare -f scratch_image storage_images storage_manifest component_images node_image
  } | sha256sum | cut -c1-10
}

# debootstrap ROOTFS PACKAGES: a minimal Debian rootfs with PACKAGES.
debootstrap_rootfs() {
  local started=${SECONDS}
  log "debootstrap ${DEBIAN_SUITE} into $1 (packages: $2)"
  debootstrap --variant=minbase --include="$2" "${DEBIAN_SUITE}" "$1" "$(debian_mirror)" >"$1.log" 2>&1 ||
    { tail -n 20 "$1.log" >&2; return 1; }
  rm -rf "$1/var/lib/apt/lists/"* "$1/var/cache/apt/"*.bin "$1/var/cache/apt/archives/"*.deb
  log "debootstrap done in $((SECONDS - started))s"
}

kind_module() {
  GOFLAGS= go mod download -json "sigs.k8s.io/kind@${KIND_VERSION}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p'
}

kind_files() { echo "$(kind_module)/images/base/files"; }

# kind's images/base/Dockerfile, on the debootstrap rootfs R.
make_base_rootfs() {
  local R="$1" F
  F="$(kind_files)"
  install -m0755 "${F}"/usr/local/bin/* "${R}/usr/local/bin/"
  if [[ "${UNPRIVILEGED}" == 1 ]]; then
    python3 "${KIND_HACK}/patch-entrypoint.py" "${R}/usr/local/bin/entrypoint"
  fi
  mkdir -p "${R}/kind/bin" "${R}/etc/containerd" "${R}/etc/default" "${R}/etc/sysctl.d" \
    "${R}/etc/systemd/system/kubelet.service.d" "${R}/etc/kubernetes/manifests" "${R}/usr/local/sbin" \
    "${R}/opt/cni/bin"
  cp "${F}/kind/README.txt" "${R}/kind/"
  install -m0755 "${F}"/kind/bin/* "${R}/kind/bin/"
  install -m0644 "${F}/etc/crictl.yaml" "${R}/etc/"
  install -m0644 "${F}/etc/containerd/config.toml" "${R}/etc/containerd/config.toml"
  if [[ "${UNPRIVILEGED}" == 1 ]]; then
    # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj (CRI gives sandboxes -998)
    # and fails with "can't get final child's PID from pipe: EOF": clamp it, as kind
    # does for rootless nodes.
    sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' "${R}/etc/containerd/config.toml"
  fi
  install -m0644 "${F}/etc/default/kubelet" "${R}/etc/default/"
  install -m0644 "${F}"/etc/sysctl.d/* "${R}/etc/sysctl.d/"
  install -m0644 "${F}"/etc/systemd/system/*.service "${F}"/etc/systemd/system/*.slice "${R}/etc/systemd/system/"
  install -m0644 "${F}"/etc/systemd/system/kubelet.service.d/* "${R}/etc/systemd/system/kubelet.service.d/"
  # Debian's containerd and runc where kind's units expect them.
  for b in containerd ctr containerd-shim-runc-v2; do ln -sf "/usr/bin/${b}" "${R}/usr/local/bin/${b}"; done
  ln -sf /usr/sbin/runc "${R}/usr/local/sbin/runc"
  for p in host-local loopback ptp portmap bridge; do cp "${R}/usr/lib/cni/${p}" "${R}/opt/cni/bin/"; done
  install -m0755 "${CRICTL_BINARY}" "${R}/usr/local/bin/crictl"
  # systemd trimmed as in kind's Dockerfile.
  find "${R}/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  rm -f "${R}"/lib/systemd/system/multi-user.target.wants/* "${R}"/etc/systemd/system/*.wants/* \
    "${R}"/lib/systemd/system/local-fs.target.wants/* "${R}"/lib/systemd/system/sockets.target.wants/*udev* \
    "${R}"/lib/systemd/system/sockets.target.wants/*initctl* "${R}"/lib/systemd/system/basic.target.wants/*
  grep -q ReadKMsg=no "${R}/etc/systemd/journald.conf" || echo ReadKMsg=no >>"${R}/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "${R}/sbin/init"
  chroot "${R}" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
  chroot "${R}" systemctl mask systemd-binfmt.service >/dev/null 2>&1
  chroot "${R}" sh -c "ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}' | jq 'del(.process.rlimits)' >/etc/containerd/cri-base.json"
  : >"${R}/etc/machine-id"
}

# Build the base image (and its rootfs-only twin for kube-proxy) unless present.
base_image() {
  local tag="$1" rootfs_tag="$2" work started=${SECONDS}
  if image_exists "${tag}" && image_exists "${rootfs_tag}"; then
    log "base image ${tag}: cached"
    return
  fi
  mkdir -p "${WORK_ROOT}"
  work="$(mktemp -d "${WORK_ROOT}/base.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the trap outlives this function's locals
  trap "rm -rf '${work}'" EXIT
  debootstrap_rootfs "${work}/rootfs" "${BASE_PACKAGES}"
  make_base_rootfs "${work}/rootfs"
  log "importing the rootfs as ${rootfs_tag}"
  tar -C "${work}/rootfs" -c . | docker import - "${rootfs_tag}" >/dev/null
  mkdir -p "${work}/ctx"
  # docker import cannot set STOPSIGNAL or ENTRYPOINT: a one-line offline build adds them.
  printf 'FROM %s\nENV container=docker\nSTOPSIGNAL SIGRTMIN+3\nENTRYPOINT ["/usr/local/bin/entrypoint","/sbin/init"]\n' \
    "${rootfs_tag}" >"${work}/ctx/Dockerfile"
  docker build -q -t "${tag}" "${work}/ctx" >/dev/null
  rm -rf "${work}"
  trap - EXIT
  log "base image ${tag} built in $((SECONDS - started))s"
}

# docker build -q -t TAG DIR, where DIR holds the Dockerfile and its files.
build_in() { docker build -q -t "$1" "$2" >/dev/null; }

# A FROM scratch image of one static binary: scratch_image TAG BINARY [DOCKERFILE-LINE].
scratch_image() {
  local d="$4/$(basename "$2")"
  mkdir -p "${d}/tmp"
  chmod 1777 "${d}/tmp"
  cp "$2" "${d}/"
  printf 'FROM scratch\nENV PATH=/usr/local/bin:/usr/bin:/bin\nCOPY tmp /tmp\nCOPY %s /usr/local/bin/%s\n%s\n' \
    "$(basename "$2")" "$(basename "$2")" "$3" >"${d}/Dockerfile"
  build_in "$1" "${d}"
}

# local-path-provisioner's image and its helper's (FROM scratch: /bin/busybox from the
# rootfs image $1 as sh, mkdir and rm, all the helper's scripts run); work directory $2.
storage_images() {
  local rootfs_tag="$1" work="$2" helper="$2/local-path-helper" c
  scratch_image "${STORAGE_PROVISIONER_IMAGE}" "${LOCAL_PATH_PROVISIONER_BINARY}" \
    'ENTRYPOINT ["/usr/local/bin/local-path-provisioner"]' "${work}"
  mkdir -p "${helper}/bin"
  c="$(docker create "${rootfs_tag}" /bin/true)"
  docker cp -L "${c}:/bin/busybox" "${helper}/bin/busybox" >/dev/null
  docker rm -v "${c}" >/dev/null
  for applet in sh mkdir rm; do ln -s busybox "${helper}/bin/${applet}"; done
  printf 'FROM scratch\nENV PATH=/bin\nCOPY bin /bin\n' >"${helper}/Dockerfile"
  build_in "${STORAGE_HELPER_IMAGE}" "${helper}"
}

# kind's default-storage manifest (its node image builder's constant) with the local images.
storage_manifest() {
  local source manifest
  source="$(kind_module)/pkg/build/nodeimage/const_storage.go"
  manifest="$(awk '/^const defaultStorageManifest = `/ { on = 1; next } on && /^`$/ { exit } on' "${source}" |
    sed -e "s|\` + storageProvisionerImage + \`|${STORAGE_PROVISIONER_IMAGE}|" \
      -e "s|\` + storageHelperImage + \`|${STORAGE_HELPER_IMAGE}|")"
  grep -q '^provisioner: rancher.io/local-path$' <<<"${manifest}" && ! grep -q '` + ' <<<"${manifest}" ||
    die "kind ${KIND_VERSION}'s default storage manifest has changed shape (${source}): update storage_manifest"
  echo "${manifest}"
}

# Every image kubeadm and the node need, saved as tars into $2; $1 is the rootfs image.
component_images() {
  local rootfs_tag="$1" out="$2" work="$3" v="${KUBERNETES_VERSION}" started=${SECONDS} pause_c
  pause_c="$(GOFLAGS= go mod download -json "k8s.io/kubernetes@${v}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')/build/pause/linux/pause.c"
  mkdir -p "${work}/pause"
  gcc -Os -Wall -static -DVERSION="v${PAUSE_TAGS[0]}-kcp-shard-operator" -o "${work}/pause/pause" "${pause_c}"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"${work}/pause/Dockerfile"
  build_in "registry.k8s.io/pause:${PAUSE_TAGS[0]}" "${work}/pause"
  docker tag "registry.k8s.io/pause:${PAUSE_TAGS[0]}" "registry.k8s.io/pause:${PAUSE_TAGS[1]}"
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    scratch_image "registry.k8s.io/${c}:${v}" "${KUBERNETES_DIR}/${c}" "" "${work}"
  done
  scratch_image "registry.k8s.io/etcd:${ETCD_IMAGE_TAG}" "${ETCD_BINARY}" "" "${work}"
  scratch_image "registry.k8s.io/coredns/coredns:${COREDNS_VERSION}" "${COREDNS_BINARY}" \
    'ENTRYPOINT ["/usr/local/bin/coredns"]' "${work}"
  # kube-proxy needs iptables and conntrack: on the Debian rootfs.
  mkdir -p "${work}/kube-proxy"
  cp "${KUBERNETES_NODE_DIR}/kube-proxy" "${work}/kube-proxy/"
  printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\nENTRYPOINT []\n' "${rootfs_tag}" >"${work}/kube-proxy/Dockerfile"
  build_in "registry.k8s.io/kube-proxy:${v}" "${work}/kube-proxy"
  storage_images "${rootfs_tag}" "${work}"
  mkdir -p "${out}"
  for image in "registry.k8s.io/pause:${PAUSE_TAGS[0]}" "registry.k8s.io/pause:${PAUSE_TAGS[1]}" \
    "registry.k8s.io/kube-apiserver:${v}" \
    "registry.k8s.io/kube-controller-manager:${v}" "registry.k8s.io/kube-scheduler:${v}" \
    "registry.k8s.io/kube-proxy:${v}" "registry.k8s.io/etcd:${ETCD_IMAGE_TAG}" \
    "registry.k8s.io/coredns/coredns:${COREDNS_VERSION}" "${STORAGE_PROVISIONER_IMAGE}" "${STORAGE_HELPER_IMAGE}"; do
    docker save "${image}" -o "${out}/$(echo "${image}" | tr '/:' '__').tar"
  done
  log "component images built in $((SECONDS - started))s"
}

# The steps of kind's pkg/build/nodeimage, with the images imported from local tars.
node_image() {
  local tag="$1" base="$2" rootfs_tag="$3" work c="${PREFIX}-nodebuild-$$" started=${SECONDS}
  if image_exists "${tag}"; then
    log "node image ${tag}: cached"
    return
  fi
  mkdir -p "${WORK_ROOT}"
  work="$(mktemp -d "${WORK_ROOT}/node.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '${work}'; docker rm -f -v '${c}' >/dev/null 2>&1 || true" EXIT
  component_images "${rootfs_tag}" "${work}/tars" "${work}"
  log "assembling the node image ${tag}"
  docker run -d --name "${c}" --entrypoint=sleep --security-opt seccomp=unconfined "${base}" infinity >/dev/null
  for b in kubeadm kubelet; do docker cp "${KUBERNETES_NODE_DIR}/${b}" "${c}:/usr/bin/${b}"; done
  docker cp "${KUBERNETES_DIR}/kubectl" "${c}:/usr/bin/kubectl"
  docker exec "${c}" sh -c "chmod +x /usr/bin/kube* && echo -n ${KUBERNETES_VERSION} >/kind/version && mkdir -p /kind/manifests /etc/cni/net.d"
  docker exec -i "${c}" sh -c 'cat >/etc/cni/net.d/10-kcp-shard-operator.conflist' <<'JSON'
{"cniVersion": "0.4.0", "name": "kcp-shard-operator", "plugins": [
 {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
 {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
  storage_manifest | docker exec -i "${c}" sh -c 'cat >/kind/manifests/default-storage.yaml'
  docker exec "${c}" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
  docker exec "${c}" bash -c 'for i in $(seq 1 20); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.5; done; ctr version >/dev/null'
  for t in "${work}"/tars/*.tar; do
    docker exec -i "${c}" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
      --all-platforms --no-unpack --digests - <"${t}" >/dev/null
  done
  docker exec "${c}" sh -c 'kill $(pidof containerd); sleep 1'
  docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' --change 'CMD []' \
    --change 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""' "${c}" "${tag}" >/dev/null
  docker rm -f -v "${c}" >/dev/null
  rm -rf "${work}"
  trap - EXIT
  log "node image ${tag} built in $((SECONDS - started))s"
}

cmd_node() {
  load_tools
  local base rootfs node
  base="${PREFIX}/base:${DEBIAN_SUITE}-$(base_key)"
  rootfs="${PREFIX}/base-rootfs:${DEBIAN_SUITE}-$(base_key)"
  node="${PREFIX}/node:${KUBERNETES_VERSION}-$(node_key)"
  if ! image_exists "${node}"; then
    "${HACK_DIR}/tools.sh" build crictl >&2
    base_image "${base}" "${rootfs}"
    "${HACK_DIR}/tools.sh" build kubernetes kubernetes-node etcd coredns local-path-provisioner >&2
    node_image "${node}" "${base}" "${rootfs}"
  else
    log "node image ${node}: cached"
  fi
  # hack/run-tests.sh runs the kind e2e when this exists (the image cache is warm).
  echo "${node}" >"${WORK_ROOT}/node-image"
  echo "${node}"
}

case "${1:-}" in
  node) cmd_node ;;
  keys) echo "base $(base_key) node $(node_key)" ;;
  *) echo "usage: $0 node | keys" >&2; exit 2 ;;
esac
