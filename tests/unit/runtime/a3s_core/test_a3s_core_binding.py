"""The installed a3s-code-core binding is the pinned one: its reported core version equals the
exact pin in a3s_core_binding/Cargo.toml, and it is a 9.x. (No Cargo.lock is committed: the pin
is exact, so the built core is the pinned version whatever else resolves.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from session_runtime.a3s_core.binding import core_version
from tests.a3s_core_support import binding

CRATE = Path(__file__).resolve().parents[4] / "a3s_core_binding"


def test_the_binding_reports_the_pinned_core_version() -> None:
    binding()
    manifest = tomllib.loads((CRATE / "Cargo.toml").read_text())
    pin = manifest["dependencies"]["a3s-code-core"]["version"]
    assert pin.startswith("=")  # an exact pin
    assert core_version() == pin.removeprefix("=")
    assert re.fullmatch(r"9\.\d+\.\d+", core_version())
