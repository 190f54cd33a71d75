"""Tools of the session runtime: the executor seam (``base``), the built-in workspace-confined
tools (``builtin``, ``paths``, ``schemas``) and the direct executor (``executor``).

Called by the agent loop; LaneWorkers reuse :func:`run_tool` and :func:`resolve_in_workspace`.
"""

from typing import TYPE_CHECKING

from session_runtime import lazy
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

if TYPE_CHECKING:
    from session_runtime.tools.builtin import OUTPUT_CAP_CHARS, run_tool
    from session_runtime.tools.executor import DirectExecutor
    from session_runtime.tools.paths import PathEscapeError, resolve_in_workspace
    from session_runtime.tools.schemas import BUILTIN_TOOL_NAMES, tool_definitions

# the tools themselves on first use: the executor seam (``base``) is what most importers need
__getattr__ = lazy.exports(
    __name__,
    {
        "OUTPUT_CAP_CHARS": "session_runtime.tools.builtin",
        "run_tool": "session_runtime.tools.builtin",
        "DirectExecutor": "session_runtime.tools.executor",
        "PathEscapeError": "session_runtime.tools.paths",
        "resolve_in_workspace": "session_runtime.tools.paths",
        "BUILTIN_TOOL_NAMES": "session_runtime.tools.schemas",
        "tool_definitions": "session_runtime.tools.schemas",
    },
)

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
