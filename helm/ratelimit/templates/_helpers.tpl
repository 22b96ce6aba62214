{{- define "ratelimit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ratelimit.fullname" -}}
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

{{- define "ratelimit.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ratelimit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "ratelimit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ratelimit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- /*
The in-chart Redis has labels of its own, so that no selector of the
service (its Deployment, Service, PodDisruptionBudget, NetworkPolicy,
ServiceMonitor) selects the Redis pod.
*/ -}}
{{- define "ratelimit.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "ratelimit.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{- define "ratelimit.redisLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ratelimit.redisSelectorLabels" . }}
app.kubernetes.io/part-of: {{ include "ratelimit.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "ratelimit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ratelimit.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ratelimit.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "ratelimit.configMapName" -}}
{{- default (printf "%s-config" (include "ratelimit.fullname" .)) .Values.config.existingConfigMap }}
{{- end }}

{{- define "ratelimit.redisUrl" -}}
{{- if .Values.redis.deploy }}
{{- printf "%s-redis:6379" (include "ratelimit.fullname" .) }}
{{- else }}
{{- required "redis.url is required with backend: redis (or set redis.deploy: true)" .Values.redis.url }}
{{- end }}
{{- end }}

{{- define "ratelimit.securityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}
