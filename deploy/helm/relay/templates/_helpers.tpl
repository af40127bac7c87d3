{{- define "relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "relay.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "relay.headless" -}}
{{- printf "%s-headless" (include "relay.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "relay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The number of pods, after checking that the settings agree. */}}
{{- define "relay.replicas" -}}
{{- $v := .Values -}}
{{- if and $v.cluster.enabled $v.externalNats.enabled -}}
{{- fail "cluster.enabled and externalNats.enabled exclude each other: the embedded servers form the cluster, or relay uses yours" -}}
{{- end -}}
{{- if $v.cluster.enabled -}}
{{- if not (has (int $v.cluster.replicas) (list 3 5)) -}}
{{- fail (printf "cluster.replicas is %v: a NATS cluster of embedded servers has 3 or 5 (an odd number keeps a quorum)" $v.cluster.replicas) -}}
{{- end -}}
{{- if gt (int $v.podDisruptionBudget.maxUnavailable) 1 -}}
{{- fail "podDisruptionBudget.maxUnavailable above 1 in a cluster can take 2 of a stream's 3 replicas, and its quorum" -}}
{{- end -}}
{{- if not $v.cluster.existingSecret -}}
{{- fail "cluster.existingSecret: name a Secret holding the password the embedded servers' routes authenticate with (kubectl create secret generic relay-cluster --from-literal=secret=\"$(openssl rand -base64 32)\"); without one any pod that reaches the cluster port could join and read every event" -}}
{{- end -}}
{{- int $v.cluster.replicas -}}
{{- else if $v.externalNats.enabled -}}
{{- if and (not $v.externalNats.url) (not (and $v.externalNats.existingSecret $v.externalNats.urlKey)) -}}
{{- fail "externalNats needs its URL: externalNats.url, or externalNats.existingSecret and externalNats.urlKey" -}}
{{- end -}}
{{- if contains "@" $v.externalNats.url -}}
{{- fail "externalNats.url carries credentials, which would be written into the pod's spec: put the URL in a Secret (externalNats.existingSecret, urlKey) and leave externalNats.url empty" -}}
{{- end -}}
{{- if lt (int $v.replicas) 1 -}}
{{- fail "replicas must be at least 1" -}}
{{- end -}}
{{- int $v.replicas -}}
{{- else -}}
{{- if ne (int $v.replicas) 1 -}}
{{- fail (printf "replicas is %v, but relay's embedded NATS server runs alone: set cluster.enabled for 3 or 5 pods, or externalNats.enabled for N stateless relays" $v.replicas) -}}
{{- end -}}
1
{{- end -}}
{{- end -}}

{{- define "relay.image" -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end -}}

{{/* The pod's spec, shared by the StatefulSet and the Deployment. */}}
{{- define "relay.podSpec" -}}
{{- $v := .Values -}}
{{- $full := include "relay.fullname" . -}}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
serviceAccountName: {{ $full }}
automountServiceAccountToken: false
terminationGracePeriodSeconds: {{ add (int $v.shutdownGraceSeconds) 20 }}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
containers:
  - name: relay
    image: {{ include "relay.image" . }}
    imagePullPolicy: {{ $v.image.pullPolicy }}
    args:
      - run
      - --metrics-addr=0.0.0.0:{{ $v.metrics.port }}
      - --shutdown-grace={{ int $v.shutdownGraceSeconds }}s
      {{- if $v.externalNats.enabled }}
      - --replicas={{ $v.externalNats.streamReplicas }}
      {{- else }}
      - --data-dir=/data
      - --listen=127.0.0.1:4222
      {{- end }}
      {{- if $v.cluster.enabled }}
      - --server-name=$(POD_NAME)
      - --cluster-name={{ default $full $v.cluster.name }}
      - --cluster-listen=0.0.0.0:{{ $v.cluster.port }}
      {{- $n := int $v.cluster.replicas }}
      {{- range $i := until $n }}
      - --routes=nats://{{ $full }}-{{ $i }}.{{ include "relay.headless" $ }}.{{ $.Release.Namespace }}.svc.{{ $v.clusterDomain }}:{{ $v.cluster.port }}
      {{- end }}
      - --replicas=3
      {{- end }}
      {{- if $v.api.enabled }}
      - --api-addr=0.0.0.0:{{ $v.api.port }}
      {{- end }}
      {{- if $v.redis.existingSecret }}
      - --redis-mode={{ $v.redis.mode }}
      {{- end }}
      {{- range $v.extraArgs }}
      - {{ . | quote }}
      {{- end }}
    env:
      - name: POD_NAME
        valueFrom:
          fieldRef:
            fieldPath: metadata.name
      {{- if $v.externalNats.enabled }}
      {{- if $v.externalNats.url }}
      - name: RELAY_NATS_URL
        value: {{ $v.externalNats.url | quote }}
      {{- end }}
      {{- with $v.externalNats.existingSecret }}
      {{- range $env, $key := dict "RELAY_NATS_URL" $v.externalNats.urlKey "RELAY_NATS_USER" $v.externalNats.userKey "RELAY_NATS_PASSWORD" $v.externalNats.passwordKey "RELAY_NATS_TOKEN" $v.externalNats.tokenKey }}
      {{- if and $key (not (and (eq $env "RELAY_NATS_URL") $v.externalNats.url)) }}
      - name: {{ $env }}
        valueFrom:
          secretKeyRef:
            name: {{ $v.externalNats.existingSecret }}
            key: {{ $key }}
      {{- end }}
      {{- end }}
      {{- if $v.externalNats.credsKey }}
      - name: RELAY_NATS_CREDS
        value: /etc/relay/nats/nats.creds
      {{- end }}
      {{- end }}
      {{- end }}
      {{- if $v.cluster.enabled }}
      - name: RELAY_CLUSTER_SECRET
        valueFrom:
          secretKeyRef:
            name: {{ $v.cluster.existingSecret }}
            key: {{ $v.cluster.secretKey }}
      {{- end }}
      {{- if $v.secretKey.existingSecret }}
      - name: RELAY_SECRET_KEY_FILE
        value: /etc/relay/secret-key/key
      {{- if $v.secretKey.previousKey }}
      - name: RELAY_PREVIOUS_SECRET_KEY_FILE
        value: /etc/relay/secret-key/previous-key
      {{- end }}
      {{- end }}
      {{- if $v.redis.existingSecret }}
      - name: RELAY_REDIS_URL
        valueFrom:
          secretKeyRef:
            name: {{ $v.redis.existingSecret }}
            key: {{ $v.redis.urlKey }}
      {{- end }}
      {{- with $v.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    ports:
      - name: metrics
        containerPort: {{ $v.metrics.port }}
      {{- if $v.api.enabled }}
      - name: http
        containerPort: {{ $v.api.port }}
      {{- end }}
      {{- if $v.cluster.enabled }}
      - name: cluster
        containerPort: {{ $v.cluster.port }}
      {{- end }}
    startupProbe:
      httpGet:
        path: /healthz
        port: metrics
      {{- toYaml $v.probes.startup | nindent 6 }}
    livenessProbe:
      httpGet:
        path: /healthz
        port: metrics
      {{- toYaml $v.probes.liveness | nindent 6 }}
    readinessProbe:
      httpGet:
        path: /readyz
        port: metrics
      {{- toYaml $v.probes.readiness | nindent 6 }}
    resources:
      {{- toYaml $v.resources | nindent 6 }}
    securityContext:
      {{- toYaml $v.securityContext | nindent 6 }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
      {{- if not $v.externalNats.enabled }}
      - name: data
        mountPath: /data
      {{- end }}
      {{- if $v.secretKey.existingSecret }}
      - name: secret-key
        mountPath: /etc/relay/secret-key
        readOnly: true
      {{- end }}
      {{- if and $v.externalNats.enabled $v.externalNats.existingSecret $v.externalNats.credsKey }}
      - name: nats-creds
        mountPath: /etc/relay/nats
        readOnly: true
      {{- end }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
  {{- if $v.secretKey.existingSecret }}
  - name: secret-key
    secret:
      secretName: {{ $v.secretKey.existingSecret }}
      defaultMode: 0440
      items:
        - key: {{ $v.secretKey.key }}
          path: key
        {{- if $v.secretKey.previousKey }}
        - key: {{ $v.secretKey.previousKey }}
          path: previous-key
        {{- end }}
  {{- end }}
  {{- if and $v.externalNats.enabled $v.externalNats.existingSecret $v.externalNats.credsKey }}
  - name: nats-creds
    secret:
      secretName: {{ $v.externalNats.existingSecret }}
      defaultMode: 0440
      items:
        - key: {{ $v.externalNats.credsKey }}
          path: nats.creds
  {{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.affinity }}
affinity:
  {{- toYaml $v.affinity | nindent 2 }}
{{- else if or $v.cluster.enabled $v.externalNats.enabled }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "relay.selectorLabels" . | nindent 14 }}
{{- end }}
{{- end -}}
