{{/* Names ------------------------------------------------------------------------------------ */}}

{{- define "berth.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "berth.fullname" -}}
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

{{- define "berth.operatorName" -}}
{{- printf "%s-operator" (include "berth.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "berth.redisName" -}}
{{- printf "%s-redis" (include "berth.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "berth.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels ----------------------------------------------------------------------------------- */}}

{{- define "berth.labels" -}}
helm.sh/chart: {{ include "berth.chart" . }}
app.kubernetes.io/name: {{ include "berth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: berth
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "berth.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "berth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "berth.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "berth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{/* Values with defaults ---------------------------------------------------------------------- */}}

{{- define "berth.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "berth.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "berth.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The image session pods and LaneWorkers run unless a LaneWorker names its own. */}}
{{- define "berth.runtimeImage" -}}
{{- if .Values.sessions.image }}
{{- .Values.sessions.image }}
{{- else }}
{{- include "berth.image" . }}
{{- end }}
{{- end }}

{{/* Redis URL: the bundled Redis when enabled, else redis.url. */}}
{{- define "berth.redisURL" -}}
{{- if .Values.redis.enabled }}
{{- printf "redis://%s.%s.svc:%d/0" (include "berth.redisName" .) .Release.Namespace (int .Values.redis.service.port) }}
{{- else }}
{{- $u := urlParse .Values.redis.url }}
{{- if and .Values.redis.cluster (not (hasSuffix "+cluster" $u.scheme)) }}
{{- printf "%s+cluster%s" $u.scheme (trimPrefix $u.scheme .Values.redis.url) }}
{{- else }}
{{- .Values.redis.url }}
{{- end }}
{{- end }}
{{- end }}

{{/* Redis ACL users (files/redis/users.acl.tmpl): the Secret with their passwords, when the
     chart knows one (the bundled Redis always; an external Redis with redis.auth.existingSecret
     or redis.auth.passwords). */}}
{{- define "berth.redisAuthSecretName" -}}
{{- if .Values.redis.auth.existingSecret }}
{{- .Values.redis.auth.existingSecret }}
{{- else if or .Values.redis.enabled .Values.redis.auth.passwords.session }}
{{- printf "%s-auth" (include "berth.redisName" .) }}
{{- end }}
{{- end }}

{{/* The Secret whose ca.crt the operator mounts at berth.redisCADir: the bundled Redis's TLS
     Secret, or for an external Redis <redis>-ca made from redis.tls.caCert; empty: none. */}}
{{- define "berth.redisCASecret" -}}
{{- if and .Values.redis.enabled .Values.redis.tls.enabled }}
{{- .Values.redis.tls.secretName }}
{{- else if and (not .Values.redis.enabled) .Values.redis.tls.caCert }}
{{- printf "%s-ca" (include "berth.redisName" .) }}
{{- end }}
{{- end }}

{{/* Where the CA of the bundled Redis's TLS certificate is mounted (operator, and the path the
     operator must use in session and worker pods: the role URLs name it). */}}
{{- define "berth.redisCADir" -}}/var/run/berth/redis-tls{{- end }}

{{/* URL of one Redis ACL user, with the password as a $(VAR) reference to an earlier env entry.
     Args: dict "root" $ "user" <ACL user> "var" <env var holding the password>. The bundled Redis:
     redis[s]://<user>:$(VAR)@<svc>:<port>/0[?ssl_ca_certs=<ca>]; an external one: redis.url's
     scheme, host, path and query with the user and password replaced. */}}
{{- define "berth.redisRoleURL" -}}
{{- $v := .root.Values }}
{{- if $v.redis.enabled }}
{{- $scheme := ternary "rediss" "redis" $v.redis.tls.enabled }}
{{- $url := printf "%s://%s:$(%s)@%s.%s.svc:%d/0" $scheme .user .var (include "berth.redisName" .root) .root.Release.Namespace (int $v.redis.service.port) }}
{{- if $v.redis.tls.enabled }}
{{- $url = printf "%s?ssl_ca_certs=%s/ca.crt" $url (include "berth.redisCADir" .root) }}
{{- end }}
{{- $url }}
{{- else }}
{{- $u := urlParse (include "berth.redisURL" .root) }}
{{- $user := ternary "" .user (eq ($v.redis.auth.mode | default "acl") "password") }}
{{- $url := printf "%s://%s:$(%s)@%s%s" $u.scheme $user .var $u.host $u.path }}
{{- if $u.query }}
{{- $url = printf "%s?%s" $url $u.query }}
{{- end }}
{{- $url }}
{{- end }}
{{- end }}

{{- define "berth.sharedClaimName" -}}
{{- .Values.sharedVolume.claimName }}
{{- end }}

{{/* The page alerts' runbook_url point into: prometheusRule.runbookBaseURL, else the
     troubleshooting page of this chart's version in its source repository (Chart.yaml sources). */}}
{{- define "berth.runbookURL" -}}
{{- if .Values.prometheusRule.runbookBaseURL -}}
{{- .Values.prometheusRule.runbookBaseURL -}}
{{- else -}}
{{- printf "%s/blob/v%s/docs/troubleshooting.md" (first .Chart.Sources) .Chart.AppVersion -}}
{{- end -}}
{{- end }}

{{/* Label selector of this release's operator series, for the "operator down" alert. */}}
{{- define "berth.operatorUpSelector" -}}
{{- if .Values.prometheusRule.operatorSelector }}
{{- .Values.prometheusRule.operatorSelector }}
{{- else }}
{{- printf "namespace=\"%s\"" .Release.Namespace }}
{{- end }}
{{- end }}

{{/* Operator environment: downward API first (later entries may reference them), then the
     settings of berth_operator.settings.OperatorSettings (BERTH_<FIELD>), then user extras. */}}
{{/* sharedVolume.retention.namespaces as "<ns>=<policy>,..." (sorted), for the operator. */}}
{{- define "berth.retentionNamespaces" -}}
{{- $out := list -}}
{{- range $ns, $policy := .Values.sharedVolume.retention.namespaces -}}
{{- $out = append $out (printf "%s=%s" $ns $policy) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{- define "berth.operatorEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
- name: HOME
  value: /tmp
- name: BERTH_NAMESPACES
  value: {{ join "," .Values.operator.watchNamespaces | quote }}
{{- if .Values.networkPolicy.enabled }}
# The session and worker policies, created by the operator in each namespace it places pods in.
- name: BERTH_NETWORK_POLICY_TEMPLATES
  value: {{ include "berth.np.templates" . | quote }}
{{- if .Values.rbac.create }}
- name: BERTH_NETWORK_POLICY_OWNER_CLUSTER_ROLE
  value: {{ include "berth.operatorName" . | quote }}
{{- end }}
{{- end }}
- name: BERTH_DEFAULT_CLAIM_NAME
  value: {{ include "berth.sharedClaimName" . | quote }}
- name: BERTH_SHARED_CLAIM_MANAGED
  value: {{ .Values.sharedVolume.managed | quote }}
- name: BERTH_SHARED_CLAIM_STORAGE_CLASS
  value: {{ .Values.sharedVolume.storageClassName | quote }}
- name: BERTH_SHARED_CLAIM_SIZE
  value: {{ .Values.sharedVolume.size | quote }}
- name: BERTH_SHARED_CLAIM_SETUP
  value: {{ .Values.sharedVolume.setup | quote }}
- name: BERTH_SHARED_CLAIM_RETENTION
  value: {{ .Values.sharedVolume.retention.default | quote }}
- name: BERTH_SHARED_CLAIM_RETENTION_NAMESPACES
  value: {{ include "berth.retentionNamespaces" . | quote }}
- name: BERTH_SESSION_IMAGE
  value: {{ include "berth.runtimeImage" . | quote }}
- name: BERTH_IMAGE_PULL_POLICY
  value: {{ .Values.image.pullPolicy | quote }}
{{- $pullSecrets := list }}
{{- range .Values.imagePullSecrets }}{{ $pullSecrets = append $pullSecrets .name }}{{ end }}
- name: BERTH_IMAGE_PULL_SECRETS
  value: {{ join "," $pullSecrets | quote }}
{{- with include "berth.redisURL" . }}
- name: BERTH_REDIS_URL
  value: {{ . | quote }}
{{- end }}
{{- with include "berth.redisAuthSecretName" . }}
{{- $secret := . }}
{{- if eq ($.Values.redis.auth.mode | default "acl") "password" }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $secret | quote }}, key: password}
{{- range $role := list "session" "worker" "operator" }}
- name: BERTH_REDIS_{{ upper $role }}_URL
  value: {{ include "berth.redisRoleURL" (dict "root" $ "user" "" "var" "REDIS_PASSWORD") | quote }}
{{- end }}
{{- else }}
{{- range $role := list "session" "worker" "operator" }}
- name: REDIS_{{ upper $role }}_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $secret | quote }}, key: {{ $role }}-password}
{{- end }}
{{- range $role := list "session" "worker" "operator" }}
- name: BERTH_REDIS_{{ upper $role }}_URL
  value: {{ include "berth.redisRoleURL" (dict "root" $ "user" (printf "berth-%s" $role) "var" (printf "REDIS_%s_PASSWORD" (upper $role))) | quote }}
{{- end }}
{{- end }}
{{- end }}
- name: BERTH_DEFAULT_TOOL_SANDBOX
  value: {{ .Values.sessions.toolSandbox | default "Required" | quote }}
{{- with .Values.sessions.runtimeClassName }}
- name: BERTH_SESSION_RUNTIME_CLASS
  value: {{ . | quote }}
{{- end }}
{{- with .Values.laneWorkers.runtimeClassName }}
- name: BERTH_WORKER_RUNTIME_CLASS
  value: {{ . | quote }}
{{- end }}
{{- with .Values.sessions.serviceAccountName }}
- name: BERTH_SESSION_SERVICE_ACCOUNT
  value: {{ . | quote }}
{{- end }}
- name: BERTH_RUN_AS_USER
  value: {{ .Values.sessions.runAsUser | quote }}
- name: BERTH_PASSIVATION_DEADLINE_SECONDS
  value: {{ .Values.sessions.passivationDeadlineSeconds | quote }}
- name: BERTH_MAX_PLACEMENT_RETRIES
  value: {{ .Values.sessions.maxPlacementRetries | quote }}
- name: BERTH_MIGRATION_MAX_UNAVAILABLE
  value: {{ .Values.sessions.migration.maxUnavailable | quote }}
{{- with .Values.sessions.llmAllowedBaseURLs }}
- name: BERTH_LLM_ALLOWED_BASE_URLS
  value: {{ join "," . | quote }}
{{- end }}
- name: BERTH_LEADER_ELECTION
  value: {{ .Values.operator.leaderElection.enabled | quote }}
- name: BERTH_LEASE_NAME
  value: {{ include "berth.operatorName" . | quote }}
- name: BERTH_LEASE_NAMESPACE
  value: {{ .Release.Namespace | quote }}
- name: BERTH_LEASE_DURATION_SECONDS
  value: {{ .Values.operator.leaderElection.leaseDurationSeconds | quote }}
- name: BERTH_LEASE_RENEW_SECONDS
  value: {{ .Values.operator.leaderElection.renewSeconds | quote }}
- name: BERTH_HTTP_HOST
  value: "0.0.0.0"
- name: BERTH_HTTP_PORT
  value: {{ .Values.operator.metricsPort | quote }}
- name: BERTH_LOG_LEVEL
  value: {{ .Values.operator.logLevel | default "INFO" | quote }}
{{- with .Values.observability }}
- name: BERTH_LOG_FORMAT
  value: {{ .logFormat | default "json" | quote }}
{{- if .tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .tracing.otlpEndpoint | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .tracing.sampler | default "parentbased_always_on" | quote }}
{{- with .tracing.samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ . | quote }}
{{- end }}
{{- with .tracing.resourceAttributes }}
{{- $attrs := list }}
{{- range $k, $v := . }}{{ $attrs = append $attrs (printf "%s=%s" $k $v) }}{{ end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attrs | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.webhook.enabled }}
- name: BERTH_WEBHOOK_ENABLED
  value: "true"
- name: BERTH_WEBHOOK_PORT
  value: {{ .Values.webhook.port | quote }}
- name: BERTH_WEBHOOK_LISTEN_HOST
  value: "0.0.0.0"
- name: BERTH_WEBHOOK_HOST
  value: {{ include "berth.webhookHost" . | quote }}
- name: BERTH_WEBHOOK_CERT_DIR
  value: /etc/berth/webhook
- name: BERTH_WEBHOOK_CONFIGURATION
  value: {{ default (include "berth.operatorName" .) .Values.webhook.configurationName | quote }}
{{- end }}
{{- if .Values.budget.enabled }}
- name: BERTH_BUDGET_ENABLED
  value: "true"
- name: BERTH_BUDGET_PORT
  value: {{ .Values.budget.port | quote }}
- name: BERTH_BUDGET_URL
  value: {{ include "berth.budgetURL" . | quote }}
- name: BERTH_BUDGET_TIMEOUT_MS
  value: {{ .Values.budget.timeoutMs | quote }}
- name: BERTH_BUDGET_FAILURE_POLICY
  value: {{ .Values.budget.defaultFailurePolicy | quote }}
{{- end }}
{{- if .Values.gateway.enabled }}
- name: BERTH_GATEWAY_ENABLED
  value: "true"
- name: BERTH_GATEWAY_PORT
  value: {{ .Values.gateway.port | quote }}
- name: BERTH_GATEWAY_URL
  value: {{ include "berth.gatewayURL" . | quote }}
- name: BERTH_GATEWAY_MAX_WAIT_SECONDS
  value: {{ .Values.gateway.maxWaitSeconds | quote }}
- name: BERTH_GATEWAY_MAX_PEER_DEPTH
  value: {{ .Values.gateway.maxPeerDepth | quote }}
- name: BERTH_GATEWAY_MESSAGE_RETENTION_SECONDS
  value: {{ .Values.gateway.messageRetentionSeconds | quote }}
{{- end }}
{{- range $k, $v := .Values.operator.env }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- with .Values.operator.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* RBAC rules of the operator on namespaced objects: a Role per watched namespace, or part of
     the ClusterRole when watching all namespaces. These rules and berth.clusterRules together are
     exactly config/rbac/cluster_role.yaml (tests/unit/chart/test_rbac.py keeps them equal). */}}
{{- define "berth.namespacedRules" -}}
# kopf watches AgentSessions and patches its finalizer/annotations onto them.
- apiGroups: [berth.dev]
  resources: [agentsessions]
  verbs: [get, list, watch, patch]
# Status is written whole, with the resourceVersion as precondition.
- apiGroups: [berth.dev]
  resources: [agentsessions/status]
  verbs: [get, update]
# LaneWorkers: watched by kopf (finalizer/annotations), status patched by the scaling loop.
- apiGroups: [berth.dev]
  resources: [laneworkers]
  verbs: [get, list, watch, patch]
- apiGroups: [berth.dev]
  resources: [laneworkers/status]
  verbs: [patch]
# BudgetPolicies: watched by kopf (the budget service's directory), status patched.
- apiGroups: [berth.dev]
  resources: [budgetpolicies]
  verbs: [get, list, watch, patch]
- apiGroups: [berth.dev]
  resources: [budgetpolicies/status]
  verbs: [patch]
# SessionWarmPools: watched by kopf (annotations), status patched by the pool daemon; pods
# of a pool are created, deleted and patched (adoption) with the pod rules below.
- apiGroups: [berth.dev]
  resources: [sessionwarmpools]
  verbs: [get, list, watch, patch]
- apiGroups: [berth.dev]
  resources: [sessionwarmpools/status]
  verbs: [patch]
# Session pods: watched, listed before every create, created and deleted; worker pods are
# annotated with a deletion cost before a scale-down.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, patch]
# One PodDisruptionBudget per namespace over its session pods, so evictions wait for
# passivation; the per-session ones of earlier versions are listed and deleted.
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, create, delete]
# Secrets: berth-task-key and <session>-berth are created (update adds a task key or a new
# options.json); the LLM key Secret a session names is read to check its
# berth.dev/llm-credentials label. No list/watch.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, update]
# The shared ReadWriteMany claim of a namespace, created when missing (never deleted), and
# annotated once its volume set-up Job succeeded.
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, create, patch]
# The session and worker NetworkPolicies of a namespace (BERTH_NETWORK_POLICY_TEMPLATES),
# created when missing, updated when the operator's own differ. Never deleted by the operator.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, update]
# The LaneWorker's Deployment and its scale.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, create, patch]
- apiGroups: [apps]
  resources: [deployments/scale]
  verbs: [patch]
# The store-cleanup Job of berth.dev/delete-store; the shared claim's volume set-up Job (its
# outcome is read); retention's suspended cleanup Jobs (listed, resumed, deleted when done).
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, create, patch, delete]
# One PodDisruptionBudget per namespace over its session pods (passivation before eviction).
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, create, delete]
# Events on AgentSessions and LaneWorkers.
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create]
{{- end }}

{{/* Cluster-scoped: the node of a pod that stopped answering (node loss vs crash). */}}
{{- define "berth.clusterRules" -}}
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
# Its own ClusterRole, read for its uid: the owner of the NetworkPolicies the operator creates,
# so that deleting the release removes them.
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  resourceNames: [{{ include "berth.operatorName" . }}]
  verbs: [get]
{{- end }}

{{/* URL session pods call the budget service on (the leader-only Service). */}}
{{- define "berth.gatewayURL" -}}
{{- printf "http://%s-gateway.%s.svc:%v" (include "berth.operatorName" .) .Release.Namespace .Values.gateway.port }}
{{- end }}

{{- define "berth.budgetURL" -}}
{{- printf "http://%s-budget.%s.svc:%v" (include "berth.operatorName" .) .Release.Namespace .Values.budget.port }}
{{- end }}

{{/* Host the apiserver calls the webhook on (must be in the certificate's SANs). */}}
{{- define "berth.webhookHost" -}}
{{- if .Values.webhook.host }}
{{- .Values.webhook.host }}
{{- else }}
{{- printf "%s-webhook.%s.svc" (include "berth.operatorName" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/* redis.conf of the bundled Redis (ConfigMap <redis>-config, also hashed into the pod's
     checksum/config annotation). */}}
{{- define "berth.redisConf" -}}
# The front door's queued messages and BudgetPolicy spend must survive a restart: an
# append-only file, fsynced every second (redis.persistence; no RDB snapshots).
save ""
{{- if .Values.redis.persistence.enabled }}
appendonly yes
appendfsync everysec
{{- else }}
appendonly no
{{- end }}
dir /data
bind * -::*
# Every client authenticates as an ACL user (the default user is disabled), so protected
# mode adds nothing and would only refuse non-loopback clients if the ACL file were wrong.
protected-mode no
aclfile /run/redis/users.acl
{{- if .Values.redis.tls.enabled }}
port 0
tls-port {{ .Values.redis.service.port }}
tls-cert-file /etc/redis/tls/tls.crt
tls-key-file /etc/redis/tls/tls.key
tls-ca-cert-file /etc/redis/tls/ca.crt
tls-auth-clients {{ .Values.redis.tls.authClients }}
{{- else }}
port {{ .Values.redis.service.port }}
{{- end }}
{{- end }}

{{/* NetworkPolicy building blocks (templates/networkpolicy.yaml) --------------------------- */}}

{{/* Labels the operator puts on session pods and LaneWorker pods (builders/names.py,
     builders/laneworker.py); tests/unit/chart/test_networkpolicy.py checks them against the
     builders. */}}
{{- define "berth.np.sessionLabels" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/component: session
{{- end }}

{{- define "berth.np.workerLabels" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/component: laneworker
{{- end }}

{{/* Namespaces whose session/worker policies the chart renders, as a JSON list:
     networkPolicy.namespaces, else operator.watchNamespaces, else the release namespace. */}}
{{- define "berth.np.policyNamespaces" -}}
{{- if .Values.networkPolicy.namespaces }}
{{- toJson .Values.networkPolicy.namespaces }}
{{- else if .Values.operator.watchNamespaces }}
{{- toJson .Values.operator.watchNamespaces }}
{{- else }}
{{- toJson (list .Release.Namespace) }}
{{- end }}
{{- end }}

{{/* Namespaces where session and worker pods may be peers (operator egress, Redis ingress): the
     listed ones, or any namespace when neither list is set (the operator watches them all). */}}
{{- define "berth.np.sessionNamespaceSelector" -}}
{{- $list := default .Values.operator.watchNamespaces .Values.networkPolicy.namespaces }}
{{- if $list }}
matchExpressions:
  - {key: kubernetes.io/metadata.name, operator: In, values: {{ toJson $list }}}
{{- else }}
{}
{{- end }}
{{- end }}

{{/* The scraper peer of /metrics ingress rules (a one-element peer list). */}}
{{- define "berth.np.metricsPeer" -}}
- namespaceSelector:
    {{- toYaml .Values.networkPolicy.metrics.namespaceSelector | nindent 4 }}
  {{- with .Values.networkPolicy.metrics.podSelector }}
  podSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* Egress rule: cluster DNS on 53/UDP and 53/TCP. */}}
{{- define "berth.np.dnsRule" -}}
- to:
    - namespaceSelector:
        {{- toYaml .Values.networkPolicy.dns.namespaceSelector | nindent 8 }}
      podSelector:
        {{- toYaml .Values.networkPolicy.dns.podSelector | nindent 8 }}
    {{- range .Values.networkPolicy.dns.cidrs }}
    - ipBlock: {cidr: {{ . }}}
    {{- end }}
  ports:
    - {protocol: UDP, port: 53}
    - {protocol: TCP, port: 53}
{{- end }}

{{/* Egress rule: Redis, the bundled pod or networkPolicy.externalRedis. */}}
{{- /* Egress to the OTLP trace endpoint, when observability.tracing.otlpEndpoint is set. */ -}}
{{- define "berth.np.otlpEgressRule" -}}
{{- if .Values.observability.tracing.otlpEndpoint }}
{{- $rule := .Values.networkPolicy.otlpEgress }}
- ports:
    {{- range $rule.ports }}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
  {{- with $rule.cidrs }}
  to:
    {{- range . }}
    - ipBlock: {cidr: {{ . }}}
    {{- end }}
  {{- end }}
{{- end }}
{{- end }}

{{- define "berth.np.redisEgressRule" -}}
{{- if .Values.redis.enabled }}
- to:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: {{ .Release.Namespace }}}
      podSelector:
        matchLabels:
          {{- include "berth.redisSelectorLabels" . | nindent 10 }}
  ports:
    - {protocol: TCP, port: {{ .Values.redis.service.port }}}
{{- else }}
- ports:
    {{- range .Values.networkPolicy.externalRedis.ports }}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
  {{- with .Values.networkPolicy.externalRedis.cidrs }}
  to:
    {{- range . }}
    - ipBlock: {cidr: {{ . }}}
    {{- end }}
  {{- end }}
{{- end }}
{{- end }}
