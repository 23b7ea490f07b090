{{/*
The release's name for its objects: the release name when it already says
shardcron (`helm install shardcron ...` gives the names deploy/ uses),
otherwise release-shardcron. Cluster-scoped objects carry it too, so two
releases never share a ClusterRole.
*/}}
{{- define "shardcron.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "shardcron.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* deploy/'s label on every object, and Helm's. */}}
{{- define "shardcron.labels" -}}
{{ include "shardcron.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The labels of the controller's own objects: its pods, and what selects them. */}}
{{- define "shardcron.controllerLabels" -}}
{{ include "shardcron.labels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{/* The kinds this release serves, checked (values.schema.json checks them too, unless skipped). */}}
{{- define "shardcron.kinds" -}}
{{- $kinds := uniq (.Values.cronjobKinds | default list) -}}
{{- if not $kinds -}}
{{- fail "cronjobKinds: name batch, shardcron or both" -}}
{{- end -}}
{{- range $kinds -}}
{{- if not (has . (list "batch" "shardcron")) -}}
{{- fail (printf "cronjobKinds: %q is not batch or shardcron" .) -}}
{{- end -}}
{{- end -}}
{{- /* batch first, as the controller lists them. */ -}}
{{- $ordered := list -}}
{{- range (list "batch" "shardcron") -}}
{{- if has . $kinds -}}
{{- $ordered = append $ordered . -}}
{{- end -}}
{{- end -}}
{{- join "," $ordered -}}
{{- end -}}
