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

{{/* Whether a Redis password is configured. */}}
{{- define "tollgate.redisAuth" -}}
{{- if or .Values.redis.auth.password .Values.redis.auth.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* The Secret holding the Redis password, and its key. */}}
{{- define "tollgate.redisSecretName" -}}
{{- .Values.redis.auth.existingSecret | default (printf "%s-redis-auth" .Release.Name) -}}
{{- end -}}
{{- define "tollgate.redisSecretKey" -}}
{{- if .Values.redis.auth.existingSecret -}}{{ .Values.redis.auth.existingSecretKey }}{{- else -}}password{{- end -}}
{{- end -}}

{{/* The password as an EnvVar named by the argument's first element. */}}
{{- define "tollgate.redisPasswordEnv" -}}
- name: {{ index . 0 }}
  valueFrom:
    secretKeyRef:
      name: {{ include "tollgate.redisSecretName" (index . 1) }}
      key: {{ include "tollgate.redisSecretKey" (index . 1) }}
{{- end -}}

{{/*
With a Redis password: the store as upstream's variables (REDIS_TYPE,
REDIS_SOCKET_TYPE, REDIS_URL, REDIS_TLS) and REDIS_AUTH as
`username:password`, the password read from the Secret by Kubernetes'
$(VAR) expansion, so no value of the Secret is in the Deployment. The
store URL must then carry no credentials of its own.
*/}}
{{- define "tollgate.redisAuthEnv" -}}
{{- $store := include "tollgate.store" . -}}
{{- $type := "single" -}}
{{- $tls := "false" -}}
{{- $rest := "" -}}
{{- if hasPrefix "redis://" $store -}}
{{- $rest = trimPrefix "redis://" $store -}}
{{- else if hasPrefix "rediss://" $store -}}
{{- $rest = trimPrefix "rediss://" $store -}}
{{- $tls = "true" -}}
{{- else if regexMatch "^rediss?-cluster://" $store -}}
{{- $rest = regexReplaceAll "^rediss?-cluster://" $store "" -}}
{{- $type = "cluster" -}}
{{- else if regexMatch "^rediss?-sentinel://" $store -}}
{{- $rest = regexReplaceAll "^([^@]*)@" (regexReplaceAll "^rediss?-sentinel://" $store "") "${1}," -}}
{{- $type = "sentinel" -}}
{{- else -}}
{{- fail (printf "redis.auth needs a redis://, rediss://, redis(s)-cluster:// or redis(s)-sentinel:// store, not %q" $store) -}}
{{- end -}}
{{- if regexMatch "^rediss-(cluster|sentinel)://" $store -}}
{{- $tls = "true" -}}
{{- end -}}
{{- if contains "@" $rest -}}
{{- fail "store must not hold credentials (user:password@) when redis.auth is set: give the password in redis.auth only" -}}
{{- end -}}
{{ include "tollgate.redisPasswordEnv" (list "TOLLGATE_REDIS_PASSWORD" .) }}
- name: REDIS_AUTH
  value: "{{ .Values.redis.auth.username }}:$(TOLLGATE_REDIS_PASSWORD)"
- name: REDIS_TYPE
  value: {{ $type }}
- name: REDIS_SOCKET_TYPE
  value: tcp
- name: REDIS_URL
  value: {{ $rest | quote }}
- name: REDIS_TLS
  value: {{ $tls | quote }}
{{- end -}}
