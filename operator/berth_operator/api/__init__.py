"""API of Berth: CRD models, names, conditions, CRD generator (the pod-contract documents are
:mod:`berth_contract`'s).

Pure data; imported by every other layer. Neither kopf nor kubernetes is imported here.
"""

from berth_operator.api.agentsession import AgentSessionSpec, AgentSessionStatus
from berth_operator.api.laneworker import LaneWorkerSpec, LaneWorkerStatus

__all__ = [
    "AgentSessionSpec",
    "AgentSessionStatus",
    "LaneWorkerSpec",
    "LaneWorkerStatus",
]
