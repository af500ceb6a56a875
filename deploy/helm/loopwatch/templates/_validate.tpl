{{/* Combinations that cannot work stop the render with a message naming the value. */}}
{{- define "loopwatch.validate" -}}
{{- if not (has .Values.mode (list "gateway" "sidecar")) }}
{{- fail (printf "mode: %q is neither \"gateway\" nor \"sidecar\"" .Values.mode) }}
{{- end }}
{{- if not (regexMatch ":[0-9]+$" .Values.admin.listen) }}
{{- fail (printf "admin.listen: %q is not HOST:PORT" .Values.admin.listen) }}
{{- end }}
{{- if ne (regexFind "[0-9]+$" .Values.admin.listen) (toString .Values.admin.port) }}
{{- fail (printf "admin.port: %v is not the port of admin.listen %q" .Values.admin.port .Values.admin.listen) }}
{{- end }}
{{- if and (not .Values.admin.requireToken) (not (include "loopwatch.adminOnLoopback" .)) }}
{{- fail (printf "admin.requireToken: false with admin.listen %q beyond loopback would leave run data and signals open to anyone who reaches the pod; keep the token or listen on 127.0.0.1" .Values.admin.listen) }}
{{- end }}
{{- if and .Values.secret.create (or (not .Values.secret.fingerprintKey) (and .Values.admin.requireToken (not .Values.secret.adminToken))) }}
{{- fail "secret.create: set secret.fingerprintKey and secret.adminToken (or create the Secret yourself and leave secret.create false)" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") (gt (len .Values.sidecar.adminPortName) 15) }}
{{- fail (printf "sidecar.adminPortName: %q is longer than the 15 characters a port name may have" .Values.sidecar.adminPortName) }}
{{- end }}
{{- with .Values.gateway.autoscaling }}
{{- if and .enabled (gt (int .minReplicas) (int .maxReplicas)) }}
{{- fail (printf "gateway.autoscaling: minReplicas %v is above maxReplicas %v" .minReplicas .maxReplicas) }}
{{- end }}
{{- end }}
{{- end }}
