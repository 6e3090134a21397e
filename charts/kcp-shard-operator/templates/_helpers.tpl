{{/* Chart name, overridable with nameOverride. */}}
{{- define "kcp-shard-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name prefix of the release's objects. */}}
{{- define "kcp-shard-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Chart name and version for the helm.sh/chart label. */}}
{{- define "kcp-shard-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels selecting the operator pods. */}}
{{- define "kcp-shard-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kcp-shard-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object of the release. */}}
{{- define "kcp-shard-operator.labels" -}}
helm.sh/chart: {{ include "kcp-shard-operator.chart" . }}
{{ include "kcp-shard-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: kcp
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of the Shards rendered from .Values.shards (they are not part of the operator). */}}
{{- define "kcp-shard-operator.shardLabels" -}}
helm.sh/chart: {{ include "kcp-shard-operator.chart" . }}
app.kubernetes.io/part-of: kcp
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Name of the ServiceAccount the operator runs as. */}}
{{- define "kcp-shard-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kcp-shard-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Whether the replicas coordinate through kopf peering ("true" or ""). */}}
{{- define "kcp-shard-operator.peering" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ end }}
{{- end }}

{{/*
Namespaces the operator watches, as a JSON list: watchNamespaces, else the release
namespace; [] means all namespaces (clusterWide, an explicit opt-in).
*/}}
{{- define "kcp-shard-operator.namespaces" -}}
{{- if .Values.clusterWide }}
{{- if .Values.watchNamespaces }}
{{- fail "set either watchNamespaces or clusterWide, not both" }}
{{- end }}
{{- list | toJson }}
{{- else }}
{{- .Values.watchNamespaces | default (list .Release.Namespace) | toJson }}
{{- end }}
{{- end }}

{{/* Operator image reference. */}}
{{- define "kcp-shard-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
RBAC rules for the namespaced resources the operator reads and writes, measured
by running it with these rules and nothing else: Shards (kopf patches its
finalizer and annotations) and their status (merge patch); the children it
applies with server-side apply (apply needs create when the object is new;
update for the full replace that puts back fields another manager added;
delete for PodDisruptionBudgets and for recreating a Service or PDB neither
apply nor replace can fix, garbage collection deletes the rest); watching the
shard's pods to report unschedulable ones; Secrets, watched for the
resourceVersions of the mounted ones (a rotation rolls the pods; RBAC cannot
grant metadata only) and read for the admin kubeconfig of the identity-cache
cleanup; core events posted by kopf. Used by the ClusterRole (all namespaces)
or one Role per watched namespace.
*/}}
{{- define "kcp-shard-operator.namespacedRules" -}}
- apiGroups: ["kcpshard.dev"]
  resources: ["shards", "cacheservers", "frontproxies", "virtualworkspaceservers", "kubeconfigs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["kcpshard.dev"]
  resources:
    - shards/status
    - cacheservers/status
    - frontproxies/status
    - virtualworkspaceservers/status
    - kubeconfigs/status
  verbs: ["patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "update"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# The claims of shards on embedded etcd: never updated by PUT, never deleted (they hold the
# shards' data; with whenDeleted: Delete the garbage collector removes them with the Shard).
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# The cache servers' NetworkPolicies: written by the operator (server-side apply), deleted when
# a CacheServer turns its policy off (spec.networkPolicy.enabled), else gone with it.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The front-proxies' path mappings: written by the operator (server-side apply), gone with
# their FrontProxy (owner reference).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# Backups (spec.backup): etcdctl and etcdutl run in the backup sidecar of a shard's pod. A
# websocket exec is authorized as create (Kubernetes 1.30 and later) or get (before).
- apiGroups: [""]
  resources: ["pods/exec"]
  verbs: ["create", "get"]
# Restores (annotation kcpshard.dev/restore): the Job that restores a shard's etcd from a
# backup, applied (server-side), read and watched (its end brings the next pass); gone with
# its Shard (owner reference).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Secrets: read what the Shards mount; create and update (PUT) the certificates and
# kubeconfigs the operator issues (spec.pki). Never patch or delete: a user's Secret is
# never written, and issued ones go with their Shard (owner reference).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch", "create", "update"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}
