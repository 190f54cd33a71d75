"""The image installs a locked dependency set: requirements.lock (``make lock``) pins every
dependency of pyproject.toml, and what builds the wheel, with hashes, and the Dockerfile installs
from it with ``--require-hashes``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
LOCK = ROOT / "requirements.lock"


def pins() -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of every pin in the lock."""
    out: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text()):
        m = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)", block)
        if m:
            out[canonicalize_name(m[1])] = (m[2], block.count("--hash=sha256:"))
    return out


def test_every_dependency_is_pinned_with_hashes() -> None:
    locked = pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    for spec in map(Requirement, wanted):
        name = canonicalize_name(spec.name)
        assert name in locked, f"{spec} is not in requirements.lock: run `make lock`"
        version = locked[name][0]
        assert spec.specifier.contains(version), f"{name}=={version} breaks {spec}: `make lock`"
    assert all(hashes for _, hashes in locked.values()), "a pin without --hash"


def test_the_image_installs_the_lock_with_hashes_required() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "requirements.lock" in dockerfile
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    locked = [line for line in installs if "-r requirements.lock" in line]
    assert locked and all("--require-hashes" in line for line in locked)
    assert "!requirements.lock" in (ROOT / ".dockerignore").read_text()
    assert "requirements.lock" in (ROOT / "hack" / "image.sh").read_text()
