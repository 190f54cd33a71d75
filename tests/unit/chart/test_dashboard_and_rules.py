"""The Grafana dashboard and the alert rules: valid, and about metrics that really exist.

- Dashboard schema: the JSON is type-checked by TypeScript against ``Dashboard`` of
  ``@grafana/schema`` (Grafana's own published schema types, generated from its CUE kinds), with
  excess-property checks, in a throw-away package under ``~/.cache/berth/grafana-schema``. (The
  maintained linter github.com/grafana/dashboard-linter is not served by the Go module proxy.)
- Every panel query and every alert expression names only metrics that the operator's, the
  session pod's and the worker's registries define (the integration tests repeat this against
  the real ``/metrics`` of running processes).
- ``promtool check rules`` on the PrometheusRule rendered by helm.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.chart.helm import CHART, documents, one, render, require_tool
from tests.unit.chart.metricnames import (
    dashboard_exprs,
    exported_names,
    referenced_metrics,
)

DASHBOARD = CHART / "files" / "dashboards" / "berth.json"
TYPESCRIPT = "5.9.3"
GRAFANA_SCHEMA = "13.2.3"
TSC_FLAGS = [
    "--noEmit",
    "--strict",
    "--skipLibCheck",
    "--moduleResolution",
    "bundler",
    "--module",
    "esnext",
    "--target",
    "es2022",
]


def berth_metric_names() -> set[str]:
    """Names the three programs export, from their real registries."""
    import berth_operator.budget.service
    import berth_operator.budget_metrics
    import berth_operator.metrics  # noqa: F401  (registers berth_operator_* in the default registry)
    import prometheus_client

    from session_runtime.metrics import SessionMetrics
    from session_runtime.worker.metrics import WorkerMetrics

    operator_names = {
        n for n in exported_names(prometheus_client.REGISTRY) if n.startswith("berth_operator_")
    }
    return (
        operator_names
        | exported_names(SessionMetrics().registry)
        | exported_names(WorkerMetrics().registry)
        | {"up"}
    )


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def rendered_rules() -> dict[str, Any]:
    docs = documents(render({"prometheusRule": {"enabled": True}}))
    spec: dict[str, Any] = one(docs, "PrometheusRule")["spec"]
    return spec


# --- dashboard ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def grafana_schema() -> Path:
    """A package dir with typescript and @grafana/schema (pinned), installed with npm once."""
    npm = require_tool("npm")
    cache = Path(os.environ.get("BERTH_CACHE", Path.home() / ".cache" / "berth"))
    pkg = cache / f"grafana-schema-{GRAFANA_SCHEMA}-ts-{TYPESCRIPT}"
    if not (pkg / "node_modules" / ".bin" / "tsc").exists():
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "package.json").write_text('{"private": true}\n')
        subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--silent",
                f"typescript@{TYPESCRIPT}",
                f"@grafana/schema@{GRAFANA_SCHEMA}",
            ],
            cwd=pkg,
            check=True,
            capture_output=True,
            timeout=600,
        )
    return pkg


def typecheck(pkg: Path, dashboard: dict[str, Any], name: str) -> subprocess.CompletedProcess[str]:
    src = pkg / f"{name}.ts"
    src.write_text(
        "import type { Dashboard } from '@grafana/schema';\n"
        f"export const dashboard: Dashboard = {json.dumps(dashboard, indent=1)};\n"
    )
    return subprocess.run(
        [str(pkg / "node_modules" / ".bin" / "tsc"), *TSC_FLAGS, src.name],
        cwd=pkg,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_dashboard_matches_grafana_schema(grafana_schema: Path) -> None:
    proc = typecheck(grafana_schema, load_dashboard(), "berth_dashboard")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_rejects_a_broken_dashboard(grafana_schema: Path) -> None:
    """The check can fail: a wrong type and an unknown panel field are both reported."""
    broken = load_dashboard()
    broken["panels"][1]["gridPos"]["w"] = "12"
    broken["panels"][2]["targetz"] = []
    proc = typecheck(grafana_schema, broken, "broken_dashboard")
    assert proc.returncode != 0
    assert "Type 'string' is not assignable to type 'number'" in proc.stdout
    assert "'\"targetz\"' does not exist" in proc.stdout


def test_dashboard_layout_and_wiring() -> None:
    dash = load_dashboard()
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert dash["uid"] == "berth-overview"
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p["targets"], p["title"]
    titles = {p["title"] for p in panels}
    for wanted in (
        "Sessions by phase",
        "Passivation latency",
        "Resume latency",
        "Lane pressure vs replicas",
        "Tokens used",
        "Checkpoint write time",
    ):
        assert wanted in titles


def test_every_dashboard_query_names_an_existing_metric() -> None:
    known = berth_metric_names()
    exprs = dashboard_exprs(load_dashboard())
    assert len(exprs) >= 10
    for title, expr in exprs:
        names = referenced_metrics(expr)
        assert names, f"{title}: no Berth metric in {expr!r}"
        assert names <= known, f"{title}: unknown metrics {sorted(names - known)} in {expr!r}"


def test_metric_name_extraction_can_fail() -> None:
    """The check above would catch a typo (the extractor is not vacuous)."""
    known = berth_metric_names()
    names = referenced_metrics('sum by (state) (rate(berth_session_statez{state="x"}[5m]))')
    assert names == {"berth_session_statez"} and not names <= known


def test_dashboard_configmap_carries_the_json() -> None:
    cm = one(documents(render()), "ConfigMap", "-dashboard")
    assert json.loads(cm["data"]["berth.json"]) == load_dashboard()


# --- rules --------------------------------------------------------------------------------------


def test_rules_cover_the_alerts_of_the_issue() -> None:
    alerts = {r["alert"] for g in rendered_rules()["groups"] for r in g["rules"]}
    assert alerts == {
        "BerthPassivationPastDeadline",
        "BerthPassivationStuck",
        "BerthSessionCrashLooping",
        "BerthSessionBudgetExhausted",
        "BerthLaneWorkerBacklogHigh",
        "BerthOperatorDown",
        "BerthBudgetExhausted",
        "BerthStoreVolumeFillingUp",
        "BerthSessionStoreFailing",
    }


def test_every_rule_names_an_existing_metric() -> None:
    known = berth_metric_names()
    for group in rendered_rules()["groups"]:
        for rule in group["rules"]:
            names = referenced_metrics(rule["expr"])
            assert names, rule["alert"]
            assert names <= known, f"{rule['alert']}: unknown {sorted(names - known)}"


def test_rule_thresholds_come_from_values() -> None:
    values = {
        "prometheusRule": {
            "enabled": True,
            "thresholds": {"backlog": 7, "backlogFor": "3m"},
            "operatorSelector": 'job="berth"',
        }
    }
    rules = {
        r["alert"]: r
        for g in one(documents(render(values)), "PrometheusRule")["spec"]["groups"]
        for r in g["rules"]
    }
    backlog = rules["BerthLaneWorkerBacklogHigh"]
    assert backlog["expr"].endswith("> 7") and backlog["for"] == "3m"
    assert rules["BerthOperatorDown"]["expr"] == 'absent(berth_operator_leader{job="berth"} == 1)'


def test_promtool_check_rules(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    path = tmp_path / "berth-rules.yaml"
    path.write_text(yaml.safe_dump(rendered_rules()))
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 9 rules found" in proc.stdout


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    spec = rendered_rules()
    spec["groups"][0]["rules"][0]["expr"] = "max by (pod (berth_session_state)"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0
