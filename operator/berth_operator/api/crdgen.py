"""Generate the CustomResourceDefinitions in ``crds/`` from the pydantic models.

Usage (``make crds``)::

    python -m berth_operator.api.crdgen crds            # (re)write crds/*.yaml
    python -m berth_operator.api.crdgen crds --check    # exit 1 if a file differs
    python -m berth_operator.api.crdgen options-schema  # print the options.json JSON Schema

pydantic emits JSON Schema (2020-12, ``$defs``/``$ref``, ``anyOf`` with null for optionals,
``additionalProperties: false``, titles); Kubernetes wants a *structural* OpenAPI v3 schema
(every node typed, no ``$ref``, no ``anyOf`` except int-or-string, ``properties`` and
``additionalProperties`` exclusive). ``to_structural`` does that conversion; attribute docstrings
become ``description``; integers become ``format: int32`` unless marked ``int64``.
Extensions (``x-kubernetes-validations``, list types, int-or-string, preserve-unknown) pass
through from ``json_schema_extra``. Called by the Makefile and by tests/unit/operator.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from berth_contract.options import options_json_schema
from berth_operator.api import agentsession, budgetpolicy, laneworker, sessionwarmpool
from berth_operator.api.constants import (
    BUDGETPOLICY_KIND,
    BUDGETPOLICY_PLURAL,
    BUDGETPOLICY_SHORT_NAMES,
    BUDGETPOLICY_SINGULAR,
    CATEGORY,
    GROUP,
    LANEWORKER_KIND,
    LANEWORKER_PLURAL,
    LANEWORKER_SHORT_NAMES,
    LANEWORKER_SINGULAR,
    SESSION_KIND,
    SESSION_PLURAL,
    SESSION_SHORT_NAMES,
    SESSION_SINGULAR,
    VERSION,
)

_DROP_KEYS = {"title", "additionalProperties", "propertyNames", "$defs", "examples"}
_KEEP_FORMATS = {"int32", "int64", "date-time", "byte"}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a ``$ref`` (siblings override the target, as in JSON Schema 2020-12)."""
    if "$ref" in node:
        name = node["$ref"].split("/")[-1]
        merged = dict(defs[name])
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        return _resolve(merged, defs)
    if "allOf" in node and len(node["allOf"]) == 1:
        merged = _resolve(node["allOf"][0], defs)
        merged.update({k: v for k, v in node.items() if k != "allOf"})
        return merged
    return node


