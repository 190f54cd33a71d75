"""Environment variables of Berth's pods: the operator's builders set them, the session runtime,
warm pods and ``berth-worker`` read them (docs/architecture.md §5, §7).

Each constant's value is the variable's name; what a variable means, and whether it is required,
is documented where it is read (:mod:`session_runtime.pod.config` for session pods,
:mod:`session_runtime.pod.warm` for warm pods, :mod:`session_runtime.worker` for workers).
"""

from __future__ import annotations

from typing import Final

# Session pods (one placement of an AgentSession).
SESSION: Final = "BERTH_SESSION"
SESSION_UID: Final = "BERTH_SESSION_UID"
EPOCH: Final = "BERTH_EPOCH"
RESUME_RUN_ID: Final = "BERTH_RESUME_RUN_ID"
STORE_DIR: Final = "BERTH_STORE_DIR"
WORKSPACE: Final = "BERTH_WORKSPACE"
WORKSPACE_ROOT: Final = "BERTH_WORKSPACE_ROOT"
OPTIONS_FILE: Final = "BERTH_OPTIONS_FILE"
TERMINATION_LOG: Final = "BERTH_TERMINATION_LOG"
HTTP_PORT: Final = "BERTH_HTTP_PORT"
API_TOKEN_FILE: Final = "BERTH_API_TOKEN_FILE"
TASK_KEY_FILE: Final = "BERTH_TASK_KEY_FILE"
REDIS_URL: Final = "BERTH_REDIS_URL"
LLM_API_KEY_FILE: Final = "BERTH_LLM_API_KEY_FILE"
BUDGET_URL: Final = "BERTH_BUDGET_URL"
BUDGET_TIMEOUT_MS: Final = "BERTH_BUDGET_TIMEOUT_MS"
BUDGET_FAILURE_POLICY: Final = "BERTH_BUDGET_FAILURE_POLICY"
TOOL_SANDBOX: Final = "BERTH_TOOL_SANDBOX"
"""``required`` (no Landlock → the pod refuses to start, reason ``ToolSandboxUnavailable``) or
``best-effort`` (tools run unconfined without it); session, warm and worker pods."""

# Warm pods (a SessionWarmPool's, before adoption).
WARM_POOL: Final = "BERTH_WARM_POOL"
WARM_TOKEN_FILE: Final = "BERTH_WARM_TOKEN_FILE"
WORKSPACES_DIR: Final = "BERTH_WORKSPACES_DIR"

# LaneWorker pods (berth-worker).
NAMESPACE: Final = "BERTH_NAMESPACE"
LANEWORKER: Final = "BERTH_LANEWORKER"
WORKER_CONCURRENCY: Final = "BERTH_WORKER_CONCURRENCY"
WORKSPACES_ROOT: Final = "BERTH_WORKSPACES_ROOT"
TASK_MASTER_KEY_FILE: Final = "BERTH_TASK_MASTER_KEY_FILE"
TASK_TIMEOUT_SECONDS: Final = "BERTH_TASK_TIMEOUT_SECONDS"
METRICS_PORT: Final = "BERTH_METRICS_PORT"

# The downward API (Kubernetes' names are the pod's own).
POD_NAME: Final = "POD_NAME"
POD_IP: Final = "POD_IP"
POD_NAMESPACE: Final = "POD_NAMESPACE"
NODE_NAME: Final = "NODE_NAME"

# Observability, read by every Berth program; the operator passes its own values on to the session
# and worker pods it builds (:data:`PASSED_ON`).
LOG_FORMAT: Final = "BERTH_LOG_FORMAT"
"""``json`` (one JSON object per line, with trace and span ids and the session's labels) or
``text`` (the default outside the chart)."""
LOG_LEVEL: Final = "BERTH_LOG_LEVEL"
OTEL_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""OpenTelemetry's own variable: traces are exported (OTLP over HTTP) only when it, or
:data:`OTEL_TRACES_ENDPOINT`, is set."""
OTEL_TRACES_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
TRACEPARENT: Final = "TRACEPARENT"
"""Session pods: the W3C traceparent of the operator's span of the placement (OpenTelemetry's
environment carrier): the pod's first run, and anything else without a parent of its own, is
its child."""
PASSED_ON: Final = (
    LOG_FORMAT,
    OTEL_ENDPOINT,
    OTEL_TRACES_ENDPOINT,
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
)
"""The variables the operator copies from its own environment into the pods it builds, when set.
Never ``OTEL_EXPORTER_OTLP_HEADERS``: it may hold a credential, and tools inherit a session pod's
environment."""
