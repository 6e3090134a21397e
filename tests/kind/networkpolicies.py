"""NetworkPolicies enforced on the kind clusters here: kube-router's firewall only.

The node's bridge CNI enforces no NetworkPolicy, and kind's kindnet (kube-network-policies)
cannot run on this machine's kernel: it sends packets to user space with nftables' ``queue``
statement, which needs ``CONFIG_NFT_QUEUE`` (not set here). kube-router's network-policy
controller needs iptables and ipset only (``CONFIG_IP_SET``, ``CONFIG_NETFILTER_XT_SET``,
``CONFIG_BRIDGE_NETFILTER`` are set), so it runs as a DaemonSet with its router and service
proxy off, from the image ``hack/image.sh kube-router`` builds (the binary from its Go module,
iptables and ipset from Debian).
"""

from __future__ import annotations

import json

from testkit.kube import Cluster, KubectlError
from testkit.tools import HACK, pinned_version, run_visible
from testkit.wait import wait_for

NAMESPACE = "kube-system"
NAME = "kube-router"
IMAGE = f"kcp-shard-operator-kind/kube-router:{pinned_version('KUBE_ROUTER_VERSION')}"

MANIFEST = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-router, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kube-router-firewall}
rules:
  - apiGroups: [""]
    resources: [namespaces, pods, services, nodes, endpoints]
    verbs: [get, list, watch]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-router-firewall}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-router-firewall}
subjects: [{kind: ServiceAccount, name: kube-router, namespace: kube-system}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-router, namespace: kube-system}
spec:
  selector: {matchLabels: {app: kube-router}}
  template:
    metadata: {labels: {app: kube-router}}
    spec:
      serviceAccountName: kube-router
      hostNetwork: true
      tolerations: [{operator: Exists}]
      containers:
        - name: kube-router
          image: @IMAGE@
          imagePullPolicy: Never
          command: [/kube-router, --run-router=false, --run-firewall=true,
                    --run-service-proxy=false,
                    --health-port=20244]
          env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
          securityContext: {privileged: true}
          readinessProbe: {httpGet: {path: /healthz, port: 20244}, periodSeconds: 2}
          volumeMounts:
            - {name: lib-modules, mountPath: /lib/modules, readOnly: true}
            - {name: xtables-lock, mountPath: /run/xtables.lock}
      volumes:
        - {name: lib-modules, hostPath: {path: /lib/modules}}
        - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
"""


def enforce_network_policies(cluster: Cluster) -> None:
    """Build kube-router's image, load it into the kind node and run it until Ready."""
    run_visible([str(HACK / "image.sh"), "kube-router"])
    name = cluster.kubectl("config", "view", "-o", "jsonpath={.contexts[0].context.cluster}")
    run_visible([str(HACK / "kind.sh"), "load", name.removeprefix("kind-"), IMAGE])
    cluster.kubectl("apply", "-f", "-", stdin=MANIFEST.replace("@IMAGE@", IMAGE))

    def ready() -> bool:
        try:
            found = cluster.kubectl("get", "daemonset", NAME, "-n", NAMESPACE, "-o", "json")
        except KubectlError:
            return False
        status = json.loads(found).get("status") or {}
        return bool(status.get("numberReady")) and status.get("numberReady") == status.get(
            "desiredNumberScheduled"
        )

    wait_for(ready, 180, "kube-router's firewall Ready", interval=2)
