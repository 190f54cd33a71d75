"""Workspace-confined tools: path escapes are refused (incl. symlinks); tools behave."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from session_runtime.tools import DirectExecutor, ToolCall, ToolContext, ToolResult, run_tool
from session_runtime.tools.executor import batch_segments
from session_runtime.tools.paths import PathEscapeError, resolve_in_workspace


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    (ws / "sub").mkdir()
    (ws / "ok.txt").write_text("fine\n")
    os.symlink(outside, ws / "link_dir")  # directory symlink escaping
    os.symlink(outside / "secret.txt", ws / "link_file")  # file symlink escaping
    os.symlink(tmp_path / "nowhere" / "x", ws / "dangling")  # dangling link pointing out
    os.symlink(ws / "ok.txt", ws / "inner_link")  # link staying inside: allowed
    (tmp_path / "ws-evil").mkdir()  # sibling whose name shares the workspace prefix
    return ws, outside


ESCAPES = [
    ("read", {"file_path": "../outside/secret.txt"}),
    ("read", {"file_path": "sub/../../outside/secret.txt"}),
    ("read", {"file_path": "{outside}/secret.txt"}),
    ("read", {"file_path": "/etc/passwd"}),
    ("read", {"file_path": "link_file"}),
    ("read", {"file_path": "link_dir/secret.txt"}),
    ("write", {"file_path": "link_dir/new.txt", "content": "x"}),
    ("write", {"file_path": "dangling", "content": "x"}),
    ("write", {"file_path": "../ws-evil/x.txt", "content": "x"}),
    ("edit", {"file_path": "link_file", "old_string": "TOP", "new_string": "NOT"}),
    ("ls", {"path": ".."}),
    ("ls", {"path": "link_dir"}),
    ("glob", {"pattern": "../outside/*"}),
    ("glob", {"pattern": "*", "path": "link_dir"}),
    ("grep", {"pattern": "SECRET", "path": "link_dir"}),
    ("grep", {"pattern": "SECRET", "path": "/"}),
]


@pytest.mark.parametrize(("tool", "args"), ESCAPES)
async def test_path_escapes_are_refused(
    tree: tuple[Path, Path], tool: str, args: dict[str, Any]
) -> None:
    ws, outside = tree
    args = {
        k: v.replace("{outside}", str(outside)) if isinstance(v, str) else v
        for k, v in args.items()
    }
    res = await run_tool(tool, args, str(ws), "c1")
    assert res.is_error, res.output
    assert "outside the workspace" in res.output or "leaves the workspace" in res.output
    assert "TOP SECRET" not in res.output
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert not (outside / "new.txt").exists()
    assert not (ws.parent / "ws-evil" / "x.txt").exists()


def test_resolver_accepts_inside_paths_and_refuses_dotdot(tree: tuple[Path, Path]) -> None:
    # Lexical only (symlinks are followed race-free when opening); '..' is refused outright.
    ws, _ = tree
    real = os.path.realpath(ws)
    assert resolve_in_workspace(str(ws), None) == real
    assert resolve_in_workspace(str(ws), "./sub//ok.txt") == os.path.join(real, "sub", "ok.txt")
    assert resolve_in_workspace(str(ws), str(ws / "ok.txt")) == os.path.join(real, "ok.txt")
    for bad in ("a\x00b", "sub/../ok.txt", "/etc/passwd", "x/" * 300):
        with pytest.raises(PathEscapeError):
            resolve_in_workspace(str(ws), bad)


async def test_symlinks_inside_the_workspace_are_followed(tree: tuple[Path, Path]) -> None:
    ws, _ = tree
    (ws / "sub" / "up").symlink_to("../ok.txt")  # relative, with '..', stays inside
    for path in ("inner_link", "sub/up"):
        res = await run_tool("read", {"file_path": path}, str(ws), "c")
        assert not res.is_error and "fine" in res.output, res.output


async def test_glob_and_grep_skip_links_out_of_the_workspace(tree: tuple[Path, Path]) -> None:
    ws, _ = tree
    glob = await run_tool("glob", {"pattern": "**/*"}, str(ws), "g")
    assert "secret" not in glob.output and "ok.txt" in glob.output
    grep = await run_tool("grep", {"pattern": "SECRET|fine"}, str(ws), "r")
    assert "TOP SECRET" not in grep.output and "ok.txt:1:fine" in grep.output


async def test_read_write_edit_ls(tmp_path: Path) -> None:
    ws = str(tmp_path)
    w = await run_tool("write", {"file_path": "d/f.txt", "content": "a\nb\nc\nb\n"}, ws, "1")
    assert not w.is_error and (tmp_path / "d" / "f.txt").exists()
    r = await run_tool("read", {"file_path": "d/f.txt", "offset": 2, "limit": 2}, ws, "2")
    assert r.output.splitlines() == ["     2\tb", "     3\tc"]
    dup = await run_tool(
        "edit", {"file_path": "d/f.txt", "old_string": "b", "new_string": "B"}, ws, "3"
    )
    assert dup.is_error and "occurs 2 times" in dup.output
    allb = await run_tool(
        "edit",
        {"file_path": "d/f.txt", "old_string": "b", "new_string": "B", "replace_all": True},
        ws,
        "4",
    )
    assert not allb.is_error and (tmp_path / "d" / "f.txt").read_text() == "a\nB\nc\nB\n"
    missing = await run_tool(
        "edit", {"file_path": "d/f.txt", "old_string": "zzz", "new_string": "y"}, ws, "5"
    )
    assert missing.is_error and "not found" in missing.output
    ls = await run_tool("ls", {}, ws, "6")
    assert ls.output.splitlines() == ["d/"]
    nofile = await run_tool("read", {"file_path": "nope.txt"}, ws, "7")
    assert nofile.is_error and "not found" in nofile.output


async def test_bad_arguments_and_unknown_tool(tmp_path: Path) -> None:
    extra = await run_tool("read", {"file_path": "x", "bogus": 1}, str(tmp_path), "1")
    assert extra.is_error and "unknown argument" in extra.output
    missing = await run_tool("write", {"file_path": "x"}, str(tmp_path), "2")
    assert missing.is_error and "missing required" in missing.output
    typed = await run_tool("bash", {"command": 5}, str(tmp_path), "3")
    assert typed.is_error and "must be string" in typed.output
    unknown = await run_tool("rm_rf", {}, str(tmp_path), "4")
    assert unknown.is_error and "Unknown tool" in unknown.output


@pytest.fixture
def real_tmp(tmp_path: Path) -> str:
    return os.path.realpath(tmp_path)


async def test_bash_exit_code_cwd_and_output_cap(tmp_path: Path, real_tmp: str) -> None:
    res = await run_tool("bash", {"command": "pwd; exit 3"}, str(tmp_path), "1")
    assert res.exit_code == 3 and not res.is_error
    assert res.output.strip() == real_tmp
    big = await run_tool(
        "bash", {"command": "head -c 50000 /dev/zero | tr '\\0' a"}, str(tmp_path), "2"
    )
    assert len(big.output) < 31_000 and "output truncated: 20000 more characters" in big.output


def test_batch_segments_group_consecutive_query_calls() -> None:
    names = ["read", "grep", "bash", "ls", "write", "edit", "glob", "read"]
    calls = [ToolCall(str(i), n, {}) for i, n in enumerate(names)]
    assert [[c.name for c in seg] for seg in batch_segments(calls)] == [
        ["read", "grep"],
        ["bash"],
        ["ls"],
        ["write"],
        ["edit"],
        ["glob", "read"],
    ]


async def test_direct_executor_runs_query_calls_in_parallel_and_reports_each(
    tmp_path: Path,
) -> None:
    # Two greps run together; results come back in call order; on_result fires per result.
    (tmp_path / "a.txt").write_text("needle\n")
    calls = [
        ToolCall("1", "write", {"file_path": "b.txt", "content": "needle too\n"}),
        ToolCall("2", "grep", {"pattern": "needle"}),
        ToolCall("3", "glob", {"pattern": "*.txt"}),
        ToolCall("4", "bash", {"command": "cat b.txt"}),
    ]
    seen: list[str] = []

    async def on_result(res: ToolResult) -> None:
        seen.append(res.tool_call_id)

    ctx = ToolContext("s", str(tmp_path), "run-1", 1, None)
    results = await DirectExecutor().execute(calls, ctx, on_result)
    assert [r.tool_call_id for r in results] == ["1", "2", "3", "4"]
    assert "b.txt:1:needle too" in results[1].output  # the write ran before the grep
    assert results[3].output == "needle too\n"
    assert sorted(seen) == ["1", "2", "3", "4"] and seen[0] == "1" and seen[-1] == "4"
    assert await DirectExecutor().recover(calls[0], ctx) is None


PATCH = "\n".join(
    [
        "--- a/m.py",
        "+++ b/m.py",
        "@@ -1,3 +1,3 @@",
        " def f():",
        "-    return 1",
        "+    return 2",
        " ",
        "@@ -5,2 +5,3 @@",
        " def g():",
        "     pass",
        "+# end",
        "",
    ]
)


async def test_patch_applies_hunks_and_refuses_mismatches(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f():\n    return 1\n\ndef g():\n    pass\n")
    res = await run_tool("patch", {"file_path": "m.py", "diff": PATCH}, str(tmp_path), "1")
    assert not res.is_error, res.output
    assert (
        tmp_path / "m.py"
    ).read_text() == "def f():\n    return 2\n\ndef g():\n    pass\n# end\n"
    again = await run_tool("patch", {"file_path": "m.py", "diff": PATCH}, str(tmp_path), "2")
    assert again.is_error and "does not match" in again.output
    assert (tmp_path / "m.py").read_text().count("return 2") == 1  # untouched on refusal
    bad = await run_tool("patch", {"file_path": "m.py", "diff": "nonsense"}, str(tmp_path), "3")
    assert bad.is_error
    new = await run_tool(
        "patch", {"file_path": "n.txt", "diff": "@@ -0,0 +1,2 @@\n+a\n+b\n"}, str(tmp_path), "4"
    )
    assert not new.is_error and (tmp_path / "n.txt").read_text() == "a\nb\n"
    escape = await run_tool("patch", {"file_path": "../x", "diff": PATCH}, str(tmp_path), "5")
    assert escape.is_error and "outside the workspace" in escape.output


def test_patch_finds_shifted_context() -> None:
    from session_runtime.tools.patch import apply_unified_diff

    text = "extra\nextra\nA\nB\nC\n"
    out, n = apply_unified_diff(text, "@@ -1,3 +1,3 @@\n A\n-B\n+X\n C\n")
    assert (out, n) == ("extra\nextra\nA\nX\nC\n", 1)
