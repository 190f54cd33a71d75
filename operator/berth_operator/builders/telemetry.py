"""The log format and OpenTelemetry variables the operator passes on to the pods it builds.

The chart sets them on the operator (``observability`` in its values); session, warm and worker
pods get the same values, so every program of one installation logs in one format and exports
to one trace endpoint. The names are :data:`berth_contract.envvars.PASSED_ON` (never a header
variable: those may hold credentials, and tools inherit a session pod's environment).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from berth_contract import envvars


def telemetry_env(environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """``[{name, value}]`` of every :data:`~berth_contract.envvars.PASSED_ON` variable set (not
    empty) in ``environ`` (default: the operator's own environment), in that order."""
    env = os.environ if environ is None else environ
    return [{"name": name, "value": env[name]} for name in envvars.PASSED_ON if env.get(name)]
