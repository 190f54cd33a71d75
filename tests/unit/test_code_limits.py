"""Size limits of the programs, kept by the project itself (run by ``make test``).

A module of ``operator/berth_operator``, ``session_runtime``, ``berth_contract``,
``berth_telemetry`` or ``plugin/kubectl_berth`` has at most 500 lines; a function at most 60
(pod and manifest builders in ``builders/``: 100). Complexity is ruff's (C901, PLR0912, PLR0915
in pyproject.toml). The modules and functions that were already over when the limits came are
listed with their size then, as ceilings: they may shrink, never grow, and leave the list once
under the limit (the test says when an entry is stale).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "operator/berth_operator",
    "session_runtime",
    "berth_contract",
    "berth_telemetry",
    "plugin/kubectl_berth",
)
MODULE_LINES = 500
FUNCTION_LINES = 60
BUILDER_LINES = 100

MODULE_CEILINGS = {
    "operator/berth_operator/api/agentsession.py": 691,
    "operator/berth_operator/settings.py": 503,
    "session_runtime/agent/session.py": 595,
    "session_runtime/lanes/queue.py": 820,
    "session_runtime/pod/lifecycle.py": 560,
    "session_runtime/store/file.py": 590,
}
FUNCTION_CEILINGS: dict[str, int] = {}


def modules() -> dict[str, Path]:
    return {
        str(path.relative_to(ROOT)): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def functions(tree: ast.AST, prefix: str = "") -> dict[str, int]:
    """Lines per function of ``tree``, by qualified name (``Class.method``, ``outer.inner``)."""
    found: dict[str, int] = {}
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                found[name] = (node.end_lineno or node.lineno) - node.lineno + 1
            found.update(functions(node, f"{name}."))
    return found


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines per module, and lines per function (``module::qualified name``), of the programs."""
    mods: dict[str, int] = {}
    funcs: dict[str, int] = {}
    for name, path in modules().items():
        text = path.read_text()
        mods[name] = len(text.splitlines())
        for qualname, lines in functions(ast.parse(text)).items():
            funcs[f"{name}::{qualname}"] = lines
    return mods, funcs


def over(limit_of: dict[str, int], ceilings: dict[str, int], got: dict[str, int]) -> list[str]:
    problems = []
    for name, lines in sorted(got.items()):
        ceiling = ceilings.get(name, limit_of[name])
        if lines > ceiling:
            problems.append(f"{name}: {lines} lines (limit {ceiling})")
    for name, ceiling in sorted(ceilings.items()):
        if name not in got or got[name] <= limit_of.get(name, ceiling):
            problems.append(f"{name}: now within the limit; remove its ceiling")
    return problems


def test_modules_stay_within_their_limit() -> None:
    mods, _ = sizes()
    limits = dict.fromkeys(mods, MODULE_LINES)
    problems = over(limits, MODULE_CEILINGS, mods)
    assert not problems, "\n".join(problems)


def test_functions_stay_within_their_limit() -> None:
    _, funcs = sizes()
    limits = {name: BUILDER_LINES if "/builders/" in name else FUNCTION_LINES for name in funcs}
    problems = over(limits, FUNCTION_CEILINGS, funcs)
    assert not problems, "\n".join(problems)
