"""hack/prom_targets.py: the dev cluster's Prometheus service discovery from a pod watch."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "prom_targets.py"


@pytest.fixture(scope="module")
def sd() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prom_targets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pod(
    name: str,
    *,
    uid: str | None = None,
    phase: str = "Running",
    ip: str = "198.18.0.7",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid or f"uid-{name}",
            "labels": {"app.kubernetes.io/component": "session"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"}
            if annotations is None
            else annotations,
        },
        "status": {"phase": phase, "podIP": ip},
    }


def test_target_of_an_annotated_running_pod(sd: ModuleType) -> None:
    assert sd.target_of(pod("a")) == {
        "targets": ["198.18.0.7:8080"],
        "labels": {"namespace": "ns", "pod": "a", "component": "session"},
    }
    with_path = pod(
        "b",
        annotations={
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9090",
            "prometheus.io/path": "/m",
        },
    )
    assert sd.target_of(with_path)["labels"]["__metrics_path__"] == "/m"


@pytest.mark.parametrize(
    "p",
    [
        pod("pending", phase="Pending"),
        pod("no-ip", ip=""),
        pod("not-annotated", annotations={}),
        pod("no-port", annotations={"prometheus.io/scrape": "true"}),
        pod("opted-out", annotations={"prometheus.io/scrape": "false", "prometheus.io/port": "1"}),
    ],
)
def test_pods_not_to_scrape(sd: ModuleType, p: dict[str, Any]) -> None:
    assert sd.target_of(p) is None


def test_watch_events_update_the_listing(sd: ModuleType) -> None:
    targets = sd.Targets()
    assert not targets.listed.is_set()
    targets.replace([pod("b"), pod("a"), pod("pending", phase="Pending")])
    assert targets.listed.is_set()
    assert [g["labels"]["pod"] for g in json.loads(targets.render())] == ["a", "b"]

    targets.apply("ADDED", pod("c"))
    targets.apply("MODIFIED", pod("a", phase="Succeeded"))  # ended: no longer scraped
    targets.apply("DELETED", pod("b"))
    targets.apply("MODIFIED", pod("pending"))  # now Running
    assert [g["labels"]["pod"] for g in json.loads(targets.render())] == ["c", "pending"]

    targets.replace([pod("d")])  # a new listing replaces everything
    assert [g["labels"]["pod"] for g in json.loads(targets.render())] == ["d"]


class Chunked:
    """A streamed response whose chunks split lines anywhere."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt: Any = None, decode_content: bool = True) -> Any:
        yield from self.chunks


def test_lines_whatever_the_chunk_boundaries(sd: ModuleType) -> None:
    events = [{"type": "ADDED", "n": i} for i in range(3)]
    body = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)] + [b"\n\n"]
    assert [json.loads(line) for line in sd.lines(Chunked(chunks))] == events
    assert list(sd.lines(Chunked([b'{"last": true}']))) == [b'{"last": true}']