def to_structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Convert one pydantic JSON-Schema node to a structural OpenAPI v3 node (pure)."""
    node = _resolve(node, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        variants = [v for v in node["anyOf"] if v.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"cannot make a structural schema of anyOf {node['anyOf']!r}")
        inner = to_structural(variants[0], defs)
        outer = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
        # Descriptions and extensions written on the field win over the ones of the type.
        for key, value in outer.items():
            if key == "x-kubernetes-validations":
                inner[key] = [*inner.get(key, []), *value]
            elif key == "additionalProperties" and isinstance(value, dict):
                inner[key] = to_structural(value, defs)
            elif key not in _DROP_KEYS:
                inner[key] = value
        return _finish(inner, defs)
    return _finish(dict(node), defs)


def _finish(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:  # noqa: C901, PLR0912
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS:
            continue
        if key == "default" and value is None:
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key == "format" and value not in _KEEP_FORMATS:
            continue
        if key == "properties":
            out["properties"] = {k: to_structural(v, defs) for k, v in value.items()}
            continue
        if key == "items" and isinstance(value, dict):
            out["items"] = to_structural(value, defs)
            continue
        if key == "anyOf" and node.get("x-kubernetes-int-or-string"):
            continue  # int-or-string needs no anyOf in a structural schema
        out[key] = value
    add = node.get("additionalProperties")
    if isinstance(add, dict) and "properties" not in node:
        out["additionalProperties"] = to_structural(add, defs)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    elif "type" not in out:
        if "enum" in out:
            out["type"] = "string"
        elif "properties" in out or "additionalProperties" in out:
            out["type"] = "object"
    if out.get("type") == "integer" and "format" not in out:
        out["format"] = "int32"
    if out.get("type") == "string" and node.get("format") == "date-time":
        out["format"] = "date-time"
    first = {k: out[k] for k in ("type", "description") if k in out}
    return first | {k: v for k, v in out.items() if k not in first}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Structural schema of ``model`` (by alias, validation mode)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    return to_structural(raw, defs)


def _crd(
    *,
    kind: str,
    plural: str,
    singular: str,
    short_names: tuple[str, ...],
    description: str,
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[dict[str, Any]],
    root_validations: list[dict[str, str]] | None = None,
    scale: dict[str, str] | None = None,
) -> dict[str, Any]:
    root: dict[str, Any] = {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion: berth.dev/v1alpha1."},
            "kind": {"type": "string", "description": f"Kind: {kind}."},
            "metadata": {"type": "object"},
            "spec": model_schema(spec),
            "status": model_schema(status),
        },
    }
    if root_validations:
        root["x-kubernetes-validations"] = root_validations
    subresources: dict[str, Any] = {"status": {}}
    if scale:
        subresources["scale"] = scale
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "berth", "app.kubernetes.io/part-of": "berth"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


_READY_COLUMNS: tuple[dict[str, Any], ...] = (
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    # Why it is (not) Ready, in the condition's CamelCase reason (Unschedulable, OOMKilled,
    # CrashLoopBackOff, BudgetExhausted, ...), so `kubectl get` explains itself.
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
    },
)


def agentsession_crd() -> dict[str, Any]:
    """The AgentSession CRD (docs/architecture.md §3)."""
    return _crd(
        kind=SESSION_KIND,
        plural=SESSION_PLURAL,
        singular=SESSION_SINGULAR,
        short_names=SESSION_SHORT_NAMES,
        description="AgentSession runs one long-lived AI coding-agent session on the cluster: "
        "Berth places a session pod, resumes the run on a new pod after a crash, node loss or "
        "passivation, and reports progress in status.",
        spec=agentsession.AgentSessionSpec,
        status=agentsession.AgentSessionStatus,
        root_validations=agentsession.ROOT_VALIDATIONS,
        columns=[
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            *_READY_COLUMNS,
            {"name": "Node", "type": "string", "jsonPath": ".status.nodeName"},
            {"name": "Run", "type": "string", "jsonPath": ".status.runId"},
            {"name": "Turn", "type": "integer", "jsonPath": ".status.checkpoint.turn"},
            {"name": "Tokens", "type": "integer", "jsonPath": ".status.usage.totalTokens"},
            {"name": "Epoch", "type": "integer", "jsonPath": ".status.epoch", "priority": 1},
            {"name": "Pod", "type": "string", "jsonPath": ".status.podName", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def laneworker_crd() -> dict[str, Any]:
    """The LaneWorker CRD (docs/architecture.md §4), with /scale."""
    return _crd(
        kind=LANEWORKER_KIND,
        plural=LANEWORKER_PLURAL,
        singular=LANEWORKER_SINGULAR,
        short_names=LANEWORKER_SHORT_NAMES,
        description="LaneWorker is a pool of berth-worker pods that run the heavy tool calls "
        "(bash, write, edit) of sessions from a Redis task stream, scaled on queue pressure.",
        spec=laneworker.LaneWorkerSpec,
        status=laneworker.LaneWorkerStatus,
        scale={
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
        columns=[
            {"name": "Lane", "type": "string", "jsonPath": ".spec.lane"},
            *_READY_COLUMNS,
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
            {"name": "Available", "type": "integer", "jsonPath": ".status.readyReplicas"},
            {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
            {"name": "Backlog", "type": "integer", "jsonPath": ".status.pressure.backlog"},
            {"name": "InFlight", "type": "integer", "jsonPath": ".status.pressure.inFlight"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def budgetpolicy_crd() -> dict[str, Any]:
    """The BudgetPolicy CRD (tenant budgets shared by sessions)."""
    return _crd(
        kind=BUDGETPOLICY_KIND,
        plural=BUDGETPOLICY_PLURAL,
        singular=BUDGETPOLICY_SINGULAR,
        short_names=BUDGETPOLICY_SHORT_NAMES,
        description="BudgetPolicy limits the LLM tokens and cost that all AgentSessions of a "
        "tenant may use per period; sessions consult Berth's budget service before and after "
        "every LLM call.",
        spec=budgetpolicy.BudgetPolicySpec,
        status=budgetpolicy.BudgetPolicyStatus,
        columns=[
            {"name": "Tenant", "type": "string", "jsonPath": ".spec.selector.tenantId"},
            {"name": "Period", "type": "string", "jsonPath": ".spec.period"},
            {"name": "Used%", "type": "integer", "jsonPath": ".status.usedPercent"},
            {
                "name": "Exhausted",
                "type": "string",
                "jsonPath": '.status.conditions[?(@.type=="Exhausted")].status',
            },
            {"name": "Denied", "type": "integer", "jsonPath": ".status.sessionsDenied"},
            {"name": "Window", "type": "string", "jsonPath": ".status.window", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def sessionwarmpool_crd() -> dict[str, Any]:
    """The SessionWarmPool CRD (pre-started session pods adopted by sessions), with /scale."""
    return _crd(
        kind=sessionwarmpool.WARMPOOL_KIND,
        plural=sessionwarmpool.WARMPOOL_PLURAL,
        singular=sessionwarmpool.WARMPOOL_SINGULAR,
        short_names=sessionwarmpool.WARMPOOL_SHORT_NAMES,
        description="SessionWarmPool keeps pre-started session pods of one template ready; an "
        "AgentSession naming it in spec.warmPoolRef is adopted by one of them instead of waiting "
        "for a new pod, and the pool refills.",
        spec=sessionwarmpool.SessionWarmPoolSpec,
        status=sessionwarmpool.SessionWarmPoolStatus,
        scale={
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
        columns=[
            {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
            {"name": "Adopting", "type": "integer", "jsonPath": ".status.adoptingReplicas"},
            {"name": "Adopted", "type": "integer", "jsonPath": ".status.adoptedTotal"},
            {
                "name": "Template",
                "type": "string",
                "jsonPath": ".status.templateHash",
                "priority": 1,
            },
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


HEADER = "# Generated by `make crds` (python -m berth_operator.api.crdgen crds). Do not edit.\n"


def render(crd: dict[str, Any]) -> str:
    """YAML text of one CRD file (stable key order as built)."""
    return HEADER + yaml.safe_dump(crd, sort_keys=False, width=100, allow_unicode=True)


def rendered_files() -> dict[str, str]:
    """File name → content for every CRD."""
    return {
        f"{GROUP}_{SESSION_PLURAL}.yaml": render(agentsession_crd()),
        f"{GROUP}_{LANEWORKER_PLURAL}.yaml": render(laneworker_crd()),
        f"{GROUP}_{BUDGETPOLICY_PLURAL}.yaml": render(budgetpolicy_crd()),
        f"{GROUP}_{sessionwarmpool.WARMPOOL_PLURAL}.yaml": render(sessionwarmpool_crd()),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m berth_operator.api.crdgen")
    sub = parser.add_subparsers(dest="cmd", required=True)
    crds = sub.add_parser("crds", help="write the CRD YAML files")
    crds.add_argument("outdir", nargs="?", default="crds")
    crds.add_argument("--check", action="store_true", help="fail if files differ")
    sub.add_parser("options-schema", help="print the JSON Schema of options.json")
    args = parser.parse_args(argv)
    if args.cmd == "options-schema":
        sys.stdout.write(yaml.safe_dump(options_json_schema(), sort_keys=False))
        return 0
    outdir = Path(args.outdir)
    stale = []
    for name, text in rendered_files().items():
        path = outdir / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        outdir.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print("out of date (run `make crds`): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
