"""The install pages run as written: docs/install.md end to end, then the chart README's quick
start, against the dev cluster.

What runs is read from the pages at test time, so a change to a page changes what this test
runs. The convention (Markdown comments, invisible on the rendered page):

- every fenced ``sh``/``bash`` block runs, in page order, with ``bash -euo pipefail``;
- ``<!-- docs-test: variables -->`` before a block: the block is not run; it is where the page
  tells the reader what to set (``export NAME=...``), and the test sets exactly those names, to
  the dev cluster's values (its image, its values file, a local scripted OpenAI-compatible model
  and a key for it) and nothing else;
- ``<!-- docs-test: skip (why) -->`` before a block: not run here, and the page says why.

The pages run in a directory holding ``charts`` (this checkout's) and ``my-values.yaml`` (the dev
cluster's values, hack/dev-values.sh: its image is loaded into the nodes, its Redis is the dev
cluster's), with the venv's ``kubectl-berth`` on ``PATH``. docs/install.md installs the release
``berth`` in ``berth-system`` as written, verifies with a session that must end ``Succeeded``,
upgrades, and uninstalls with its own steps; its ``team-a`` (the reader's namespace) is removed
afterwards. After Verify the reader's Secret still holds the key they gave (an example that
brought its own Secret once overwrote it). The README's quick start then installs again and waits
for the operator.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster import ROOT, DevCluster
from tests.integration.chart.test_helm_install import dev_values
from tests.integration.operator.harness import install_crds, scripted_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

INSTALL = ROOT / "docs" / "install.md"
CHART_README = ROOT / "charts" / "berth" / "README.md"
MARKER = re.compile(r"<!--\s*docs-test:\s*(variables|skip)\b(.*?)-->")
FENCE = re.compile(r"^```(?:sh|bash)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced shell block of a page: its text, its section and its marker (or "run")."""

    page: str
    section: str
    text: str
    kind: str


def blocks(page: Path) -> list[Block]:
    """The page's ``sh``/``bash`` blocks in order, with the marker right before each."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip().rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        sections = re.findall(r"^## (.+)$", text[: m.start()], re.M)
        found.append(
            Block(
                page.name,
                sections[-1] if sections else "quick start",
                m.group(1),
                marker.group(1) if marker else "run",
            )
        )
    return found


def exported(block: Block) -> set[str]:
    return set(re.findall(r"^export\s+([A-Z_][A-Z0-9_]*)=", block.text, re.M))


def run(block: Block, cwd: Path, env: dict[str, str]) -> float:
    """Run ``block`` with bash as written; returns seconds. Fails with its output."""
    print(f"[docs] {block.page} / {block.section}: running", file=sys.stderr, flush=True)
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - started
    print(proc.stdout[-3000:], file=sys.stderr)
    assert proc.returncode == 0, (
        f"{block.page}, section {block.section!r}, exit {proc.returncode}:\n{block.text}\n"
        f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    )
    print(f"[docs] {block.page} / {block.section}: ok in {seconds:.1f}s", file=sys.stderr)
    return seconds


def secret_key(dc: DevCluster, namespace: str, name: str) -> str:
    """The decoded ``api-key`` of Secret ``namespace/name``."""
    out = dc.kubectl("-n", namespace, "get", "secret", name, "-o", "jsonpath={.data.api-key}")
    return base64.b64decode(out.stdout).decode()


def absent(dc: DevCluster, *namespaces: str) -> None:
    """No release ``berth`` and none of ``namespaces`` (a clean slate, or the end of a run)."""
    subprocess.run(
        ["helm", "uninstall", "berth", "-n", "berth-system", "--wait"],
        env=dc.proc_env, capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    for ns in namespaces:
        dc.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=true",
                   "--timeout=180s", check=False, timeout=200)  # fmt: skip


@pytest.fixture
def workdir(dev_cluster: DevCluster) -> Iterator[Path]:
    """Where the pages run: ``charts`` of this checkout and the dev values as my-values.yaml."""
    with tempfile.TemporaryDirectory(prefix="berth-docs-") as tmp:
        where = Path(tmp)
        (where / "charts").symlink_to(ROOT / "charts")
        shutil.copy(dev_values(dev_cluster, where), where / "my-values.yaml")
        yield where


def test_install_page_and_chart_quick_start_run_as_written(
    dev_cluster: DevCluster, workdir: Path
) -> None:
    dc = dev_cluster
    page = blocks(INSTALL)
    (variables,) = [b for b in page if b.kind == "variables"]
    skipped = [b for b in page if b.kind == "skip"]
    verified = [b for b in page if b.section == "Verify"][-1]  # checks follow its last block
    assert all(b.section == "Build and push the image" for b in skipped), skipped
    image = dc.image
    script = {"turns": [{"text": "hello from the install page"}], "on_exhausted": "repeat_last"}
    absent(dc, "team-a", "berth-system")
    started = time.monotonic()
    with scripted_model(script) as llm:
        given = {
            "IMAGE_REPOSITORY": image.rsplit(":", 1)[0],
            "IMAGE_TAG": image.rsplit(":", 1)[1],
            "VALUES": "my-values.yaml",
            "LLM_BASE_URL": llm.base_url,
            "LLM_API_KEY": "sk-docs-test",
            "LLM_MODEL": "openai/scripted",
        }
        assert exported(variables) == set(given), "the page's variables changed: set them here"
        env = {
            **dc.proc_env,
            **given,
            "PATH": f"{Path(sys.executable).parent}:{dc.proc_env.get('PATH', '')}",
        }
        timings: dict[str, float] = {}
        try:
            for block in page:
                if block.kind == "run":
                    timings[block.section] = timings.get(block.section, 0) + run(
                        block, workdir, env
                    )
                if block is verified:
                    assert llm.requests, "the Verify session never called the model"
                    assert secret_key(dc, "team-a", "llm-credentials") == given["LLM_API_KEY"]
            dc.kubectl("delete", "namespace", "team-a", "--wait=true", "--timeout=180s")
            for block in blocks(CHART_README):
                if block.kind == "run":
                    timings["chart README"] = timings.get("chart README", 0) + run(
                        block, workdir, env
                    )
        finally:
            absent(dc, "team-a", "berth-system")
            install_crds(dc)  # the page's uninstall removed them; later tests expect them
    total = time.monotonic() - started
    lines = ", ".join(f"{k} {v:.0f}s" for k, v in timings.items())
    print(f"\n[docs] install page and chart quick start: {total:.0f}s ({lines})", file=sys.stderr)
