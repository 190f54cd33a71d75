"""The chart renders what the issue asks for, with default and with all-features values.

Pure rendering (``helm template`` / ``helm lint``); tests/integration/chart/ applies the same
renderings to the real apiserver with a server-side dry-run and installs the chart.
"""

from __future__ import annotations

from typing import Any

import pytest
from berth_operator.settings import ENV_PREFIX, OperatorSettings

from berth_contract import envvars
from tests.unit.chart.helm import (
    ALL_FEATURES,
    CHART,
    by_kind,
    documents,
    one,
    render,
    run_helm,
)


def _container(deploy: dict[str, Any]) -> dict[str, Any]:
    containers = deploy["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    c: dict[str, Any] = containers[0]
    return c


def _use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """The process environment holds exactly the ``BERTH_*`` variables of ``env`` among the
    operator's (the rest, e.g. the pod's HOME, must not leak into this test process)."""
    for name in OperatorSettings.env_names():
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        if name.startswith(ENV_PREFIX):
            monkeypatch.setenv(name, value)


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


def test_helm_lint_strict_is_clean_for_default_and_all_features(tmp_path: Any) -> None:
    import yaml

    values = tmp_path / "all.yaml"
    values.write_text(yaml.safe_dump(ALL_FEATURES))
    for extra in ([], ["--values", str(values)]):
        proc = run_helm("lint", "--strict", str(CHART), *extra)
        assert "0 chart(s) failed" in proc.stdout
        assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


def test_operator_deployment_defaults() -> None:
    docs = documents(render())
    deploy = one(docs, "Deployment", "-operator")
    spec = deploy["spec"]["template"]["spec"]
    c = _container(deploy)
    assert deploy["spec"]["replicas"] == 2
    assert c["command"] == ["berth-operator"]
    env = _env(c)
    # Downward API, as docs/architecture.md §5/§9 asks of every Berth pod.
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["BERTH_LEADER_ELECTION"]["value"] == "true"
    # Non-root, read-only root filesystem, /tmp the only writable path.
    psc, csc = spec["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] > 0
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"]["drop"] == ["ALL"]
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/tmp"]
    assert spec["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    assert (
        spec["serviceAccountName"] == one(docs, "ServiceAccount", "-operator")["metadata"]["name"]
    )
    # Metrics port wired through: env, container port, Service, scrape annotations.
    port = int(env["BERTH_HTTP_PORT"]["value"])
    assert c["ports"][0]["containerPort"] == port
    ann = deploy["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == str(port)
    svc = one(docs, "Service", "-operator")
    assert svc["spec"]["ports"][0]["targetPort"] == "http-metrics"


def test_every_berth_env_the_chart_sets_is_an_operator_setting() -> None:
    """A renamed setting in berth_operator/settings.py must not leave a dead var in the chart."""
    deploy = one(documents(render(ALL_FEATURES)), "Deployment", "-operator")
    names = {n for n in _env(_container(deploy)) if n.startswith(ENV_PREFIX)}
    # the telemetry variables are berth_telemetry's (every program reads them), not settings
    known = OperatorSettings.env_names() | set(envvars.PASSED_ON)
    assert names, "the chart sets no operator settings"
    assert names <= known, f"not operator settings: {sorted(names - known)}"
    roles = {"BERTH_REDIS_SESSION_URL", "BERTH_REDIS_WORKER_URL", "BERTH_REDIS_OPERATOR_URL"}
    assert names >= roles | {"BERTH_SESSION_RUNTIME_CLASS", "BERTH_WORKER_RUNTIME_CLASS"}


def test_rendered_settings_are_accepted_by_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The env the chart renders parses with OperatorSettings.from_env (values are strings)."""
    for values in (None, ALL_FEATURES):
        c = _container(one(documents(render(values)), "Deployment", "-operator"))
        env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
        _use_env(monkeypatch, {k: v.replace("$(POD_IP)", "10.0.0.7") for k, v in env.items()})
        settings = OperatorSettings.from_env()
        assert settings.leader_election.enabled is True
        assert settings.claims.default_name == "berth-shared"


def test_default_rendering_has_no_prometheus_operator_objects() -> None:
    kinds = {d["kind"] for d in documents(render())}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert "ConfigMap" in kinds  # the dashboard is on by default (no CRD needed)


def test_all_features_rendering() -> None:
    docs = documents(render(ALL_FEATURES))
    sm = one(docs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["endpoints"][0]["port"] == "http-metrics"
    monitors = {d["metadata"]["name"]: d for d in by_kind(docs, "PodMonitor")}
    assert set(monitors) == {"berth-sessions", "berth-workers"}
    for pm in monitors.values():
        assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    rule = one(docs, "PrometheusRule")
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) >= 5
    pvc = one(docs, "PersistentVolumeClaim", "berth-shared")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    redis = one(docs, "Deployment", "-redis")
    assert _container(redis)["securityContext"]["readOnlyRootFilesystem"] is True
    env = _env(_container(one(docs, "Deployment", "-operator")))
    assert env["BERTH_REDIS_URL"]["value"] == "redis://berth-redis.berth-system.svc:6379/0"
    assert env["BERTH_NAMESPACES"]["value"] == "team-a,team-b"
    assert env["BERTH_BACKOFF_CAP_SECONDS"]["value"] == "60"
    dash = one(docs, "ConfigMap", "-dashboard")
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_rbac_is_namespaced_when_watching_namespaces() -> None:
    """Watching listed namespaces grants namespaced verbs only there (least privilege)."""
    docs = documents(render(ALL_FEATURES))
    cluster = one(docs, "ClusterRole", "-operator")
    # Cluster-scoped: nodes, and the operator's own ClusterRole (the NetworkPolicies' owner).
    assert {r for rule in cluster["rules"] for r in rule["resources"]} == {"nodes", "clusterroles"}
    for rule in cluster["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
    roles = [r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-operator")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    bindings = by_kind(docs, "RoleBinding")
    assert {b["metadata"]["namespace"] for b in bindings} == {"team-a", "team-b", "berth-system"}


def test_rbac_grants_no_wildcards_and_no_secret_listing() -> None:
    """Secrets: only get/create/update of the named ones (never list/watch: no bulk reading)."""
    for values in (None, ALL_FEATURES):
        docs = documents(render(values))
        for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
            for rule in role["rules"]:
                assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
                if "secrets" in rule["resources"]:
                    assert set(rule["verbs"]) <= {"get", "create", "update"}, rule
                assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule


def test_objects_are_namespaced_to_the_release() -> None:
    for d in documents(render(ALL_FEATURES)):
        if d["kind"] in {"ClusterRole", "ClusterRoleBinding"}:
            assert "namespace" not in d["metadata"]
        elif d["kind"] == "NetworkPolicy" and d["metadata"]["namespace"] != "berth-system":
            # Session and worker policies live where those pods run (networkPolicy.namespaces).
            assert d["metadata"]["namespace"] in {"team-a", "team-b"}, d["metadata"]
        elif d["kind"] not in {"Role", "RoleBinding"}:
            assert d["metadata"]["namespace"] == "berth-system", d["metadata"]


def test_uninstall_hook_deletes_only_the_lease_after_the_pods() -> None:
    docs = documents(render())
    hooks = [d for d in docs if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    assert {d["kind"] for d in hooks} == {"ServiceAccount", "Role", "RoleBinding", "Job"}
    for d in hooks:
        assert d["metadata"]["annotations"]["helm.sh/hook"] == "post-delete"
        assert "hook-succeeded" in d["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    role = one(docs, "Role", "-cleanup")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["berth-operator"],
            "verbs": ["delete"],
        },
    ]
    job = one(docs, "Job", "-cleanup")
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][:2] == ["kubectl-berth", "cleanup-lease"]
    assert "--lease=berth-operator" in c["command"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    no_hook = documents(render({"operator": {"cleanupOnUninstall": False}}))
    assert not [d for d in no_hook if d["kind"] == "Job"]


def test_webhook_wiring() -> None:
    docs = documents(render(ALL_FEATURES))
    deploy = one(docs, "Deployment", "-operator")
    c = _container(deploy)
    env = _env(c)
    assert env["BERTH_WEBHOOK_ENABLED"]["value"] == "true"
    host = env["BERTH_WEBHOOK_HOST"]["value"]
    assert host == "berth-operator-webhook.berth-system.svc"
    svc = one(docs, "Service", "-webhook")
    assert svc["spec"]["selector"]["berth.dev/leader"] == "true"  # never the standby
    port = int(env["BERTH_WEBHOOK_PORT"]["value"])
    assert svc["spec"]["ports"][0]["port"] == port  # kopf's URL carries the server's port
    assert {"name": "https-webhook", "containerPort": port, "protocol": "TCP"} in c["ports"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "webhook-certs")
    assert mount["mountPath"] == env["BERTH_WEBHOOK_CERT_DIR"]["value"] and mount["readOnly"]
    volumes = deploy["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-certs", "secret": {"secretName": "berth-webhook-tls"}} in volumes


def test_berth_resources_are_aggregated_into_the_builtin_roles() -> None:
    """ClusterRole aggregation: `admin`/`edit` manage AgentSessions and LaneWorkers (and scale
    LaneWorkers), `view` reads them; switched off, no such roles render."""
    docs = documents(render(None))
    edit = one(docs, "ClusterRole", "-edit")
    view = one(docs, "ClusterRole", "-view")
    labels = edit["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    grants = {r: set(rule["verbs"]) for rule in edit["rules"] for r in rule["resources"]}
    assert {"create", "delete", "patch"} <= grants["agentsessions"] & grants["laneworkers"]
    assert grants["laneworkers/scale"] == {"get", "update", "patch"}
    for rule in view["rules"]:
        assert set(rule["verbs"]) == {"get", "list", "watch"}
    assert "agentsessions/status" in {r for rule in view["rules"] for r in rule["resources"]}
    off = documents(render({"rbac": {"aggregateToDefaultRoles": False}}))
    names = [d["metadata"]["name"] for d in by_kind(off, "ClusterRole")]
    assert not [n for n in names if n.endswith(("-edit", "-view"))], names


def test_image_pull_secrets_reach_session_and_worker_pods_through_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    docs = documents(render({"imagePullSecrets": [{"name": "reg-a"}, {"name": "reg-b"}]}))
    env = _env(_container(one(docs, "Deployment", "-operator")))
    assert env["BERTH_IMAGE_PULL_SECRETS"]["value"] == "reg-a,reg-b"
    _use_env(monkeypatch, {k: v["value"] for k, v in env.items() if "value" in v})
    settings = OperatorSettings.from_env()
    assert settings.images.pull_secrets == ["reg-a", "reg-b"]


def test_helm_test_runs_a_session_in_the_watched_namespace_with_least_privilege() -> None:
    docs = [
        d
        for d in documents(render({"operator": {"watchNamespaces": ["team-a"]}}, tests=True))
        if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"
    ]
    assert {d["kind"] for d in docs} == {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
        "Pod",
    }
    assert {d["metadata"]["namespace"] for d in docs} == {"team-a"}
    role = one(docs, "Role")
    assert role["rules"] == [
        {
            "apiGroups": ["berth.dev"],
            "resources": ["agentsessions"],
            "verbs": ["get", "create", "delete"],
        }
    ]
    pod = one(docs, "Pod")
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert "session_runtime.llm.scripted" in pod["spec"]["containers"][0]["args"][0]


def test_migration_max_unavailable_reaches_the_operator() -> None:
    """sessions.migration.maxUnavailable (docs/upgrades.md) becomes the operator's setting."""
    for values, expected in (
        (None, "1"),
        ({"sessions": {"migration": {"maxUnavailable": 3}}}, "3"),
    ):
        c = _container(one(documents(render(values)), "Deployment", "-operator"))
        assert _env(c)["BERTH_MIGRATION_MAX_UNAVAILABLE"]["value"] == expected


def test_log_level_reaches_the_operator() -> None:
    """operator.logLevel becomes BERTH_LOG_LEVEL (INFO by default)."""
    for values, expected in ((None, "INFO"), ({"operator": {"logLevel": "DEBUG"}}, "DEBUG")):
        c = _container(one(documents(render(values)), "Deployment", "-operator"))
        assert _env(c)["BERTH_LOG_LEVEL"]["value"] == expected
