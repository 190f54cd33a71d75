"""Volume files (ConfigMap, Secret, downwardAPI) of the node agent (hack/nodeagent/volumes.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from hack.nodeagent import volumes

DATA = {"a.json": b"{}", "b": b"bee"}


@pytest.mark.parametrize(
    ("items", "mode", "expected"),
    [
        (None, None, [("a.json", b"{}", 0o644), ("b", b"bee", 0o644)]),
        (None, 0o400, [("a.json", b"{}", 0o400), ("b", b"bee", 0o400)]),
        ([{"key": "b", "path": "sub/bee.txt"}], None, [("sub/bee.txt", b"bee", 0o644)]),
        ([{"key": "b", "path": "x", "mode": 0o600}], 0o444, [("x", b"bee", 0o600)]),
    ],
)
def test_keyed_files(
    items: list[dict[str, Any]] | None, mode: int | None, expected: list[volumes.FileSpec]
) -> None:
    assert volumes.keyed_files(DATA, items, mode) == expected


def test_keyed_files_missing_item_key() -> None:
    with pytest.raises(KeyError):
        volumes.keyed_files(DATA, [{"key": "nope", "path": "n"}], None)


def test_downward_files() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "labels": {"a": "1"}}}
    items = [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}},
        {"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}},
    ]
    assert volumes.downward_files(pod, items, None, "127.0.1.1", "127.0.0.1") == [
        ("name", b"p", 0o644),
        ("ns", b"ns", 0o644),
    ]


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", ".."])
def test_item_paths_stay_inside_the_volume(bad: str) -> None:
    with pytest.raises(ValueError):
        volumes.safe_relpath(bad)


def test_write_files(tmp_path: Path) -> None:
    volumes.write_files(str(tmp_path), [("sub/f", b"hello", 0o600), ("g", b"", 0o644)])
    assert (tmp_path / "sub" / "f").read_bytes() == b"hello"
    assert stat.S_IMODE(os.stat(tmp_path / "sub" / "f").st_mode) == 0o600
    assert (tmp_path / "g").read_bytes() == b""
    assert not [p for p in tmp_path.rglob(".tmp-*")]
