{{/* Chart name, cut to 63 characters. */}}
{{- define "agenthooks.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Base name of every object: the release name if it already contains the chart name (so
`helm install agenthooks` gives agenthooks-operator, as config/ does), else release-chart.
Cut to 48 characters so that "-standard-edition" still fits in 63.
*/}}
{{- define "agenthooks.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 48 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agenthooks.operatorName" -}}
{{- printf "%s-operator" (include "agenthooks.fullname" .) }}
{{- end }}

{{- define "agenthooks.dispatcherName" -}}
{{- printf "%s-dispatcher" (include "agenthooks.fullname" .) }}
{{- end }}

{{- define "agenthooks.masterNamespace" -}}
{{- default .Release.Namespace .Values.masterNamespace }}
{{- end }}

{{- define "agenthooks.sealKeySecret" -}}
{{- default (printf "%s-seal-key" (include "agenthooks.fullname" .)) .Values.sealKey.existingSecret }}
{{- end }}

{{- define "agenthooks.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "agenthooks.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: agenthooks
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component: include with (list . "operator"). */}}
{{- define "agenthooks.selectorLabels" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: {{ include "agenthooks.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "agenthooks.componentLabels" -}}
{{ include "agenthooks.labels" (index . 0) }}
app.kubernetes.io/name: {{ include "agenthooks.name" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* Pod and container security settings shared by both Deployments. */}}
{{- define "agenthooks.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "agenthooks.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end }}
