{{/* The release's full name, at most 63 characters. */}}
{{- define "queuebox.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "queuebox.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "queuebox.labels" -}}
{{ include "queuebox.selectorLabels" . }}
app.kubernetes.io/version: {{ include "queuebox.tag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "queuebox.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{- define "queuebox.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "queuebox.tag" .) -}}
{{- end -}}

{{/* The Secret of the pods' environment: the chart's, an existing one, or none. */}}
{{- define "queuebox.secretName" -}}
{{- if .Values.secret.create -}}
{{- .Values.secret.name | default (include "queuebox.fullname" .) -}}
{{- else -}}
{{- .Values.secret.name -}}
{{- end -}}
{{- end -}}

{{- define "queuebox.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "queuebox.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/*
The management port: the port of server.listen in the config. The probes
and the Service use it, so they cannot disagree with the relay. A loopback
or missing listen address fails the render: the kubelet could not reach it.
*/}}
{{- define "queuebox.port" -}}
{{- $cfg := .Values.config | fromYaml -}}
{{- if hasKey $cfg "Error" -}}
{{- fail (printf "config: not YAML: %s" $cfg.Error) -}}
{{- end -}}
{{- $listen := dig "server" "listen" "127.0.0.1:9090" $cfg | toString -}}
{{- $parts := regexFind "^(.*):([0-9]+)$" $listen -}}
{{- if not $parts -}}
{{- fail (printf "config: server.listen %q: want host:port, e.g. 0.0.0.0:9090 (the probes and /metrics need it)" $listen) -}}
{{- end -}}
{{- $host := regexReplaceAll "^(.*):([0-9]+)$" $listen "${1}" -}}
{{- if or (hasPrefix "127." $host) (eq $host "localhost") (eq $host "[::1]") -}}
{{- fail (printf "config: server.listen %q is a loopback address: the kubelet's probes cannot reach it; use 0.0.0.0:PORT" $listen) -}}
{{- end -}}
{{- regexReplaceAll "^(.*):([0-9]+)$" $listen "${2}" -}}
{{- end -}}

{{/*
The inbox's ingest port: the port of inbox.listen in the config, empty when
the config takes no webhooks. The container and the Service expose it as
"ingest". A loopback address fails the render: the Service could not reach it.
*/}}
{{- define "queuebox.ingestPort" -}}
{{- $cfg := .Values.config | fromYaml -}}
{{- $listen := dig "inbox" "listen" "" $cfg | toString -}}
{{- if $listen -}}
{{- if not (regexMatch "^(.*):([0-9]+)$" $listen) -}}
{{- fail (printf "config: inbox.listen %q: want host:port, e.g. 0.0.0.0:8081" $listen) -}}
{{- end -}}
{{- $host := regexReplaceAll "^(.*):([0-9]+)$" $listen "${1}" -}}
{{- if or (hasPrefix "127." $host) (eq $host "localhost") (eq $host "[::1]") -}}
{{- fail (printf "config: inbox.listen %q is a loopback address: the Service cannot reach it; use 0.0.0.0:PORT" $listen) -}}
{{- end -}}
{{- regexReplaceAll "^(.*):([0-9]+)$" $listen "${2}" -}}
{{- end -}}
{{- end -}}

{{/* The pod's security context: an unprivileged user, the runtime's seccomp profile. */}}
{{- define "queuebox.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The container's: nothing to write, nothing to gain. */}}
{{- define "queuebox.securityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
