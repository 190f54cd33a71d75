"""Errors of the Berth operator.

Hierarchy::

    BerthOperatorError
    ├── SettingsError            bad operator configuration (env); raised at start-up
    ├── SpecError                an AgentSession spec the operator cannot act on (permanent)
    ├── KubeError                a Kubernetes API call failed (translated in berth_operator.k8s)
    │   ├── NotFound             404
    │   ├── AlreadyExists        409 on create
    │   └── Conflict             409 on update/patch (resourceVersion precondition failed)
    └── RuntimeUnreachable       the session pod's HTTP endpoint did not answer

Foreign exceptions (kubernetes.client.ApiException, aiohttp.ClientError) are translated at the
boundary with ``raise X(...) from exc`` so callers above ``k8s/`` never see them.
"""

from __future__ import annotations


class BerthOperatorError(Exception):
    """Base class of every error raised by ``berth_operator``."""


class SettingsError(BerthOperatorError):
    """The operator's environment configuration is invalid."""


class SpecError(BerthOperatorError):
    """The AgentSession spec cannot be acted on (e.g. a referenced LaneWorker is not external)."""


class KubeError(BerthOperatorError):
    """A Kubernetes API call failed. ``status`` is the HTTP status (0 when there was none)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    """The object does not exist (HTTP 404)."""


class AlreadyExists(KubeError):
    """Create failed because an object of that name exists (HTTP 409, reason AlreadyExists)."""


class Conflict(KubeError):
    """An update lost an optimistic-concurrency race (HTTP 409, reason Conflict)."""


class RuntimeUnreachable(BerthOperatorError):
    """The session pod did not answer on ``http://<podIP>:8080`` within the timeout."""


class RuntimeUnauthorized(RuntimeUnreachable):
    """The session pod refused the operator's API token (HTTP 401 or 403): the cached token is
    stale (the Secret was recreated) or missing."""
