{{/*
Checks of values that cannot work and that values.schema.json cannot express (they relate
two values, or need a size compared). templates/validate.yaml runs them on every render
(`helm install`, `upgrade`, `template`, `lint`); a failure names each value and says what
would work (docs/chart-values.md lists them). The schema refuses single bad values first:
Helm validates it before any template runs.
*/}}

{{/*
A Kubernetes quantity as a plain number (a float, printed): "100m" -> 0.1, "64Mi" ->
67108864, 2 -> 2. Only for values the schema has already checked.
*/}}
{{- define "agenthooks.quantityValue" -}}
{{- if kindIs "string" . -}}
{{- $num := regexFind "^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][0-9]+)?" . -}}
{{- $units := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- mulf (float64 $num) (index $units (trimPrefix $num .)) -}}
{{- else -}}
{{- float64 . -}}
{{- end -}}
{{- end }}

{{/* dispatcher.audit.spoolMaxBytes as the dispatcher's flag wants it (a number never in exponent form). */}}
{{- define "agenthooks.spoolMaxBytes" -}}
{{- $v := .Values.dispatcher.audit.spoolMaxBytes -}}
{{- if kindIs "string" $v }}{{ $v }}{{ else }}{{ int64 $v }}{{ end -}}
{{- end }}

{{/*
Requests above limits in one resources value: a list of messages. Include with
(list "operator.resources" .Values.operator.resources).
*/}}
{{- define "agenthooks.checkResources" -}}
{{- $path := index . 0 -}}
{{- $r := index . 1 | default dict -}}
{{- $requests := $r.requests | default dict -}}
{{- $limits := $r.limits | default dict -}}
{{- range $name := list "cpu" "memory" "ephemeral-storage" -}}
{{- if and (hasKey $requests $name) (hasKey $limits $name) -}}
{{- $req := include "agenthooks.quantityValue" (index $requests $name) | float64 -}}
{{- $lim := include "agenthooks.quantityValue" (index $limits $name) | float64 -}}
{{- if gt $req $lim }}
- {{ $path }}.requests.{{ $name }}: {{ index $requests $name }} is above {{ $path }}.limits.{{ $name }} ({{ index $limits $name }}); the API server refuses such a Pod
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* Every check; fails once, listing every value that cannot work. */}}
{{- define "agenthooks.validate" -}}
{{- $errs := "" -}}
{{- $d := .Values.dispatcher -}}
{{- $a := $d.audit -}}
{{- $r := $d.commandRunner -}}

{{- /* Names: every object is named after the fullname, and Services need a DNS-1035 label */ -}}
{{- $full := include "agenthooks.fullname" . }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $full) }}
{{- $from := ternary (printf "fullnameOverride %q" .Values.fullnameOverride) (printf "release name %q" .Release.Name) (ne .Values.fullnameOverride "") }}
{{- $errs = printf "%s\n- %s: the Services would be named %s-dispatcher and %s-operator, and a Service name must start with a letter and hold only lower-case letters, digits and '-'; set fullnameOverride to such a name" $errs $from $full $full }}
{{- end }}

{{- /* Images */ -}}
{{- if and $r.image.digest (not $r.image.repository) }}
{{- $errs = printf "%s\n- dispatcher.commandRunner.image.digest: %s is set without dispatcher.commandRunner.image.repository, so the runner would run dispatcher.image; set the repository too (or use dispatcher.image.digest)" $errs $r.image.digest }}
{{- end }}
{{- if and $r.image.tag (not $r.image.repository) }}
{{- $errs = printf "%s\n- dispatcher.commandRunner.image.tag: %q is set without dispatcher.commandRunner.image.repository, so the runner would run dispatcher.image; set the repository too (or clear the tag)" $errs $r.image.tag }}
{{- end }}

{{- /* The Service: source ranges restrict a load balancer only */ -}}
{{- if and $d.service.loadBalancerSourceRanges (ne $d.service.type "LoadBalancer") }}
{{- $errs = printf "%s\n- dispatcher.service.loadBalancerSourceRanges: only a Service of type LoadBalancer applies them, and dispatcher.service.type is %s: they would restrict no client; use type LoadBalancer, or drop them (a NetworkPolicy restricts the other types)" $errs $d.service.type }}
{{- end }}

{{- /* Callers: the admin token is for standalone mode only (CONTRACT §9.5) */ -}}
{{- if and $d.adminTokenSecret.name (eq $d.callers.mode "kubernetes") }}
{{- $errs = printf "%s\n- dispatcher.adminTokenSecret.name: the admin token is for standalone mode only; with dispatcher.callers.mode kubernetes audit history and dry runs are authorized by RBAC (bind agenthooks-history-reader, agenthooks-tester; docs/callers.md). Clear it, or set dispatcher.callers.mode anonymous" $errs }}
{{- end }}

