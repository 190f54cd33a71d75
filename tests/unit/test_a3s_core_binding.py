"""The installed a3s-code-core binding is the pinned one: its reported core version equals the
pin in a3s_core_binding/Cargo.toml and the version Cargo.lock resolved, and it is a 9.x."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from session_runtime.a3s_core.binding import core_version
from tests.a3s_core_support import binding

CRATE = Path(__file__).resolve().parents[2] / "a3s_core_binding"


def test_the_binding_reports_the_pinned_core_version() -> None:
    binding()
    manifest = tomllib.loads((CRATE / "Cargo.toml").read_text())
    pin = manifest["dependencies"]["a3s-code-core"]["version"]
    lock = tomllib.loads((CRATE / "Cargo.lock").read_text())
    [locked] = [p["version"] for p in lock["package"] if p["name"] == "a3s-code-core"]
    assert pin == f"={locked}"  # an exact pin, resolved as written
    assert core_version() == locked
    assert re.fullmatch(r"9\.\d+\.\d+", locked)
