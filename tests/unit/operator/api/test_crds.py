"""The committed CRDs in crds/ equal what the models generate, and the schema is structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from berth_operator.api import crdgen

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("name", sorted(crdgen.rendered_files()))
def test_committed_crd_matches_models(name: str) -> None:
    committed = (ROOT / "crds" / name).read_text()
    assert committed == crdgen.rendered_files()[name], f"crds/{name} is stale: run `make crds`"


def _walk(node: dict[str, Any], path: str) -> list[str]:
    """Structural-schema problems under ``node`` (Kubernetes "Specifying a structural schema")."""
    problems: list[str] = []
    for bad in ("$ref", "anyOf", "allOf", "oneOf", "title", "$defs", "propertyNames"):
        if bad in node:
            problems.append(f"{path}: has {bad}")
    if "type" not in node and not (
        node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    ):
        problems.append(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties")
    for key, child in (node.get("properties") or {}).items():
        problems += _walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        problems += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _walk(node["additionalProperties"], f"{path}{{}}")
    return problems


@pytest.mark.parametrize("crd", [crdgen.agentsession_crd(), crdgen.laneworker_crd()])
def test_schema_is_structural_and_described(crd: dict[str, Any]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema, "") == []
    spec = schema["properties"]["spec"]
    undocumented = [k for k, v in spec["properties"].items() if not v.get("description")]
    assert undocumented == []


def test_agentsession_names_columns_and_subresources() -> None:
    crd = crdgen.agentsession_crd()
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["ags"]
    assert names["categories"] == ["berth"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    for wanted in ("Phase", "Ready", "Reason", "Node", "Run", "Turn", "Tokens", "Age"):
        assert wanted in columns
    paths = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert paths["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'


def test_laneworker_has_scale_subresource() -> None:
    version = crdgen.laneworker_crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert crdgen.laneworker_crd()["spec"]["names"]["shortNames"] == ["lw"]


def test_cel_rules_present_for_cross_field_and_immutable_fields() -> None:
    text = yaml.safe_dump(crdgen.agentsession_crd())
    for rule in (
        "self == oldSelf",
        "!has(self.apiKey)",
        "self.mode == 'internal' || has(self.laneWorkerRef)",
        "self.metadata.name.size() <= 50",
    ):
        assert rule in text


def test_laneworker_refuses_replicas_together_with_scaling() -> None:
    text = yaml.safe_dump(crdgen.laneworker_crd())
    assert "'!has(self.replicas) || !has(self.scaling)'" in text


def test_integers_have_formats() -> None:
    text = yaml.safe_dump(crdgen.agentsession_crd())
    assert "maxTotalTokens:\n" in text
    spec = crdgen.agentsession_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    budget = spec["properties"]["spec"]["properties"]["budget"]["properties"]
    assert budget["maxTotalTokens"]["format"] == "int64"
    assert budget["maxToolCalls"]["format"] == "int32"


def test_check_mode_detects_stale_files(tmp_path: Path) -> None:
    assert crdgen.main(["crds", str(tmp_path)]) == 0
    assert crdgen.main(["crds", str(tmp_path), "--check"]) == 0
    target = tmp_path / "berth.dev_agentsessions.yaml"
    target.write_text(target.read_text().replace("maxLength: 256", "maxLength: 257"))
    assert crdgen.main(["crds", str(tmp_path), "--check"]) == 1