{{- /* The audit trail: the Secrets a backend needs, the spool's bound, its volume */ -}}
{{- if and (eq $a.backend "postgres") (not $a.databaseUrlSecret.name) }}
{{- $errs = printf "%s\n- dispatcher.audit.databaseUrlSecret.name: required when dispatcher.audit.backend is postgres (an existing Secret holding the database URL)" $errs }}
{{- end }}
{{- if and $a.keys (not $a.keySecret) }}
{{- $errs = printf "%s\n- dispatcher.audit.keySecret: required when dispatcher.audit.keys is set (an existing Secret holding the keys)" $errs }}
{{- end }}
{{- if and $a.keySecret (not $a.keys) }}
{{- $errs = printf "%s\n- dispatcher.audit.keys: name the keys of dispatcher.audit.keySecret (%s) to use, current first" $errs $a.keySecret }}
{{- end }}
{{- if ne $a.backend "off" }}
{{- $spool := include "agenthooks.quantityValue" $a.spoolMaxBytes | float64 }}
{{- if lt $spool 65536.0 }}
{{- $errs = printf "%s\n- dispatcher.audit.spoolMaxBytes: %v is below the dispatcher's minimum of 64Ki (65536 bytes)" $errs $a.spoolMaxBytes }}
{{- end }}
{{- if not $a.storage.volume }}
{{- $size := include "agenthooks.quantityValue" $a.storage.sizeLimit | float64 }}
{{- if ge $spool $size }}
{{- $errs = printf "%s\n- dispatcher.audit.spoolMaxBytes: %v does not fit in dispatcher.audit.storage.sizeLimit (%v), which also holds the SQLite file; the kubelet evicts a Pod whose emptyDir outgrows its sizeLimit; raise the sizeLimit or lower the spool" $errs $a.spoolMaxBytes $a.storage.sizeLimit }}
{{- end }}
{{- else }}
{{- /* A volume given with a size the chart can read: an emptyDir's sizeLimit, an
       ephemeral claim's storage request. */}}
{{- $v := $a.storage.volume }}
{{- $sizePath := "" }}
{{- $sizeValue := "" }}
{{- $why := "" }}
{{- if and (kindIs "map" $v.emptyDir) (hasKey ($v.emptyDir | default dict) "sizeLimit") }}
{{- $sizePath = "dispatcher.audit.storage.volume.emptyDir.sizeLimit" }}
{{- $sizeValue = $v.emptyDir.sizeLimit }}
{{- $why = "the kubelet evicts a Pod whose emptyDir outgrows its sizeLimit" }}
{{- else if kindIs "map" $v.ephemeral }}
{{- $req := dig "volumeClaimTemplate" "spec" "resources" "requests" "storage" "" $v.ephemeral }}
{{- if $req }}
{{- $sizePath = "dispatcher.audit.storage.volume.ephemeral.volumeClaimTemplate.spec.resources.requests.storage" }}
{{- $sizeValue = $req }}
{{- $why = "a full claim fails every write (SQLite and spool) before the spool's bound is reached" }}
{{- end }}
{{- end }}
{{- if and $sizePath (kindIs "string" $sizeValue) (not (regexMatch "^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][0-9]+|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$" $sizeValue)) }}
{{- $errs = printf "%s\n- %s: %q is not a Kubernetes quantity (e.g. 1Gi)" $errs $sizePath $sizeValue }}
{{- else if $sizePath }}
{{- if ge $spool (include "agenthooks.quantityValue" $sizeValue | float64) }}
{{- $errs = printf "%s\n- dispatcher.audit.spoolMaxBytes: %v does not fit in %s (%v), which also holds the SQLite file; %s; raise that size or lower the spool" $errs $a.spoolMaxBytes $sizePath $sizeValue $why }}
{{- end }}
{{- end }}
{{- end }}
{{- $shared := include "agenthooks.sharedAuditVolume" . }}
{{- if and $shared (gt (int64 $d.replicaCount) 1) }}
{{- $errs = printf "%s\n- dispatcher.audit.storage.volume: one %s for %d dispatcher replicas (dispatcher.replicaCount): each replica needs a spool of its own (the second cannot lock it and does not start); use an `ephemeral` volume (a claim per Pod), or replicaCount 1" $errs $shared (int64 $d.replicaCount) }}
{{- end }}
{{- end }}

{{- /* Prompt hooks: the key Secret, unique providers, aliases of known providers */ -}}
{{- $p := $d.prompt | default dict }}
{{- $providers := $p.providers | default list }}
{{- $models := $p.models | default dict }}
{{- if and (not $providers) (or $models $p.defaultModel) }}
{{- $errs = printf "%s\n- dispatcher.prompt.models/defaultModel are set but dispatcher.prompt.providers is empty" $errs }}
{{- end }}
{{- if and $providers (not $p.apiKeySecret) }}
{{- $errs = printf "%s\n- dispatcher.prompt.apiKeySecret: required when dispatcher.prompt.providers is set (an existing Secret with the providers' API keys)" $errs }}
{{- end }}
{{- $names := list }}
{{- range $i, $pr := $providers }}
{{- if has $pr.name $names }}
{{- $errs = printf "%s\n- dispatcher.prompt.providers[%d].name: provider %q is defined twice" $errs $i $pr.name }}
{{- end }}
{{- $names = append $names $pr.name }}
{{- end }}
{{- if $providers }}
{{- range $alias, $m := $models }}
{{- if not (has $m.provider $names) }}
{{- $errs = printf "%s\n- dispatcher.prompt.models.%s.provider: unknown provider %q" $errs $alias $m.provider }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $p.defaultModel (not (hasKey $models $p.defaultModel)) }}
{{- $errs = printf "%s\n- dispatcher.prompt.defaultModel: %q is not an alias under dispatcher.prompt.models" $errs $p.defaultModel }}
{{- end }}

