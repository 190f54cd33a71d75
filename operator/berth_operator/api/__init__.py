"""API of Berth: CRD models, pod-contract documents, names, conditions, CRD generator.

Pure data; imported by every other layer. Neither kopf nor kubernetes is imported here.
"""

from berth_operator.api.agentsession import AgentSessionSpec, AgentSessionStatus
from berth_operator.api.laneworker import LaneWorkerSpec, LaneWorkerStatus
from berth_operator.api.options import RuntimeState, SessionPodOptions, TerminationMessage

__all__ = [
    "AgentSessionSpec",
    "AgentSessionStatus",
    "LaneWorkerSpec",
    "LaneWorkerStatus",
    "RuntimeState",
    "SessionPodOptions",
    "TerminationMessage",
]
