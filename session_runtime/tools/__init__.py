"""Tools of the session runtime: the executor seam (``base``), the built-in workspace-confined
tools (``builtin``, ``paths``, ``schemas``) and the direct executor (``executor``).

Called by the agent loop; LaneWorkers reuse :func:`run_tool` and :func:`resolve_in_workspace`.
"""

from session_runtime.tools.base import (
    QUERY_TOOLS,
    Lane,
    ResultCallback,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolResult,
    lane_for_tool,
)
from session_runtime.tools.builtin import OUTPUT_CAP_CHARS, run_tool
from session_runtime.tools.executor import DirectExecutor
from session_runtime.tools.paths import PathEscapeError, resolve_in_workspace
from session_runtime.tools.schemas import BUILTIN_TOOL_NAMES, tool_definitions

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "OUTPUT_CAP_CHARS",
    "QUERY_TOOLS",
    "DirectExecutor",
    "Lane",
    "PathEscapeError",
    "ResultCallback",
    "ToolCall",
    "ToolContext",
    "ToolExecutor",
    "ToolResult",
    "lane_for_tool",
    "resolve_in_workspace",
    "run_tool",
    "tool_definitions",
]
