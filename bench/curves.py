"""Cost curves: runs ``bench/checkpoint.py --baseline-src REF`` (this tree's store and git ref
``REF``'s, default ``main``, in the same run) and ``bench/lanes.py`` (dispatch at 1, 10, 100
sessions per process), prints their tables and draws ``bench/curves.png``; with
``--placement F`` (the ``--json`` output of ``bench/placement.py``, which needs the dev cluster)
also the placement curve: total time until every pod is Running for bare pods and
AgentSessions, and the operator's peak RSS, against N; with ``--peers F`` (the ``--results`` of
``bench/peers.py``, its placement phase run at several N) instead two panels of the peer
comparison: time until all Running and apiserver writes per object against N, for bare pods,
AgentSessions, Jobs (controller-manager at 1000/2000 QPS and at its defaults) and agent-sandbox
Sandboxes.

    .venv/bin/python bench/curves.py [--samples 60] [--baseline main] [--out bench/curves.png]
                                     [--checkpoint-json F] [--placement F] [--peers F]

``--checkpoint-json F`` draws an earlier ``checkpoint.py --baseline-src REF --json F`` run
instead of measuring again. Needs matplotlib (the ``dev`` extra) and ``redis-server`` only if
``--redis`` is given. Timing is printed and drawn, never asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run(script: str, *args: str) -> Any:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, str(HERE / script), *args, "--json", out.name]
        subprocess.run(cmd, check=True)
        return json.loads(Path(out.name).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--samples", default="60")
    ap.add_argument("--baseline", default="main", help="git ref whose store is drawn beside")
    ap.add_argument("--checkpoint-json", help="draw this checkpoint.py --json output instead")
    ap.add_argument("--out", default=str(HERE / "curves.png"))
    ap.add_argument("--redis", action="store_true", help="also run the external round trip")
    ap.add_argument("--placement", help="bench/placement.py --json output to draw as well")
    ap.add_argument("--peers", help="bench/peers.py --results to draw (instead of --placement)")
    args = ap.parse_args()
    placement = json.loads(Path(args.placement).read_text()) if args.placement else None
    peers = json.loads(Path(args.peers).read_text())["placement"] if args.peers else None

    if args.checkpoint_json:
        cp = json.loads(Path(args.checkpoint_json).read_text())
    else:
        cp = run("checkpoint.py", "--samples", args.samples, "--baseline-src", args.baseline)
    ref = cp.get("baseline_ref", args.baseline)
    lanes = run("lanes.py", *([] if args.redis else ["--skip-redis"]))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 5 if peers else 4 if placement else 3
    fig, axes = plt.subplots(1, panels, figsize=(4.4 * panels, 3.8))
    ax1, ax2, ax3 = axes[:3]
    stores = ((cp["ages"], "o-", "tab:blue", "this tree"), (cp["baseline"], "s--", "tab:red", ref))
    for ages, style, color, label in stores:
        rounds = [a["round"] for a in ages]
        ax1.plot(rounds, [a["wall_s"] * 1e3 for a in ages], style, c=color, label=f"{label}, wall")
        ax1.plot(
            rounds,
            [a["cpu_s"] * 1e3 for a in ages],
            style,
            c=color,
            alpha=0.4,
            label=f"{label}, CPU only",
        )
        ratio = [a["bare_ratio"] for a in ages]
        ax2.plot(rounds, ratio, style, c=color, label=f"{label}, round / floor")
        flat = [a["wall_ratio"] for a in ages]
        ax2.plot(rounds, flat, style, c=color, alpha=0.4, label=f"{label}, round N / round 10")
    floor = [a["bare_s"] * 1e3 for a in cp["ages"]]
    ax1.plot([a["round"] for a in cp["ages"]], floor, "k:", label="floor: write+fsync+rename")
    ax1.set(
        xscale="log",
        yscale="log",
        xlabel="session age (round)",
        ylabel="ms per round",
        title="checkpoint round (median)",
    )
    ax1.legend(fontsize=7)
    ax2.axhline(1.5, color="grey", lw=0.8, ls=":")
    ax2.axhline(1.1, color="grey", lw=0.8, ls="-.")
    ax2.set(
        xscale="log",
        xlabel="session age (round)",
        ylabel="ratio",
        title="round / floor, and round N / round 10",
        ylim=(0, None),
    )
    ax2.legend(fontsize=7)
    sessions = [c["sessions"] for c in lanes["curve"]]
    ax3.plot(sessions, [c["us_per_task"] for c in lanes["curve"]], "o-", label="LaneQueue.submit")
    ax3.plot(sessions, [c["bare_us"] for c in lanes["curve"]], "k:", label="asyncio.create_task")
    ax3.set(
        xscale="log",
        xlabel="sessions per process",
        ylabel="µs per task",
        title=f"lane dispatch ({lanes['tasks']} tasks in all)",
        ylim=(0, None),
    )
    ax3.legend(fontsize=7)
    if peers:
        _draw_peers(axes[3], axes[4], peers)
    elif placement:
        _draw_placement(axes[3], placement)
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")


def _draw_placement(ax: Any, placement: dict[str, Any]) -> None:
    rows = placement["rows"]
    counts = [r["n"] for r in rows]
    ax.plot(counts, [r["bare"]["total"] for r in rows], "k:o", label="bare pods, all Running")
    ax.plot(counts, [r["sessions"]["total"] for r in rows], "o-", label="AgentSessions")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="objects created at once (N)",
        ylabel="s until all Running",
        title=f"placement on {placement['kwok_nodes']} kwok nodes",
    )
    rss = ax.twinx()
    rss.plot(counts, [r["rss_mib"] for r in rows], "s--", color="tab:red", label="operator RSS")
    rss.set_ylabel("operator peak RSS (MiB)", color="tab:red")
    ax.legend(fontsize=7, loc="upper left")
    rss.legend(fontsize=7, loc="lower right")


PEER_STYLES = (
    ("bare", "k:o", "bare pods"),
    ("sessions", "o-", "AgentSessions"),
    ("jobs", "s-", "Jobs (kcm 1000/2000 QPS)"),
    ("jobs-default-qps", "s--", "Jobs (kcm default QPS)"),
    ("agent-sandbox", "^-", "agent-sandbox Sandboxes"),
)


def _draw_peers(time_ax: Any, writes_ax: Any, placement: dict[str, Any]) -> None:
    """Time until all Running and apiserver writes per object against N, one line a kind."""
    rows = placement["rows"]
    for kind, style, label in PEER_STYLES:
        have = [r for r in rows if kind in r["kinds"]]
        counts = [r["n"] for r in have]
        time_ax.plot(counts, [r["kinds"][kind]["total"] for r in have], style, label=label)
        per = [r["kinds"][kind]["writes_per_object"] for r in have]
        writes_ax.plot(counts, per, style, label=label)
    time_ax.set(
        xscale="log",
        yscale="log",
        xlabel="objects created at once (N)",
        ylabel="s until all Running",
        title=f"placement vs peers, {placement['kwok_nodes']} kwok nodes",
    )
    writes_ax.set(
        xscale="log",
        xlabel="objects created at once (N)",
        ylabel="apiserver writes per object",
        title="writes per object (every component's)",
        ylim=(0, None),
    )
    time_ax.legend(fontsize=7)
    writes_ax.legend(fontsize=7)


if __name__ == "__main__":
    main()
