"""One version: pyproject.toml's. The installed distribution, the operator's ``__version__``, the
default session image tag and the chart's version and appVersion all follow it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml
from berth_operator import DISTRIBUTION, __version__
from berth_operator.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[2]


def test_everything_carries_the_pyproject_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    assert __version__ == project["version"]
    assert OperatorSettings().images.session.endswith(f":{project['version']}")
    chart = yaml.safe_load((ROOT / "charts" / "berth" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (project["version"], project["version"])


def test_the_license_is_the_one_pyproject_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
