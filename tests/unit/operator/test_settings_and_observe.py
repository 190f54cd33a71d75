"""Settings from env, pod/node observation and the replacement verdicts."""

from __future__ import annotations

import pytest
from berth_operator.errors import SettingsError
from berth_operator.reconcile.replacement import classify, parse_termination
from berth_operator.settings import OperatorSettings

from tests.unit.operator.fixtures import T0, make_node, make_pod


def test_settings_from_env() -> None:
    s = OperatorSettings.from_env(
        {
            "BERTH_NAMESPACES": "a, b",
            "BERTH_MAX_PLACEMENT_RETRIES": "7",
            "BERTH_BACKOFF_BASE_SECONDS": "0.5",
            "BERTH_LEADER_ELECTION": "false",
            "UNRELATED": "x",
        }
    )
    assert s.namespaces == ["a", "b"]
    assert s.max_placement_retries == 7
    assert s.backoff_base_seconds == 0.5
    assert s.leader_election is False
    assert s.default_claim_name == "berth-shared"


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"BERTH_MAX_PLACEMENT_RETRIES": "-1"}, "BERTH_MAX_PLACEMENT_RETRIES"),
        ({"BERTH_STATUS_REFRESH_SECONDS": "soon"}, "BERTH_STATUS_REFRESH_SECONDS"),
        ({"BERTH_LEASE_RENEW_SECONDS": "20"}, "BERTH_LEASE_RENEW_SECONDS must be below"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(SettingsError, match=fragment):
        OperatorSettings.from_env(env)


def test_every_setting_is_documented() -> None:
    undocumented = [n for n, f in OperatorSettings.model_fields.items() if not f.description]
    assert undocumented == []


@pytest.mark.parametrize(
    ("pod", "node", "kind", "reason"),
    [
        (make_pod().on("n").running(), make_node("n"), "alive", ""),
        (make_pod(), None, "alive", ""),
        (
            make_pod().on("n").running(),
            make_node("n", ready="False", since=-5),
            "replace",
            "NodeLost",
        ),
        (
            make_pod().on("n").terminated(0, {"outcome": "completed", "runId": "r"}),
            None,
            "completed",
            "RunCompleted",
        ),
        (
            make_pod().on("n").terminated(0, {"outcome": "passivated"}),
            None,
            "replace",
            "Passivated",
        ),
        (make_pod().on("n").terminated(3, {"outcome": "fenced"}), None, "replace", "Fenced"),
        (
            make_pod().on("n").terminated(1, {"outcome": "failed", "reason": "x"}),
            None,
            "replace",
            "RunFailed",
        ),
        (make_pod().on("n").terminated(137), None, "replace", "PodCrashed"),
        (make_pod().on("n").terminated(1, "not json"), None, "replace", "PodCrashed"),
        (make_pod().on("n").evicted(), None, "replace", "PodEvicted"),
    ],
)
def test_classify(pod, node, kind, reason) -> None:  # type: ignore[no-untyped-def]
    verdict = classify(pod.observed(), node, T0, node_grace_seconds=0)
    assert (verdict.kind, verdict.reason) == (kind, reason)


def test_node_loss_waits_for_the_grace() -> None:
    pod = make_pod().on("n").running().observed()
    node = make_node("n", ready="Unknown", since=-5)
    assert classify(pod, node, T0, node_grace_seconds=30).kind == "alive"
    assert classify(pod, node, T0, node_grace_seconds=5).kind == "replace"


def test_crash_verdict_counts_and_node_loss_forces() -> None:
    crash = classify(make_pod().on("n").terminated(137).observed(), None, T0, node_grace_seconds=0)
    assert crash.counts_as_failure and not crash.force_delete
    assert "exit code 137" in crash.detail
    lost = classify(
        make_pod().on("n").running().observed(),
        make_node("n", ready="Unknown"),
        T0,
        node_grace_seconds=0,
    )
    assert lost.counts_as_failure and lost.force_delete


def test_termination_message_parsing_accepts_the_runtime_shape() -> None:
    msg = parse_termination(
        '{"outcome":"completed","runId":"run-2","turn":4,'
        '"usage":{"promptTokens":1,"completionTokens":2,"totalTokens":3},'
        '"reason":null,"resultText":"ok"}'
    )
    assert msg is not None
    assert (msg.run_id, msg.turn, msg.text) == ("run-2", 4, "ok")
    assert msg.usage is not None and msg.usage.total_tokens == 3
    assert parse_termination("") is None
    assert parse_termination('{"outcome": "exploded"}') is None


async def test_the_leader_labels_its_own_pod_and_clears_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from berth_operator import main

    calls: list[tuple[str, str, str, str | None]] = []

    class Kube:
        async def label_own_pod(self, ns: str, name: str, key: str, value: str | None) -> None:
            calls.append((ns, name, key, value))

    monkeypatch.delenv("POD_NAME", raising=False)
    await main._mark_leader(Kube(), True)  # type: ignore[arg-type]
    assert calls == []  # not in a pod: nothing to label
    monkeypatch.setenv("POD_NAME", "op-0")
    monkeypatch.setenv("POD_NAMESPACE", "berth-system")
    await main._mark_leader(Kube(), True)  # type: ignore[arg-type]
    await main._mark_leader(Kube(), False)  # type: ignore[arg-type]
    assert calls == [
        ("berth-system", "op-0", "berth.dev/leader", "true"),
        ("berth-system", "op-0", "berth.dev/leader", None),
    ]
