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

{{/*
Where the replicas' serving certificate comes from (values: tls): the value
given, or, left empty, "generated" when a monitor or the aggregated API of
this release verifies it, else "selfSigned" (deploy/'s).
*/}}
{{- define "shardcron.tlsSource" -}}
{{- $m := .Values.monitoring -}}
{{- $source := .Values.tls.source -}}
{{- if not $source -}}
{{- $verified := or $m.serviceMonitor.enabled $m.podMonitor.enabled .Values.aggregatedApi.enabled -}}
{{- $source = ternary "generated" "selfSigned" $verified -}}
{{- end -}}
{{- if not (has $source (list "generated" "secret" "selfSigned")) -}}
{{- fail (printf "tls.source: %q is not generated, secret or selfSigned" $source) -}}
{{- end -}}
{{- if and (eq $source "secret") (not .Values.tls.secretName) -}}
{{- fail "tls.source secret: name the kubernetes.io/tls Secret (with ca.crt) in tls.secretName" -}}
{{- end -}}
{{- $source -}}
{{- end -}}

{{/* The Secret the replicas' certificate, key and CA are mounted from. */}}
{{- define "shardcron.tlsSecretName" -}}
{{- if eq (include "shardcron.tlsSource" .) "secret" -}}
{{- .Values.tls.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "shardcron.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
The names a client checks on the replicas' certificate: the governing
Service's (a scrape's serverName), the aggregated API's Service's, and
localhost and 127.0.0.1 (the CLI's port-forward, as on a self-signed one).
*/}}
{{- define "shardcron.tlsServerName" -}}
{{- printf "%s.%s.svc" (include "shardcron.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/*
The generated CA and certificate (tls.source generated), as JSON with the
Secret's keys, base64: the Secret's data when it exists already (an upgrade
keeps them; delete it to renew), else made once per render (memoised in
.Values, so the Secret, the APIService and the pods' checksum agree).
*/}}
{{- define "shardcron.generatedTls" -}}
{{- if not .Values.tls.generatedOnce -}}
{{- $name := include "shardcron.fullname" . -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "shardcron.tlsSecretName" .) -}}
{{- $data := dict -}}
{{- if and $existing (hasKey ($existing.data | default dict) "ca.crt") -}}
{{- $data = pick $existing.data "ca.crt" "tls.crt" "tls.key" -}}
{{- else -}}
{{- $days := int .Values.tls.validityDays -}}
{{- $ca := genCA (printf "%s-ca" $name) $days -}}
{{- $names := list (include "shardcron.tlsServerName" .) (printf "%s-admin.%s.svc" $name .Release.Namespace) "localhost" -}}
{{- $cert := genSignedCert $name (list "127.0.0.1") $names $days $ca -}}
{{- $data = dict "ca.crt" ($ca.Cert | b64enc) "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) -}}
{{- end -}}
{{- $_ := set .Values.tls "generatedOnce" $data -}}
{{- end -}}
{{- toJson .Values.tls.generatedOnce -}}
{{- end -}}

{{/*
Both monitors' tlsConfig: monitoring.serviceMonitor.tlsConfig when given;
else the CA of the replicas' certificate (its Secret's ca.crt, which the
monitor's namespace holds) and the name it carries; with self-signed
certificates, unverified.
*/}}
{{- define "shardcron.scrapeTls" -}}
{{- $tls := include "shardcron.tlsSource" . -}}
{{- if .Values.monitoring.serviceMonitor.tlsConfig -}}
{{- toYaml .Values.monitoring.serviceMonitor.tlsConfig -}}
{{- else if eq $tls "selfSigned" -}}
insecureSkipVerify: true
{{- else -}}
ca:
  secret:
    name: {{ include "shardcron.tlsSecretName" . }}
    key: ca.crt
serverName: {{ include "shardcron.tlsServerName" . }}
{{- end -}}
{{- end -}}
