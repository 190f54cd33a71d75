"""The kubectl plugin installs alone: hack/release.sh's ``plugin`` part builds the kubectl-berth
wheel (plugin/pyproject.toml, the kubectl_berth package and only the berth_operator modules it
shares), it installs into a fresh venv without the operator's dependencies, and ``kubectl-berth
version`` there reports pyproject.toml's version, the chart's appVersion. The install resolves the
plugin's dependencies from the package index (pip's cache makes it quick).

aiohttp is the one operator dependency the venv holds: ``kubectl berth ui`` serves its page with it
(and the ``kubernetes`` client requires it itself since its version 36); the other commands never
import it."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]
OPERATOR_ONLY = ("kopf", "tenacity", "prometheus_client", "redis", "openai", "pydantic_settings")
"""Dependencies of the operator the plugin's install must not bring."""
NOT_IMPORTED = (*OPERATOR_ONLY, "aiohttp", "yarl")
"""Modules the plugin must not import (aiohttp is installed: the kubernetes client needs it)."""


def project() -> dict[str, Any]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])


def test_the_plugin_depends_on_a_subset_of_the_operators_pins() -> None:
    pins = [*project()["dependencies"], *project()["optional-dependencies"]["ui"]]
    root = {Requirement(r).name: str(Requirement(r).specifier) for r in pins}
    plugin = tomllib.loads((ROOT / "plugin" / "pyproject.toml").read_text())["project"]
    for spec in map(Requirement, plugin["dependencies"]):
        assert spec.name in root, f"{spec.name}: not a dependency of berth-operator"
        assert str(spec.specifier) == root[spec.name], (
            f"{spec}: berth-operator has {root[spec.name]}"
        )
    assert not {Requirement(r).name for r in plugin["dependencies"]} & set(OPERATOR_ONLY)


def test_the_plugin_wheel_installs_alone_and_reports_the_release_version(tmp_path: Path) -> None:
    version = str(project()["version"])
    out = tmp_path / "release"
    env = {**os.environ, "RELEASE_PARTS": "plugin"}
    subprocess.run(["bash", str(ROOT / "hack/release.sh"), version, str(out)], env=env, check=True)
    wheel = out / f"kubectl_berth-{version}-py3-none-any.whl"
    assert wheel.is_file(), sorted(p.name for p in out.iterdir())

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, str(wheel)], check=True)

    shown = subprocess.run(
        [str(venv / "bin/kubectl-berth"), "version"], capture_output=True, text=True, check=True
    )
    chart = yaml.safe_load((ROOT / "charts/berth/Chart.yaml").read_text())
    assert shown.stdout.strip() == f"kubectl-berth {version}"
    assert chart["appVersion"] == version
    probe = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m)])"
    found = subprocess.run(
        [str(venv / "bin/python"), "-c", probe, *OPERATOR_ONLY],
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.split() == [], "the plugin's venv has operator dependencies"
    probe = "import sys, kubectl_berth.cli; print(*[m for m in sys.argv[1:] if m in sys.modules])"
    imported = subprocess.run(
        [str(venv / "bin/python"), "-c", probe, *NOT_IMPORTED],
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.split() == [], "the plugin imports the operator's dependencies"
    probe = (
        "from kubectl_berth.ui import app; from importlib.resources import files; "
        "env = app.environment(); [env.get_template(t) for t in env.list_templates()]; "
        "print(len(env.list_templates()), "
        "files('kubectl_berth.ui').joinpath('static', 'live.js').is_file())"
    )
    ui = subprocess.run(
        [str(venv / "bin/python"), "-c", probe], capture_output=True, text=True, check=True
    )
    assert ui.stdout.split()[1] == "True" and int(ui.stdout.split()[0]) >= 10, ui.stdout
