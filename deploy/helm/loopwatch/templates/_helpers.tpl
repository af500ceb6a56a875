{{/* Names, labels and the loopwatch container shared by the gateway Deployment and the
sidecar template. */}}

{{- define "loopwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "loopwatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "loopwatch.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "loopwatch.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "loopwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "loopwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "loopwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "loopwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: loopwatch
app.kubernetes.io/component: {{ .Values.mode }}
{{- end }}

{{- define "loopwatch.secretName" -}}
{{- default (include "loopwatch.fullname" .) .Values.secret.name }}
{{- end }}

{{- define "loopwatch.configMapName" -}}
{{- printf "%s-config" (include "loopwatch.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "loopwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* True ("true") when the admin listener is on loopback: nothing outside the pod reaches
it, so no probes, monitors or admin ingress. */}}
{{- define "loopwatch.adminOnLoopback" -}}
{{- $host := regexReplaceAll ":[0-9]+$" .Values.admin.listen "" }}
{{- if or (hasPrefix "127." $host) (eq $host "[::1]") (eq $host "localhost") }}true{{ end }}
{{- end }}

{{/* The name of the admin port: distinctive in a sidecar, "admin" in the gateway. */}}
{{- define "loopwatch.adminPortName" -}}
{{- if eq .Values.mode "sidecar" }}{{ .Values.sidecar.adminPortName }}{{ else }}admin{{ end }}
{{- end }}

{{/* The loopwatch container. In sidecar mode a native sidecar (restartPolicy: Always, for
initContainers) with loopback receivers; in gateway mode a plain container. */}}
{{- define "loopwatch.container" -}}
{{- $sidecar := eq .Values.mode "sidecar" -}}
{{- $adminPort := include "loopwatch.adminPortName" . -}}
name: loopwatch
image: {{ include "loopwatch.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- if $sidecar }}
# Native sidecar: started before the agent container, stopped after it has exited, so the
# agent's final span flush is still accepted and forwarded.
restartPolicy: Always
{{- end }}
args: ["serve", "--config", "/etc/loopwatch/config.toml"]
env:
  - name: LOOPWATCH_ADMIN__LISTEN
    value: {{ .Values.admin.listen | quote }}
  {{- if $sidecar }}
  - name: LOOPWATCH_RECEIVER__GRPC_LISTEN
    value: {{ .Values.sidecar.grpcListen | quote }}
  - name: LOOPWATCH_RECEIVER__HTTP_LISTEN
    value: {{ .Values.sidecar.httpListen | quote }}
  {{- else }}
  - name: LOOPWATCH_EXPORTER__QUEUE_CAPACITY
    value: {{ .Values.gateway.queueCapacity | quote }}
  {{- end }}
  {{- with .Values.exporter.endpoint }}
  - name: LOOPWATCH_EXPORTER__ENDPOINT
    value: {{ . | quote }}
  {{- end }}
  {{- with .Values.signals.redisUrl }}
  - name: LOOPWATCH_SIGNALS__REDIS__URL
    value: {{ . | quote }}
  {{- end }}
  {{- with .Values.signals.natsUrl }}
  - name: LOOPWATCH_SIGNALS__NATS__URL
    value: {{ . | quote }}
  {{- end }}
  {{- range $name, $value := .Values.env }}
  - name: {{ $name }}
    value: {{ $value | toString | quote }}
  {{- end }}
  - name: LOOPWATCH_DETECTION__FINGERPRINT_KEY
    valueFrom:
      secretKeyRef:
        name: {{ include "loopwatch.secretName" . }}
        key: {{ .Values.secret.fingerprintKeyKey }}
        {{- if $sidecar }}
        # Optional by default: a missing key never keeps the agent from starting.
        optional: {{ .Values.sidecar.fingerprintKeyOptional }}
        {{- else }}
        # Required: one key for all replicas, so their fingerprints agree.
        optional: false
        {{- end }}
  {{- if .Values.admin.requireToken }}
  # /metrics, /v1/…, /ui and Signals/Watch need it; /healthz and /readyz do not.
  - name: LOOPWATCH_ADMIN__AUTH_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ include "loopwatch.secretName" . }}
        key: {{ .Values.secret.adminTokenKey }}
        optional: false
  {{- end }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
ports:
  {{- if not $sidecar }}
  - {name: otlp-grpc, containerPort: 4317}
  - {name: otlp-http, containerPort: 4318}
  {{- end }}
  - {name: {{ $adminPort }}, containerPort: {{ .Values.admin.port }}}
{{- if not (include "loopwatch.adminOnLoopback" .) }}
startupProbe:
  httpGet: {path: /healthz, port: {{ $adminPort }}}
  periodSeconds: {{ .Values.probes.startup.periodSeconds }}
  failureThreshold: {{ .Values.probes.startup.failureThreshold }}
livenessProbe:
  httpGet: {path: /healthz, port: {{ $adminPort }}}
  periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
  failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
{{- if .Values.probes.readiness.enabled }}
readinessProbe:
  httpGet: {path: /readyz, port: {{ $adminPort }}}
  periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
  failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
{{- end }}
{{- end }}
resources:
  {{- toYaml (ternary .Values.sidecar.resources .Values.gateway.resources $sidecar) | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - {name: loopwatch-config, mountPath: /etc/loopwatch, readOnly: true}
{{- end }}

{{/* The pod volume holding config.toml. */}}
{{- define "loopwatch.configVolume" -}}
name: loopwatch-config
configMap:
  name: {{ include "loopwatch.configMapName" . }}
{{- end }}
