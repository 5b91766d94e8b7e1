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

{{/*
Image of one component: include with (list . "operator") or (list . "dispatcher").
repository@digest when a digest is given (the tag is then not used), else repository:tag.
*/}}
{{- define "agenthooks.image" -}}
{{- $ctx := index . 0 -}}
{{- $i := (index $ctx.Values (index . 1)).image -}}
{{- if $i.digest }}
{{- printf "%s@%s" $i.repository $i.digest }}
{{- else }}
{{- printf "%s:%s" $i.repository ($i.tag | default $ctx.Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Labels on every object (Kubernetes' recommended labels and Helm's chart label). */}}
{{- define "agenthooks.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "agenthooks.name" . }}
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

{{/* Directory where the dispatchers see the Secret dispatcher.prompt.apiKeySecret. */}}
{{- define "agenthooks.providerKeysDir" -}}
/var/run/secrets/agenthooks/providers
{{- end }}

{{/* Name of the ConfigMap holding the dispatchers' providers.yaml. */}}
{{- define "agenthooks.promptConfigMap" -}}
{{- printf "%s-prompt" (include "agenthooks.dispatcherName" .) }}
{{- end }}

{{/* Whether dispatcher.prompt.providers is set ("true" or ""). */}}
{{- define "agenthooks.promptEnabled" -}}
{{- $p := .Values.dispatcher.prompt | default dict }}
{{- if gt (len ($p.providers | default list)) 0 }}true{{ end }}
{{- end }}

{{/*
The dispatchers' providers file (--providers-file; dispatcher handlers/prompt/config.rs):
providers with apiKeyFile pointing into the mounted key Secret, models, defaultModel.
What the dispatcher would refuse in it is refused first by agenthooks.validate.
*/}}
{{- define "agenthooks.providersFile" -}}
{{- $p := .Values.dispatcher.prompt | default dict }}
{{- $providers := $p.providers | default list }}
{{- $models := $p.models | default dict }}
{{- $out := list }}
{{- range $pr := $providers }}
{{- $out = append $out (dict "name" $pr.name "kind" $pr.kind "baseUrl" $pr.baseUrl "apiKeyFile" (printf "%s/%s" (include "agenthooks.providerKeysDir" $) $pr.apiKeySecretKey)) }}
{{- end }}
{{- $file := dict "providers" $out "models" $models }}
{{- with $p.defaultModel }}
{{- $_ := set $file "defaultModel" . }}
{{- end }}
{{- toYaml $file }}
{{- end }}

{{/* Image of the command runner: dispatcher.commandRunner.image, else the dispatcher's. */}}
{{- define "agenthooks.runnerImage" -}}
{{- $i := .Values.dispatcher.commandRunner.image -}}
{{- if $i.repository -}}
{{- if $i.digest -}}
{{ $i.repository }}@{{ $i.digest }}
{{- else -}}
{{ $i.repository }}:{{ $i.tag | default .Values.dispatcher.image.tag | default .Values.image.tag }}
{{- end -}}
{{- else -}}
{{ include "agenthooks.image" (list . "dispatcher") }}
{{- end -}}
{{- end }}

{{/*
The audit volume every dispatcher replica would share ("persistentVolumeClaim" or
"hostPath"), or "": one spool directory that a second Pod cannot lock (and a ReadWriteOnce
claim that a second node cannot attach). Only when the audit trail is on.
*/}}
{{- define "agenthooks.sharedAuditVolume" -}}
{{- $a := .Values.dispatcher.audit -}}
{{- if ne $a.backend "off" -}}
{{- if hasKey $a.storage.volume "persistentVolumeClaim" }}persistentVolumeClaim{{ else if hasKey $a.storage.volume "hostPath" }}hostPath{{ end -}}
{{- end -}}
{{- end }}

{{/*
Where the Pods of one component run: include with (list . "operator") or
(list . "dispatcher"), at the indentation of a Pod spec's fields. nodeSelector and
tolerations as given; affinity as given, else a preference for nodes that run no other Pod
of the component (so that one node lost, or drained, never takes every replica); each
topologySpreadConstraint without a labelSelector gets the component's; priorityClassName.
*/}}
{{- define "agenthooks.scheduling" -}}
{{- $ctx := index . 0 -}}
{{- $component := index . 1 -}}
{{- $v := index $ctx.Values $component -}}
{{- $selector := include "agenthooks.selectorLabels" (list $ctx $component) | fromYaml -}}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
{{- if $v.affinity }}
  {{- toYaml $v.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- toYaml $selector | nindent 14 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
{{- range . }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
  - {{ toYaml $c | indent 4 | trim }}
{{- end }}
{{- end }}
{{- end }}

{{/*
NetworkPolicy peers of the namespaces a value names: include with a dict holding
`namespaces` (names, matched by the label kubernetes.io/metadata.name that the API server
sets on every namespace) and `namespaceSelector` (a label selector; empty: none). A YAML
list, possibly empty ([]), for fromYamlArray.
*/}}
{{- define "agenthooks.namespacePeers" -}}
{{- $peers := list }}
{{- with .namespaces }}
{{- $peers = append $peers (dict "namespaceSelector" (dict "matchExpressions" (list (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" .)))) }}
{{- end }}
{{- with .namespaceSelector }}
{{- $peers = append $peers (dict "namespaceSelector" .) }}
{{- end }}
{{- toYaml $peers }}
{{- end }}

{{/* The egress rule of a NetworkPolicy for DNS (networkPolicy.dns.to, port 53 UDP and TCP). */}}
{{- define "agenthooks.dnsEgress" -}}
# DNS: the operator's and hooks' host names
- to:
    {{- toYaml .Values.networkPolicy.dns.to | nindent 4 }}
  ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{- end }}

{{/*
The Secret holding the sync port's tls.crt, tls.key and ca.crt (operator.syncTLS).
*/}}
{{- define "agenthooks.syncTLSSecret" -}}
{{- default (printf "%s-sync-tls" (include "agenthooks.fullname" .)) .Values.operator.syncTLS.secretName }}
{{- end }}

{{/*
The names the sync certificate holds: the leader-only sync Service (as operator.yaml names
it) short, with its namespace, .svc and .svc.cluster.local. A list, one per line.
*/}}
{{- define "agenthooks.syncTLSNames" -}}
{{- $svc := printf "%s-leader" (include "agenthooks.operatorName" .) | trunc 63 | trimSuffix "-" }}
{{- $ns := .Release.Namespace }}
- {{ $svc }}
- {{ $svc }}.{{ $ns }}
- {{ $svc }}.{{ $ns }}.svc
- {{ $svc }}.{{ $ns }}.svc.cluster.local
{{- end }}
