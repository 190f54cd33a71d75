"""The pages and the chart's notes say what the chart and the operator really do.

Each check reads a page as a user would and compares it with what the code defines: the CRDs
the chart ships, the name of the rendered front-door Service, the alert runbook links and the
condition reasons the operator sets. A page that drifts from the code fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from berth_operator.api.conditions import Reason

from tests.unit.chart.helm import CHART, ROOT, by_kind, documents, render

DOCS = ROOT / "docs"
NOTES = CHART / "templates" / "NOTES.txt"

STEADY_STATE_REASONS = {
    "NotRunning",
    "RunCompleted",
    "InProgress",
    "Succeeded",
    "Pending",
    "NotPassivated",
    "WithinBudget",
    "AsExpected",
    "NotFailed",
}
"""Reasons of conditions that are False/True in a healthy session: nothing to troubleshoot."""


def _crd_plurals() -> set[str]:
    names = {p.name for p in (CHART / "crds").glob("*.yaml")}
    assert names, "the chart ships no CRDs"
    return {n.removeprefix("berth.dev_").removesuffix(".yaml") for n in names}


def _anchors(page: Path) -> set[str]:
    """GitHub-style anchors of a Markdown page's headings."""
    out = set()
    for line in page.read_text().splitlines():
        m = re.match(r"#+ (.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).lower())
            out.add(text.replace(" ", "-"))
    return out


def test_notes_name_every_crd_the_chart_ships() -> None:
    notes = NOTES.read_text()
    missing = [p for p in sorted(_crd_plurals()) if p not in notes]
    assert not missing, f"NOTES.txt does not name the CRDs {missing}"


def test_install_uninstall_steps_delete_every_kind() -> None:
    page = (DOCS / "install.md").read_text()
    uninstall = page[page.index("## Uninstall") :]
    missing = [p for p in sorted(_crd_plurals()) if p not in uninstall]
    assert not missing, f"docs/install.md's uninstall steps miss {missing}"


def test_sessions_page_names_the_rendered_gateway_service() -> None:
    docs = documents(render({"gateway": {"enabled": True}}))
    services = {d["metadata"]["name"] for d in by_kind(docs, "Service")}
    gateway = [s for s in services if s.endswith("gateway")]
    assert len(gateway) == 1, services
    page = (DOCS / "sessions.md").read_text()
    assert f"`{gateway[0]}`" in page, f"docs/sessions.md does not name Service {gateway[0]}"


def test_every_alert_links_to_its_troubleshooting_section() -> None:
    docs = documents(render({"prometheusRule": {"enabled": True}}))
    [rule] = by_kind(docs, "PrometheusRule")
    anchors = _anchors(DOCS / "troubleshooting.md")
    sources = re.findall(r"^  - (\S+)", (CHART / "Chart.yaml").read_text(), re.M)
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            url = alert["annotations"]["runbook_url"]
            page, _, anchor = url.partition("#")
            assert page.startswith(sources[0]) and page.endswith("/docs/troubleshooting.md"), url
            assert anchor == alert["alert"].lower() and anchor in anchors, url


def test_runbook_base_url_can_be_overridden() -> None:
    base = "https://wiki.example.test/berth/runbook"
    docs = documents(render({"prometheusRule": {"enabled": True, "runbookBaseURL": base}}))
    [rule] = by_kind(docs, "PrometheusRule")
    urls = {a["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for a in g["rules"]}
    assert urls and all(u.startswith(base + "#") for u in urls), urls


def test_troubleshooting_explains_every_reason_a_user_may_see() -> None:
    page = (DOCS / "troubleshooting.md").read_text()
    reasons = {v for k, v in vars(Reason).items() if k.isupper() and isinstance(v, str)}
    missing = sorted(r for r in reasons - STEADY_STATE_REASONS if f"`{r}`" not in page)
    assert not missing, f"docs/troubleshooting.md does not explain {missing}"


def test_anchor_extraction_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n## Recovery (`Degraded`, `Failed`)\n### BerthOperatorDown\n")
    assert _anchors(page) == {"title", "recovery-degraded-failed", "berthoperatordown"}
