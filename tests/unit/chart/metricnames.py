"""Metric names: what Berth's programs export, and what a PromQL expression refers to.

``exported_names(registry)`` expands a prometheus_client registry's families to the sample names
Prometheus stores (``_total`` for counters, ``_bucket``/``_sum``/``_count`` for histograms), so a
metric with no labelled child yet still counts. ``exposition_names(text)`` does the same for a
scraped ``/metrics`` body (used by the integration tests on the real processes).
"""

from __future__ import annotations

import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created", ""),
    "gauge": ("",),
    "info": ("_info",),
    "stateset": ("",),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "unknown": ("",),
}

# A metric name in PromQL: an identifier that is not a function call, a keyword, a label matcher
# key, a label in by/without/on/ignoring lists, or inside a string. We look only at berth_* names
# and `up`, which are the only metrics Berth's dashboard and rules may use.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")
_IDENT = re.compile(r"(?<![\w:$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?!\s*\()")


def exported_names(registry: Any) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
        names.update(s.name for s in family.samples)
    return names


def exposition_names(text: str) -> set[str]:
    """Sample names of a scraped body; a family announced by # TYPE with no sample yet (a
    labelled metric before its first observation) counts with its type's suffixes."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
        names.update(s.name for s in family.samples)
    return names


def referenced_metrics(expr: str) -> set[str]:
    """berth_* metric names (and ``up``) that a PromQL expression selects."""
    text = _STRING.sub('""', expr)
    text = _GROUPING.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    return {m for m in _IDENT.findall(text) if m.startswith("berth_") or m == "up"}


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every query in every panel, rows' nested panels included."""
    out: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            for t in p.get("targets", []):
                out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))

    walk(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        if var.get("type") == "query" and isinstance(query, str):
            out.append((f"variable {var['name']}", query))
    return out
