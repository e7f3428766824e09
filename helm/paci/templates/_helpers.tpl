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

{{/* The namespace TrainingJobs (and so worker pods) live in, when the operator watches one. */}}
{{- define "paci.workerNamespace" -}}
{{- default .Release.Namespace .Values.operator.watchNamespace }}
{{- end }}

{{/* TLS Secrets: the values, or names derived from the release. */}}
{{- define "paci.tlsSecretName" -}}
{{- .Values.tls.secretName | default (include "paci.componentName" (list . "coordinator-tls")) }}
{{- end }}

{{- define "paci.operatorClientSecretName" -}}
{{- .Values.tls.operatorClientSecretName | default (include "paci.componentName" (list . "operator-client-tls")) }}
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