{{- /* The command runner: a uid per run must never be the dispatcher's */ -}}
{{- $perRun := or $r.uidPerRun .Values.operator.allowTenantCommandHooks }}
{{- if and (eq .Values.edition "lite") $perRun }}
{{- $first := int64 $r.runAsUser }}
{{- $last := sub (add $first (int64 $r.maxRuns)) 1 }}
{{- if and (le $first 65532) (ge $last 65532) }}
{{- $errs = printf "%s\n- dispatcher.commandRunner.runAsUser: runs take the uids %d..%d (dispatcher.commandRunner.maxRuns=%d, uid per run%s), which include the dispatcher's 65532; pick a runAsUser above 65532 or at most %d" $errs $first $last (int64 $r.maxRuns) (ternary "" " as operator.allowTenantCommandHooks is true" $r.uidPerRun) (sub 65532 (int64 $r.maxRuns)) }}
{{- end }}
{{- end }}

{{- /* NetworkPolicies: someone may call the dispatchers; what a feature needs stays reachable */ -}}
{{- $np := .Values.networkPolicy }}
{{- if $np.enabled }}
{{- $dp := $np.dispatch }}
{{- if not (or $dp.namespaces $dp.namespaceSelector $dp.allNamespaces $dp.extraFrom) }}
{{- $errs = printf "%s\n- networkPolicy.dispatch: names no caller, so no agent could reach the dispatchers (every call would fail, and agents treat that as block); name your agents' namespaces in networkPolicy.dispatch.namespaces or .namespaceSelector, or set networkPolicy.dispatch.allNamespaces=true" $errs }}
{{- end }}
{{- if and $dp.allNamespaces (or $dp.namespaces $dp.namespaceSelector) }}
{{- $errs = printf "%s\n- networkPolicy.dispatch.allNamespaces: true admits every namespace, so networkPolicy.dispatch.namespaces and .namespaceSelector would restrict nothing; drop one or the other" $errs }}
{{- end }}
{{- if not $np.dispatcherEgress }}
{{- if $providers }}
{{- $errs = printf "%s\n- networkPolicy.dispatcherEgress: empty while dispatcher.prompt.providers are set: the dispatchers could not reach the providers and every prompt hook would block; add a rule for them (e.g. {to: [{ipBlock: {cidr: 0.0.0.0/0}}], ports: [{port: 443}]})" $errs }}
{{- end }}
{{- if eq $a.backend "postgres" }}
{{- $errs = printf "%s\n- networkPolicy.dispatcherEgress: empty while dispatcher.audit.backend is postgres: the dispatchers could not reach the database and audit rows would only pile up in the spool; add a rule for it (e.g. {to: [{ipBlock: {cidr: 10.0.12.0/24}}], ports: [{port: 5432}]})" $errs }}
{{- end }}
{{- end }}
{{- end }}

{{- /* Resources: requests within limits */ -}}
{{- $st := .Values.operator.syncTLS }}
{{- if and $st.secretName $st.certManager.enabled }}
{{- $errs = printf "%s\n- operator.syncTLS.secretName and operator.syncTLS.certManager.enabled: the sync certificate comes from one place; leave secretName empty for cert-manager's (Secret <fullname>-sync-tls), or turn certManager off to use %s" $errs $st.secretName }}
{{- end }}
{{- if and (not $st.enabled) (or $st.secretName $st.certManager.enabled) }}
{{- $errs = printf "%s\n- operator.syncTLS.enabled=false with operator.syncTLS.secretName or .certManager.enabled: a certificate for a sync port that serves plain HTTP; set operator.syncTLS.enabled=true" $errs }}
{{- end }}
{{- $errs = printf "%s%s" $errs (include "agenthooks.checkResources" (list "operator.resources" .Values.operator.resources)) }}
{{- $errs = printf "%s%s" $errs (include "agenthooks.checkResources" (list "dispatcher.resources" $d.resources)) }}
{{- if eq .Values.edition "lite" }}
{{- $errs = printf "%s%s" $errs (include "agenthooks.checkResources" (list "dispatcher.commandRunner.resources" $r.resources)) }}
{{- end }}

{{- if $errs }}
{{- fail (printf "values that cannot work:%s" $errs) }}
{{- end }}
{{- end }}
