"""Settings from env, pod/node observation and the replacement verdicts."""

from __future__ import annotations

import pytest
from berth_operator.errors import SettingsError
from berth_operator.reconcile.replacement import classify, parse_termination
from berth_operator.settings import OperatorSettings

from tests.unit.operator.fixtures import T0, make_node, make_pod


def use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """The process environment holds exactly ``env`` among the operator's variables."""
    for name in OperatorSettings.env_names():
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    use_env(
        monkeypatch,
        {
            "BERTH_NAMESPACES": "a, b",
            "BERTH_MAX_PLACEMENT_RETRIES": "7",
            "BERTH_BACKOFF_BASE_SECONDS": "0.5",
            "BERTH_LEADER_ELECTION": "false",
            "BERTH_PASSIVATION_DEADLINE_SECONDS": "30",
            "BERTH_SESSION_IMAGE": "img:2",
            "BERTH_IMAGE_PULL_SECRETS": "reg-a,reg-b",
            "BERTH_LOG_LEVEL": "DEBUG",
            "UNRELATED": "x",
        },
    )
    s = OperatorSettings.from_env()
    assert s.scope.namespaces == ["a", "b"]
    assert s.placement.max_placement_retries == 7
    assert s.placement.backoff_base_seconds == 0.5
    assert s.leader_election.enabled is False
    assert s.passivation.deadline_seconds == 30
    assert s.images.session == "img:2"
    assert s.images.pull_secrets == ["reg-a", "reg-b"]
    assert s.claims.default_name == "berth-shared"
    assert s.server.log_level == "DEBUG"


def test_building_settings_never_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests and benches build settings from keywords; a machine's BERTH_* must not leak in."""
    use_env(monkeypatch, {"BERTH_REDIS_URL": "redis://elsewhere:1/0", "BERTH_HTTP_PORT": "1"})
    s = OperatorSettings()
    assert s.redis.url == "redis://redis:6379/0"
    assert s.server.http_port == 8081
    assert OperatorSettings.from_env().redis.url == "redis://elsewhere:1/0"


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"BERTH_MAX_PLACEMENT_RETRIES": "-1"}, "BERTH_MAX_PLACEMENT_RETRIES"),
        ({"BERTH_STATUS_REFRESH_SECONDS": "soon"}, "BERTH_STATUS_REFRESH_SECONDS"),
        ({"BERTH_LEADER_ELECTION": "maybe"}, "BERTH_LEADER_ELECTION"),
        ({"BERTH_WEBHOOK_PORT": "0"}, "BERTH_WEBHOOK_PORT"),
        ({"BERTH_LEASE_RENEW_SECONDS": "20"}, "BERTH_LEASE_RENEW_SECONDS must be below"),
        ({"BERTH_LOG_LEVEL": "verbose"}, "BERTH_LOG_LEVEL"),
    ],
)
def test_bad_settings_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], fragment: str
) -> None:
    use_env(monkeypatch, env)
    with pytest.raises(SettingsError, match=fragment):
        OperatorSettings.from_env()


def test_every_bad_variable_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    use_env(monkeypatch, {"BERTH_HTTP_PORT": "x", "BERTH_PASSIVATION_KILL_GRACE_SECONDS": "-1"})
    with pytest.raises(SettingsError) as err:
        OperatorSettings.from_env()
    assert "BERTH_HTTP_PORT" in str(err.value)
    assert "BERTH_PASSIVATION_KILL_GRACE_SECONDS" in str(err.value)


def test_every_setting_is_documented() -> None:
    undocumented = [
        f"{group.__name__}.{name}"
        for group in OperatorSettings.group_types().values()
        for name, field in group.model_fields.items()
        if not field.description
    ]
    assert undocumented == []
    assert all(f.description for f in OperatorSettings.model_fields.values())


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
    assert (msg.run_id, msg.turn, msg.result_text) == ("run-2", 4, "ok")
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


@pytest.mark.parametrize(("level", "kopf_objects"), [("INFO", "WARNING"), ("DEBUG", "DEBUG")])
def test_log_level_configures_the_root_logger_and_kopfs_object_log(
    monkeypatch: pytest.MonkeyPatch, level: str, kopf_objects: str
) -> None:
    """``configure_logging``: the root at the level; kopf's per-object log only at DEBUG."""
    import logging

    from berth_operator.main import configure_logging

    root, objects = logging.getLogger(), logging.getLogger("kopf.objects")
    monkeypatch.setattr(root, "handlers", [])  # basicConfig configures an unconfigured root
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.setattr(objects, "level", logging.NOTSET)
    configure_logging(level)
    assert logging.getLevelName(root.level) == level
    assert logging.getLevelName(objects.getEffectiveLevel()) == kopf_objects


def test_kopf_is_configured_for_berth() -> None:
    """The finalizer name, no scanning, and watch workers that end soon after an object's last
    event (the operator's memory in a burst)."""
    import kopf
    from berth_operator.api.constants import FINALIZER
    from berth_operator.main import KOPF_IDLE_TIMEOUT_SECONDS, configure

    settings = kopf.OperatorSettings()
    configure(settings=settings, memo=kopf.Memo())
    assert settings.persistence.finalizer == FINALIZER
    assert settings.scanning.disabled
    assert settings.batching.idle_timeout == KOPF_IDLE_TIMEOUT_SECONDS < 5.0
