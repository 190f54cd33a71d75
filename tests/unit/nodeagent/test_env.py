"""Environment resolution and $(VAR) expansion of the process node agent (hack/nodeagent/env.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from hack.nodeagent import env

VARS = {"A": "a", "EMPTY": "", "B": "$(A)"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "a"),
        ("x$(A)y", "xay"),
        ("$(EMPTY)-", "-"),
        ("$(UNKNOWN)", "$(UNKNOWN)"),
        ("$$(A)", "$(A)"),  # escaped
        ("$$$(A)", "$a"),
        ("$(A", "$(A"),  # unterminated
        ("$A", "$A"),
        ("a$", "a$"),
        ("$(B)", "$(A)"),  # no recursive expansion
        ("", ""),
    ],
)
def test_expand_matches_kubelet(text: str, expected: str) -> None:
    assert env.expand(text, VARS) == expected


POD: dict[str, Any] = {
    "metadata": {
        "name": "p1",
        "namespace": "ns1",
        "uid": "u-1",
        "labels": {"app": "x"},
        "annotations": {"note": "hi"},
    },
    "spec": {"nodeName": "proc-a", "serviceAccountName": "sa1"},
}


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("metadata.name", "p1"),
        ("metadata.namespace", "ns1"),
        ("metadata.uid", "u-1"),
        ("metadata.labels['app']", "x"),
        ("metadata.labels['missing']", ""),
        ("metadata.annotations['note']", "hi"),
        ("spec.nodeName", "proc-a"),
        ("spec.serviceAccountName", "sa1"),
        ("status.podIP", "127.0.1.7"),
        ("status.hostIP", "127.0.0.1"),
    ],
)
def test_field_value(field: str, expected: str) -> None:
    assert env.field_value(POD, field, "127.0.1.7", "127.0.0.1") == expected


def test_field_value_unsupported() -> None:
    with pytest.raises(env.ConfigError):
        env.field_value(POD, "spec.bogus", "", "")


CONFIGMAPS: dict[str, dict[str, str]] = {"cm": {"k": "cv", "other": "o", "bad-key!": "x"}}
SECRETS: dict[str, dict[str, str]] = {"s": {"token": "sv"}}


def lookup(objs: Mapping[str, Mapping[str, str]]) -> env.DataLookup:
    return lambda name: objs.get(name)


def resolve(container: dict[str, Any]) -> dict[str, str]:
    return env.resolve_env(
        POD,
        container,
        pod_ip="127.0.1.7",
        host_ip="127.0.0.1",
        configmaps=lookup(CONFIGMAPS),
        secrets=lookup(SECRETS),
    )


def ref(kind: str, name: str, key: str, optional: bool | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"name": name, "key": key}
    if optional is not None:
        r["optional"] = optional
    return {"valueFrom": {kind: r}}


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([{"name": "V", "value": "1"}], {"V": "1"}),
        ([{"name": "S", **ref("secretKeyRef", "s", "token")}], {"S": "sv"}),
        ([{"name": "C", **ref("configMapKeyRef", "cm", "k")}], {"C": "cv"}),
        ([{"name": "C", **ref("configMapKeyRef", "cm", "nope", True)}], {}),
        ([{"name": "S", **ref("secretKeyRef", "absent", "k", True)}], {}),
        (
            [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
            {"POD_NAME": "p1", "POD_IP": "127.0.1.7", "NODE_NAME": "proc-a"},
        ),
        (
            [
                {"name": "A", "value": "x"},
                {"name": "B", "value": "$(A)/$(C)"},
                {"name": "C", "value": "c"},
            ],
            {"A": "x", "B": "x/$(C)", "C": "c"},  # only earlier vars expand
        ),
    ],
)
def test_resolve_env_entries(entries: list[dict[str, Any]], expected: dict[str, str]) -> None:
    assert resolve({"env": entries}) == expected


def test_env_from_prefix_order_and_invalid_names() -> None:
    got = resolve(
        {
            "envFrom": [
                {"configMapRef": {"name": "cm"}, "prefix": "CM_"},
                {"secretRef": {"name": "s"}},
                {"configMapRef": {"name": "absent", "optional": True}},
            ],
            "env": [{"name": "CM_k", "value": "override-$(token)"}],
        }
    )
    assert got == {"CM_k": "override-sv", "CM_other": "o", "token": "sv"}


@pytest.mark.parametrize(
    "container",
    [
        {"env": [{"name": "C", **ref("configMapKeyRef", "cm", "nope")}]},
        {"env": [{"name": "S", **ref("secretKeyRef", "absent", "token")}]},
        {"envFrom": [{"secretRef": {"name": "absent"}}]},
    ],
)
def test_missing_non_optional_reference_is_a_config_error(container: dict[str, Any]) -> None:
    with pytest.raises(env.ConfigError):
        resolve(container)


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        ({"command": ["sh", "-c"], "args": ["echo $(A) $$(A)"]}, ["sh", "-c", "echo a $(A)"]),
        ({"args": ["prog", "$(A)"]}, ["prog", "a"]),
        ({}, []),
    ],
)
def test_container_argv(container: dict[str, Any], expected: list[str]) -> None:
    assert env.container_argv(container, {"A": "a"}) == expected
