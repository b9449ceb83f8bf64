{{/* The labels every object carries. */}}
{{- define "tollgate.labels" -}}
app.kubernetes.io/name: tollgate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels that select Tollgate's pods. */}}
{{- define "tollgate.selector" -}}
app.kubernetes.io/name: tollgate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The store URL: the value, else the demo Redis, else memory. */}}
{{- define "tollgate.store" -}}
{{- if .Values.store -}}
{{ .Values.store }}
{{- else if .Values.redis.enabled -}}
redis://{{ .Release.Name }}-redis.{{ .Release.Namespace }}.svc.cluster.local:6379
{{- else -}}
memory
{{- end -}}
{{- end -}}
