"""The release's chart package installs and runs a session, end to end.

``hack/release.sh VERSION chart`` (the part of ``make release`` that packages the chart, the same
code path) writes ``berth-VERSION.tgz``; the test reads its version, appVersion and image defaults
with ``helm show``, then ``helm install``\\ s that package, not the source folder, into the dev
cluster, runs one AgentSession to ``Succeeded`` against the scripted model, and uninstalls it
with nothing of the release left behind.

The image: the package's defaults name ``berth:VERSION``, the release's OCI archive, which a user
pushes to their registry. The dev cluster has no registry, and building and loading the release
image (``make release``'s ``image`` part, ~3 minutes cold and ~600 MB per node) would prove only
what the Dockerfile's own tests and the dev image already do, so the install takes the dev values
(hack/dev-values.sh): the dev image already loaded into the nodes, by ``image.repository`` and
``image.tag`` exactly as docs/install.md tells a user to name their pushed image.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
import uuid
from pathlib import Path

import pytest
import yaml

from tests.cluster import ROOT, DevCluster
from tests.e2e.passivation_support import REAL_NODE_LABEL, apply, status, wait
from tests.integration.chart.support import helm
from tests.integration.chart.test_helm_install import dev_values, leftovers
from tests.integration.operator.harness import SECRET, install_crds, scripted_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def package_chart(out: Path) -> Path:
    """The chart package hack/release.sh writes into ``out``."""
    env = {**os.environ, "RELEASE_DIR": str(out), "PY": sys.executable}
    subprocess.run(["bash", str(ROOT / "hack/release.sh"), VERSION, "chart"], env=env, check=True)
    package = out / f"berth-{VERSION}.tgz"
    assert package.is_file(), sorted(p.name for p in out.iterdir())
    return package


def test_the_packaged_chart_installs_runs_a_session_and_uninstalls(
    dev_cluster: DevCluster,
) -> None:
    dc = dev_cluster
    release = f"release-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="berth-release-") as tmp:
        package = package_chart(Path(tmp) / "release")
        chart = yaml.safe_load(helm(dc, "show", "chart", str(package)).stdout)
        assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
        image = yaml.safe_load(helm(dc, "show", "values", str(package)).stdout)["image"]
        assert (image["repository"], image["tag"]) == ("berth", VERSION)

        values = dev_values(dc, Path(tmp))
        dev_image = yaml.safe_load(values.read_text())["image"]
        install_crds(dc)  # helm never updates CRDs: this tree's, as test_upgrade does
        script = {"turns": [{"text": "released and running"}]}
        with dc.namespace("release") as ns, scripted_model(script) as llm:
            helm(
                dc, "install", release, str(package), "--namespace", ns, "-f", str(values),
                "--set", f"operator.watchNamespaces={{{ns}}}", "--wait", "--timeout", "4m",
            )  # fmt: skip
            try:
                deployed = helm(dc, "list", "-n", ns, "-o", "yaml").stdout
                assert yaml.safe_load(deployed)[0]["app_version"] == VERSION
                operator = dc.kubectl(
                    "-n", ns, "get", "deployment", f"{release}-berth-operator",
                    "-o", "jsonpath={.spec.template.spec.containers[0].image}",
                ).stdout  # fmt: skip
                assert operator == f"{dev_image['repository']}:{dev_image['tag']}"
                session = {
                    "apiVersion": "berth.dev/v1alpha1",
                    "kind": "AgentSession",
                    "metadata": {"name": "hello"},
                    "spec": {
                        "prompt": "say hello",
                        "model": "openai/gpt-4o-mini",
                        "llm": {
                            "baseURL": llm.base_url,
                            "apiKeySecretRef": {"name": "llm-credentials", "key": "api-key"},
                        },
                        "placement": {"nodeSelector": {REAL_NODE_LABEL: "real"}},
                    },
                }
                apply(dc, ns, [SECRET, session])
                st = wait(
                    "the session to end",
                    lambda: (
                        (s := status(dc, ns, "hello")).get("phase") in ("Succeeded", "Failed") and s
                    ),
                    cap=300,
                )
                assert st["phase"] == "Succeeded", st
            finally:  # the session first, while its operator can still finalize it
                dc.kubectl(
                    "-n", ns, "delete", "agentsessions", "--all", "--timeout=180s",
                    check=False, timeout=200,
                )  # fmt: skip
                uninstalled = helm(
                    dc, "uninstall", release, "-n", ns, "--wait", "--timeout", "4m", check=False
                )
            assert uninstalled.returncode == 0, uninstalled.stderr
            assert wait(
                "the release's objects to go", lambda: not leftovers(dc, ns, release) or None
            )
