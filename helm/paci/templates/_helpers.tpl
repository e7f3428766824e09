{{/*
Expand the name of the chart.
*/}}
{{- define "paci.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "paci.fullname" -}}
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

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "paci.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "paci.labels" -}}
helm.sh/chart: {{ include "paci.chart" . }}
{{ include "paci.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: paci
{{- end }}

{{/*
Selector labels. Each object adds app.kubernetes.io/component (coordinator,
operator, worker), in its selector too: never the version, which changes on
upgrade while a Deployment's selector cannot.
*/}}
{{- define "paci.selectorLabels" -}}
app.kubernetes.io/name: {{ include "paci.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The name of one of the release's objects: the full name and a suffix, cut to
63 characters. Call with (list $ "suffix").
*/}}
{{- define "paci.componentName" -}}
{{- $root := index . 0 }}
{{- printf "%s-%s" (include "paci.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The coordinator's Service, also its address for the operator and the workers. */}}
{{- define "paci.coordinatorName" -}}
{{- include "paci.componentName" (list . "coordinator") }}
{{- end }}

{{- define "paci.operatorName" -}}
{{- include "paci.componentName" (list . "operator") }}
{{- end }}

{{- define "paci.workerServiceAccountName" -}}
{{- include "paci.componentName" (list . "worker") }}
{{- end }}


{{/* TLS Secrets: the values, or names derived from the release. */}}
{{- define "paci.tlsSecretName" -}}
{{- .Values.tls.secretName | default (include "paci.componentName" (list . "coordinator-tls")) }}
{{- end }}

{{- define "paci.operatorClientSecretName" -}}
{{- .Values.tls.operatorClientSecretName | default (include "paci.componentName" (list . "operator-client-tls")) }}
{{- end }}

{{- define "paci.clientSecretName" -}}
{{- .Values.tls.clientSecretName | default (include "paci.componentName" (list . "client-tls")) }}
{{- end }}

{{- define "paci.workerSecretName" -}}
{{- .Values.tls.workerSecretName | default (include "paci.componentName" (list . "worker-tls")) }}
{{- end }}

{{/* An image reference: repository:tag, the tag defaulting to the appVersion. */}}
{{- define "paci.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .root.Chart.AppVersion | toString) -}}
{{- end -}}

{{/* Restricted pod security, shared by every pod. */}}
{{- define "paci.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "paci.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/*
The release's generated TLS material (tls.enabled and tls.generate), decided
once per render and kept in .Values._paciTls, so the Secrets (tls.yaml) and
the checksums on the pod templates that mount them agree.

A CA of the release (Secret "<fullname>-ca") signs the coordinator's
certificate (its Service's DNS names) and the client certificates of the
operator and the workers. Each Secret found in the cluster is kept as it is
until its certificate has less than tls.renewBeforeDays left (annotation
paci.dev/not-after, Unix seconds); then this render makes a new one from the
same CA. A CA that nears its end is made anew, and every certificate with it.
`helm template` and client-side dry runs see no cluster: they show new ones.

A dict: ca, coordinator, operator, and "worker:<namespace>" and
"tenant:<namespace>" for each of paci.workerNamespaces, each {crt, key, notAfter}.
*/}}
{{- define "paci.generatedTls" -}}
{{- if not (hasKey .Values "_paciTls") }}
{{- $now := now | unixEpoch | int64 }}
{{- $renewBy := add $now (mul .Values.tls.renewBeforeDays 86400) }}
{{- $fullname := include "paci.fullname" . }}
{{- $coordinator := include "paci.coordinatorName" . }}
{{- $ns := .Release.Namespace }}
{{- $state := dict }}
{{- /* The CA. */}}
{{- $old := lookup "v1" "Secret" $ns (include "paci.caSecretName" .) }}
{{- $oldNotAfter := include "paci.notAfter" $old | int64 }}
{{- $ca := dict }}
{{- $newCa := true }}
{{- if and $old (gt $oldNotAfter $renewBy) }}
{{- $ca = buildCustomCert (index $old.data "tls.crt") (index $old.data "tls.key") }}
{{- $_ := set $state "ca" (dict "crt" $ca.Cert "key" $ca.Key "notAfter" $oldNotAfter) }}
{{- $newCa = false }}
{{- else }}
{{- $ca = genCA (printf "%s CA" $fullname) (int .Values.tls.caValidityDays) }}
{{- $_ := set $state "ca" (dict "crt" $ca.Cert "key" $ca.Key "notAfter" (add $now (mul .Values.tls.caValidityDays 86400))) }}
{{- end }}
{{- /* The certificates it signs: Secret name, namespace, common name, DNS names. */}}
{{- /* The operator's and the workers' common names are the identities the
coordinator knows them by (common/peer_identity.h): a worker's binds it to
its namespace. */}}
{{- $leaves := dict
      "coordinator" (list (include "paci.tlsSecretName" .) $ns $coordinator (list $coordinator (printf "%s.%s" $coordinator $ns) (printf "%s.%s.svc" $coordinator $ns) (printf "%s.%s.svc.cluster.local" $coordinator $ns)))
      "operator" (list (include "paci.operatorClientSecretName" .) $ns "system:paci:operator" list) }}
{{- range (include "paci.workerNamespaces" . | fromJsonArray) }}
{{- /* paci-worker.<namespace>: the name the workers check each other's certificates
for on the stage links (the operator's --worker_link_tls). */}}
{{- $_ := set $leaves (printf "worker:%s" .) (list (include "paci.workerSecretName" $) . (printf "system:paci:worker:%s" .) (list (printf "paci-worker.%s" .))) }}
{{- /* The namespace's users (pacictl): they see and cancel its jobs only. */}}
{{- $_ := set $leaves (printf "tenant:%s" .) (list (include "paci.clientSecretName" $) . (printf "system:paci:tenant:%s" .) list) }}
{{- end }}
{{- range $who, $leaf := $leaves }}
{{- $names := join "," (index $leaf 3) }}
{{- $old := lookup "v1" "Secret" (index $leaf 1) (index $leaf 0) }}
{{- $oldNotAfter := include "paci.notAfter" $old | int64 }}
{{- /* Kept while it has time left, is of this CA and names what it should. */}}
{{- if and (not $newCa) $old (gt $oldNotAfter $renewBy) (eq (index $old.data "ca.crt" | b64dec) $ca.Cert) (eq (include "paci.dnsNames" $old) $names) }}
{{- $_ := set $state $who (dict "crt" (index $old.data "tls.crt" | b64dec) "key" (index $old.data "tls.key" | b64dec) "notAfter" $oldNotAfter "names" $names) }}
{{- else }}
{{- $cert := genSignedCert (index $leaf 2) nil (index $leaf 3) (int $.Values.tls.validityDays) $ca }}
{{- $_ := set $state $who (dict "crt" $cert.Cert "key" $cert.Key "notAfter" (add $now (mul $.Values.tls.validityDays 86400)) "names" $names) }}
{{- end }}
{{- end }}
{{- $_ := set .Values "_paciTls" $state }}
{{- end }}
{{- toJson .Values._paciTls }}
{{- end }}

{{/* A Secret's paci.dev/not-after (Unix seconds), 0 for none or no Secret. */}}
{{- define "paci.notAfter" -}}
{{- if . }}{{ ((.metadata).annotations | default dict) | dig "paci.dev/not-after" "0" }}{{ else }}0{{ end }}
{{- end }}

{{/* A Secret's paci.dev/dns-names (the DNS names its certificate was made for, comma-separated), "" for none or no Secret. */}}
{{- define "paci.dnsNames" -}}
{{- if . }}{{ ((.metadata).annotations | default dict) | dig "paci.dev/dns-names" "" }}{{ end }}
{{- end }}

{{/* A checksum of the certificates a pod mounts (its template changes when they do). Call with (list $ "coordinator"). */}}
{{- define "paci.tlsChecksum" -}}
{{- $root := index . 0 }}
{{- $tls := include "paci.generatedTls" $root | fromJson }}
{{- printf "%s%s" (get (get $tls "ca") "crt") (get (get $tls (index . 1)) "crt") | sha256sum }}
{{- end }}

{{/*
The namespaces TrainingJobs run in, as a JSON list: operator.watchNamespace
and tls.workerNamespaces. Each gets the worker and client Secrets and the
worker ServiceAccount; the operator may make pods there (rbac.yaml) and
nowhere else. Never the release's own namespace: it holds the CA's key, the
operator's client certificate and the worker-token key, which a TrainingJob
author must not reach (the operator also refuses TrainingJobs there,
--reserved_namespaces).
*/}}
{{- define "paci.workerNamespaces" -}}
{{- $namespaces := .Values.tls.workerNamespaces }}
{{- with .Values.operator.watchNamespace }}
{{- $namespaces = prepend $namespaces . }}
{{- end }}
{{- if has .Release.Namespace $namespaces }}
{{- fail (printf "operator.watchNamespace and tls.workerNamespaces must not name the release's namespace %q: it holds the release's CA and the operator's Secrets, which no TrainingJob may reach; install the release in a namespace of its own (e.g. paci-system)" .Release.Namespace) }}
{{- end }}
{{- $namespaces | uniq | toJson }}
{{- end }}

{{- define "paci.caSecretName" -}}
{{- include "paci.componentName" (list . "ca") }}
{{- end }}

{{/*
The Secret holding the key the operator derives each TrainingJob's worker
token from (templates/workertokens.yaml).
*/}}
{{- define "paci.workerTokenKeySecretName" -}}
{{ include "paci.operatorName" . }}-worker-token-key
{{- end }}
