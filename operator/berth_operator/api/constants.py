"""Names shared by the operator, the CRDs and the session pod contract (docs/architecture.md §1,
§5).

Everything here is a plain constant: the CRD generator, the builders, the decisions and the
handlers import them so a name is spelled once.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "berth.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
CATEGORY: Final = "berth"

SESSION_KIND: Final = "AgentSession"
SESSION_PLURAL: Final = "agentsessions"
SESSION_SINGULAR: Final = "agentsession"
SESSION_SHORT_NAMES: Final = ("ags",)

LANEWORKER_KIND: Final = "LaneWorker"
LANEWORKER_PLURAL: Final = "laneworkers"
LANEWORKER_SINGULAR: Final = "laneworker"
LANEWORKER_SHORT_NAMES: Final = ("lw",)

BUDGETPOLICY_KIND: Final = "BudgetPolicy"
BUDGETPOLICY_PLURAL: Final = "budgetpolicies"
BUDGETPOLICY_SINGULAR: Final = "budgetpolicy"
BUDGETPOLICY_SHORT_NAMES: Final = ("bp",)

# Labels and annotations (prefix berth.dev/).
LABEL_SESSION: Final = "berth.dev/session"
"""Label on session pods and ConfigMaps: the AgentSession name."""
LABEL_SESSION_UID: Final = "berth.dev/session-uid"
"""Label on session pods and ConfigMaps: the AgentSession metadata.uid (names can be reused)."""
LABEL_EPOCH: Final = "berth.dev/epoch"
"""Label on session pods: the placement epoch (decimal)."""
LABEL_LANEWORKER: Final = "berth.dev/laneworker"
LABEL_TENANT: Final = "berth.dev/tenant"
LABEL_PRINCIPAL: Final = "berth.dev/principal"
LABEL_AGENT_TEMPLATE: Final = "berth.dev/agent-template"
LABEL_CORRELATION: Final = "berth.dev/correlation-id"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_LEADER: Final = "berth.dev/leader"
"""On operator pods: ``"true"`` on the replica that holds the Lease (the webhook Service selects
it, so eviction requests never reach a standby, which serves no webhook)."""
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_NAME: Final = "app.kubernetes.io/name"
MANAGED_BY: Final = "berth-operator"
COMPONENT_SESSION: Final = "session"
COMPONENT_STORE_CLEANUP: Final = "store-cleanup"
COMPONENT_SHARED_VOLUME: Final = "shared-volume"
COMPONENT_VOLUME_SETUP: Final = "volume-setup"

ANNOTATION_DELETE_STORE: Final = "berth.dev/delete-store"
"""On an AgentSession: ``"true"`` makes deletion also remove its store and workspace."""
ANNOTATION_REPLACED_REASON: Final = "berth.dev/placement-reason"
"""On session pods: why this placement happened (a PlacementReason value)."""
ANNOTATION_RESUME_RUN_ID: Final = "berth.dev/resume-run-id"
"""On session pods: the run id this pod was asked to resume (empty for the first run)."""
ANNOTATION_WAKE_REQUESTED_AT: Final = "berth.dev/wake-requested-at"
"""On an AgentSession: an RFC 3339 time asking a session at rest (idle passivation) to wake."""
ANNOTATION_VOLUME_SETUP: Final = "berth.dev/volume-setup"
"""On a shared claim: ``"<uid>:<gid>"`` once the volume set-up Job made its root writable by
that user (``builders.volume_setup``); a claim with it is not set up again."""

FINALIZER: Final = "berth.dev/finalizer"
DIFFBASE_KEY: Final = "last-handled-configuration"
"""``berth.dev/<this>``: kopf's record of the last handled spec (its diff-base storage), on
LaneWorkers only (``berth_operator.persistence``)."""

# Session pod contract (docs/architecture.md §5).
SESSION_CONTAINER: Final = "session"
OPTIONS_KEY: Final = "options.json"
OPTIONS_MOUNT_PATH: Final = "/etc/berth/session"
SHARED_MOUNT_PATH: Final = "/var/lib/berth/shared"
TOOL_SANDBOX_VALUES: Final = {"Required": "required", "BestEffort": "best-effort"}
"""``spec.toolSandbox`` (and the operator's default) → the value of the pods'
``berth_contract.envvars.TOOL_SANDBOX``."""
TERMINATION_MESSAGE_PATH: Final = "/dev/termination-log"
STORE_SUBDIR: Final = "store"
WORKSPACES_SUBDIR: Final = "workspaces"
WORKSPACE_MOUNT_PATH: Final = "/var/lib/berth/workspace"
"""Session pods: the session's own workspace root (subPath ``workspaces/<ns>/<name>``)."""
STORE_MOUNT_PATH: Final = "/var/lib/berth/store"
"""Session pods: BERTH_STORE_DIR; only ``<ns>/<name>`` below it is mounted (its own store)."""
WORKSPACES_MOUNT_PATH: Final = "/var/lib/berth/workspaces"
"""Worker pods: the ``workspaces`` directory of the shared volume (never ``store``)."""
SESSION_SECRET_MOUNT_PATH: Final = "/var/run/berth/session"
"""Session pods: the per-session Secret ``<name>-berth`` (api-token, task-key)."""
LLM_KEY_MOUNT_PATH: Final = "/var/run/berth/llm"
LLM_CA_MOUNT_PATH: Final = "/var/run/berth/llm-ca"
"""Where spec.llm.caBundle is mounted in a session pod (file ``ca.crt``)."""
"""Session pods: the LLM API key file ``api-key`` (from spec.llm.apiKeySecretRef)."""
LLM_KEY_FILE: Final = "api-key"
TASK_KEY_MOUNT_PATH: Final = "/var/run/berth/task-key"
"""Worker pods: the namespace master key file ``master`` (Secret ``berth-task-key``)."""
SECRET_API_TOKEN_KEY: Final = "api-token"
"""Key of the session's API bearer token in ``<name>-berth``."""
SECRET_TASK_KEY_KEY: Final = "task-key"
"""Key of the session's task HMAC key (raw 32 bytes) in ``<name>-berth``."""
SECRET_REDIS_URL_KEY: Final = "redis-url"
"""Key of the session's Redis URL (its ACL user's password in it) in ``<name>-berth``."""
SECRET_OPTIONS_KEY: Final = "options.json"
"""Key of the session pod's options.json in ``<name>-berth`` (mounted alone at the options
path; one object per session instead of a Secret and a ConfigMap)."""
WORKER_REDIS_SECRET: Final = "berth-worker-redis"
"""Per-namespace Secret holding the Redis URL worker pods use (key ``url``)."""
WORKER_REDIS_URL_KEY: Final = "url"
"""Key of the workers' Redis URL in ``berth-worker-redis``."""
REDIS_CA_SECRET: Final = "berth-redis-ca"
"""Per-namespace Secret holding the CA file(s) the pods' Redis URLs name (``ssl_ca_certs``),
one key per file name; mounted by session, warm and LaneWorker pods (builders/redis_ca.py)."""
TASK_MASTER_SECRET: Final = "berth-task-key"
"""Per-namespace Secret holding the task-authentication master key."""
TASK_MASTER_KEY: Final = "master"
"""Key of the 32 random master bytes in ``berth-task-key``."""
LABEL_LLM_CREDENTIALS: Final = "berth.dev/llm-credentials"
"""Only Secrets with this label set to ``"true"`` may be named by spec.llm.apiKeySecretRef."""
MAX_STATE_BODY_BYTES: Final = 1 << 20
"""Largest GET /v1/state body the operator reads (1 MiB); a larger answer is an error."""
SESSION_COMMAND: Final = "berth-session"

MAX_SESSION_NAME_LENGTH: Final = 50
"""AgentSession names are capped so ``<name>-e<epoch>`` stays a valid label value (63 chars)."""
MAX_RUNS_IN_STATUS: Final = 20
"""status.runs keeps the last 20 runs (oldest dropped first)."""
MAX_RESULT_TEXT: Final = 4096
"""status.result.text is truncated to 4096 characters."""

LANES: Final = ("query", "execute", "generate", "control")
