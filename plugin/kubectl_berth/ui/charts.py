"""The pages' plots, drawn by leather (a small pure-Python charting library) as inline SVG: no
script, nothing fetched, so a page stays self-contained and light.

Each function returns SVG text (``<svg ...>``) for a ``Markup`` in a template, or ``""`` when
there is nothing to plot yet (the template says so instead).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import leather

from kubectl_berth.ui.model import RunView

WIDTH, HEIGHT = 900, 260
"""Size of a chart in SVG user units (the page scales it to its column)."""
COLORS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2")


def _utc(at: datetime) -> datetime:
    """``at`` as a naive UTC time (leather's time scale compares naive datetimes)."""
    return at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo else at


def _svg(chart: Any, height: int = HEIGHT) -> str:
    return str(chart.to_svg(width=WIDTH, height=height))


def _spread(times: list[datetime]) -> tuple[datetime, datetime]:
    """The x range of ``times``, at least a minute wide (leather needs a range, not a point)."""
    start, end = min(times), max(times)
    return start, max(end, start + timedelta(minutes=1))


def token_chart(samples: list[tuple[datetime, int]], budget: int | None) -> str:
    """Total tokens over time (sampled while the view runs) against the budget, if any."""
    if not samples:
        return ""
    chart = leather.Chart("Tokens used (total) against the budget")
    samples = [(_utc(at), total) for at, total in samples]
    start, end = _spread([at for at, _ in samples])
    chart.add_x_scale(start, end)
    top = max(max(total for _, total in samples), budget or 0, 1)
    chart.add_y_scale(0, top)
    chart.add_line(samples, name="tokens", stroke_color=COLORS[0])
    if budget is not None:
        chart.add_line([(start, budget), (end, budget)], name="budget", stroke_color=COLORS[1])
    return _svg(chart)


def runs_chart(runs: list[RunView], now: datetime) -> str:
    """The runs as bars across time, one line per run at its own height, named ``run on node``
    (a Gantt chart made of thick lines)."""
    if not runs:
        return ""
    chart = leather.Chart("Runs across pods and nodes")
    spans = [(_utc(run.started or now), _utc(run.ended or now)) for run in runs]
    start, end = _spread([t for span in spans for t in span])
    chart.add_x_scale(start, end)
    chart.add_y_scale(0, len(runs) + 1)
    for i, (run, (begin, finish)) in enumerate(zip(runs, spans, strict=True)):
        label = f"{run.run_id} on {run.node or '?'} ({run.outcome})"
        color = COLORS[i % len(COLORS)]
        chart.add_line(
            [(begin, len(runs) - i), (finish, len(runs) - i)],
            name=label,
            stroke_color=color,
            width=10,
        )
    return _svg(chart, 110 + 40 * len(runs))


def worker_chart(samples: list[tuple[datetime, int, int, int]]) -> str:
    """A LaneWorker's backlog, in-flight tasks and replicas over time."""
    if not samples:
        return ""
    chart = leather.Chart("Backlog, in flight and replicas")
    samples = [(_utc(at), b, f, r) for at, b, f, r in samples]
    chart.add_x_scale(*_spread([at for at, *_ in samples]))
    chart.add_y_scale(0, max(1, *(max(b, f, r) for _, b, f, r in samples)))
    for i, label in enumerate(("backlog", "in flight", "replicas")):
        points = [(s[0], s[i + 1]) for s in samples]
        chart.add_line(points, name=label, stroke_color=COLORS[i])
    return _svg(chart)
