{{/* The chart's name, or nameOverride. */}}
{{- define "specpilot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: fullnameOverride, else the release name with the chart's name unless it
already holds it. */}}
{{- define "specpilot.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "specpilot.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "specpilot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specpilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "specpilot.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "specpilot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "specpilot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "specpilot.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the operator serves, as a JSON list: watchNamespaces, else the release's own
namespace; empty in cluster-wide mode (clusterWide), which takes no list. */}}
{{- define "specpilot.watchNamespaces" -}}
{{- if .Values.clusterWide -}}
{{- if .Values.watchNamespaces -}}
{{- fail "clusterWide serves every namespace: leave watchNamespaces empty, or set clusterWide=false to serve only those" -}}
{{- end -}}
{{- list | toJson -}}
{{- else -}}
{{- range .Values.watchNamespaces -}}
{{- if has . (list "kube-system" "kube-public" "kube-node-lease") -}}
{{- fail (printf "watchNamespaces: %s is a system namespace, where the operator never writes; run pilots in a namespace of their own" .) -}}
{{- end -}}
{{- end -}}
{{- default (list .Release.Namespace) .Values.watchNamespaces | toJson -}}
{{- end -}}
{{- end -}}

{{/* The Kopf peering object's name: peering.name, else the release's full name, so that two
releases never share one. */}}
{{- define "specpilot.peeringName" -}}
{{- default (include "specpilot.fullname" .) .Values.peering.name -}}
{{- end -}}

{{/* The operator's image: image.registry, or global.imageRegistry when an umbrella chart sets one, in
front of image.repository. */}}
{{- define "specpilot.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with .Values.global.imageRegistry | default .Values.image.registry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
What the operator does in a namespace it serves, and nothing else (no Secrets, no wildcards).
Derived from the operator's calls; tests/component/chart/test_rbac.py holds it to them.
*/}}
{{- define "specpilot.rules" -}}
# Kopf watches pilots; patches carry its finalizer and state annotations, and the operator clears
# manual-action annotations once acted on.
- apiGroups: [specpilot.io]
  resources: [speculationpilots]
  verbs: [list, watch, patch]
# One status write per reconcile, through the status subresource.
- apiGroups: [specpilot.io]
  resources: [speculationpilots/status]
  verbs: [patch]
# One Event per transition, on the pilot (Kopf posts its warnings the same way).
- apiGroups: [""]
  resources: [events]
  verbs: [create]
# Arm and router pods are indexed (readiness, addresses to scrape and probe); never changed.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
# A pilot's children: applied server-side (create and patch), watched for drift, deleted in
# the ordered teardown.
- apiGroups: [""]
  resources: [services, serviceaccounts]
  verbs: [list, watch, create, patch, delete]
# spec.router.takeover's Service: read each tick, merge-patched to select the routers and back.
- apiGroups: [""]
  resources: [services]
  verbs: [get]
# The routing ConfigMap is a child too; get because the router's Role grants get on it, and
# RBAC lets the operator grant only what it holds itself.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list, watch, create, patch, delete]
# spec.workloadRef's Deployment: read each tick (its pods through the pods rule), never written.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get]
# A peak rehearsal step's load generator.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [list, watch, create, patch, delete]
# Never read by the operator: held only so that it may grant the routers' Role (which reads them)
# without the escalate verb.
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
{{- with .Values.rbac.webhookSecrets }}
# Webhooks' secret headers (secretHeader): read as each call is made, only the Secrets named here.
- apiGroups: [""]
  resources: [secrets]
  resourceNames: {{ toJson . }}
  verbs: [get]
{{- end }}
{{- end -}}

{{/* Kopf peering: watch the peering objects, patch only the operator's own (heartbeats). */}}
{{- define "specpilot.peeringRules" -}}
- apiGroups: [kopf.dev]
  resources: [{{ .resource }}]
  verbs: [list, watch]
- apiGroups: [kopf.dev]
  resources: [{{ .resource }}]
  resourceNames: [{{ .name }}]
  verbs: [patch]
{{- end -}}
