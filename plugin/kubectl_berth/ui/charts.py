"""The pages' plots, drawn by pygal as inline SVG (no script: pygal's tooltip script would be
fetched from the network, so ``js`` is empty and the page stays self-contained).

Each function returns SVG text (``<svg ...>``) for a ``Markup`` in a template; an empty series
gives a chart that says "no data" (pygal's ``no_data_text``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pygal
from pygal.style import Style

from kubectl_berth.ui.model import RunView

STYLE = Style(
    background="transparent",
    plot_background="transparent",
    font_family="system-ui, sans-serif",
    colors=("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"),
)


def _chart(kind: Any, title: str, height: int = 260) -> Any:
    return kind(
        title=title,
        style=STYLE,
        js=[],
        disable_xml_declaration=True,
        height=height,
        width=900,
        show_dots=True,
        dots_size=2,
        x_label_rotation=20,
        truncate_legend=-1,
        no_data_text="no samples yet",
        x_value_formatter=lambda dt: dt.strftime("%H:%M:%S"),
    )


def token_chart(samples: list[tuple[datetime, int]], budget: int | None) -> str:
    """Total tokens over time (as sampled while the view runs) against the budget, if any."""
    chart = _chart(pygal.DateTimeLine, "Tokens used (total) against the budget")
    chart.add("tokens", [(at, total) for at, total in samples])
    if budget is not None and samples:
        chart.add("budget", [(samples[0][0], budget), (samples[-1][0], budget)], show_dots=False)
    return str(chart.render(is_unicode=True))


def runs_chart(runs: list[RunView], now: datetime) -> str:
    """The runs as bars across time, one line per run labelled ``run on node`` (a Gantt
    drawn as a pygal DateTimeLine: each run a two-point series at its own height)."""
    chart = _chart(pygal.DateTimeLine, "Runs across pods and nodes", height=80 + 40 * len(runs))
    chart.show_y_labels = False
    chart.range = (0, len(runs) + 1)
    for i, run in enumerate(runs):
        start = run.started or now
        end = run.ended or now
        label = f"{run.run_id} on {run.node or '?'} ({run.outcome})"
        chart.add(label, [(start, i + 1), (end, i + 1)], stroke_style={"width": 10})
    return str(chart.render(is_unicode=True))


def worker_chart(samples: list[tuple[datetime, int, int, int]]) -> str:
    """A LaneWorker's backlog, in-flight tasks and replicas over time."""
    chart = _chart(pygal.DateTimeLine, "Backlog, in flight and replicas")
    chart.add("backlog", [(at, b) for at, b, _, _ in samples])
    chart.add("in flight", [(at, f) for at, _, f, _ in samples])
    chart.add("replicas", [(at, r) for at, _, _, r in samples])
    return str(chart.render(is_unicode=True))
