"""The lanes, tools and transport packages import their heavy submodules on first use: a process
that needs only names (the worker: stream and lane names) never loads the lane queue or the
built-in tools, and every public name still resolves."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from session_runtime import lanes, lazy, tools, transport

PROBE = textwrap.dedent(
    """
    import json, sys
    import session_runtime.lanes, session_runtime.tools, session_runtime.transport
    from session_runtime.transport import GROUP, task_stream
    from session_runtime.lanes import LANES
    from session_runtime.tools import Lane, ToolCall
    before = sorted(m for m in sys.modules if m.startswith("session_runtime."))
    from session_runtime.transport import RedisTaskTransport
    from session_runtime.lanes import LaneQueue
    from session_runtime.tools import run_tool, DirectExecutor
    after = sorted(m for m in sys.modules if m.startswith("session_runtime."))
    print(json.dumps({"before": before, "after": after}))
    """
)

HEAVY = [
    "session_runtime.lanes.queue",
    "session_runtime.tools.builtin",
    "session_runtime.tools.executor",
    "session_runtime.transport.client",
]


def test_names_alone_do_not_load_the_queue_the_tools_or_the_client() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert not set(HEAVY) & set(seen["before"])
    assert set(HEAVY) <= set(seen["after"])  # each loads on the first use of its names


@pytest.mark.parametrize("package", [lanes, tools, transport])
def test_every_public_name_resolves(package: object) -> None:
    for name in package.__all__:  # type: ignore[attr-defined]
        assert getattr(package, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = tools.nope  # type: ignore[attr-defined]
    getter = lazy.exports("pkg", {"dumps": "json"})
    assert getter("dumps") is json.dumps
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'loads'"):
        getter("loads")
