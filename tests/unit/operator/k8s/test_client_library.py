"""Keeping the unused ``kubernetes`` package out of the operator's process, unless the
kubeconfig's credentials need its loaders (an ``exec`` plugin, an ``auth-provider``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth_operator.k8s import client_library as cl


def kubeconfig(user: dict[str, Any], *, current: str | None = "ctx") -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }
    if current is not None:
        config["current-context"] = current
    return config


def write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


EXEC_USER = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token"}}
PROVIDER_USER = {"auth-provider": {"name": "oidc", "config": {"id-token": "x"}}}


def test_kubeconfig_paths_follow_the_variable_then_the_default_file(tmp_path: Path) -> None:
    listed = os.pathsep.join(["/a/config", "", " ~/b ", "/c"])
    assert cl.kubeconfig_paths({"KUBECONFIG": listed}, tmp_path) == [
        Path("/a/config"),
        tmp_path / "b",
        Path("/c"),
    ]
    assert cl.kubeconfig_paths({}, tmp_path) == []
    (tmp_path / ".kube").mkdir()
    default = write(tmp_path / ".kube" / "config", kubeconfig({"token": "t"}))
    assert cl.kubeconfig_paths({}, tmp_path) == [default]


def test_the_first_current_context_and_the_first_user_of_a_name_win() -> None:
    first = kubeconfig({"token": "first"}, current=None)
    second = kubeconfig(EXEC_USER)
    assert cl.current_user([first, second]) == {"token": "first"}
    assert cl.current_user([kubeconfig({"token": "t"}, current=None)]) is None
    assert cl.current_user([kubeconfig({"token": "t"}, current="elsewhere")]) is None


@pytest.mark.parametrize(
    ("user", "needed"),
    [
        ({"token": "t"}, False),
        ({"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"}, False),
        ({"username": "u", "password": "p"}, False),
        (EXEC_USER, True),
        (PROVIDER_USER, True),
    ],
)
def test_only_plugins_and_providers_need_the_library(user: dict[str, Any], needed: bool) -> None:
    assert cl.user_needs_client_library(user) is needed


def test_a_pod_never_needs_the_library(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("sa-token")
    exec_config = write(tmp_path / "exec", kubeconfig(EXEC_USER))
    assert cl.client_library_needed({"KUBECONFIG": str(exec_config)}, tmp_path, token) is False


@pytest.mark.parametrize(
    ("content", "needed"),
    [
        (yaml.safe_dump(kubeconfig({"token": "t"})), False),
        (yaml.safe_dump(kubeconfig(EXEC_USER)), True),
        (yaml.safe_dump(kubeconfig({"token": "t"}, current=None)), True),
        ("users: [unclosed", True),
        ("contexts: [{context: {}}]\ncurrent-context: x\n", True),
        (None, True),
    ],
    ids=["token", "exec", "no-current-context", "bad-yaml", "nameless-context", "missing-file"],
)
def test_a_kubeconfig_the_operator_cannot_resolve_keeps_the_library(
    tmp_path: Path, content: str | None, needed: bool
) -> None:
    path = tmp_path / "config"
    if content is not None:
        path.write_text(content)
    env = {"KUBECONFIG": str(path)}
    assert cl.client_library_needed(env, tmp_path, tmp_path / "no-token") is needed


def test_with_no_credentials_at_all_the_library_reports_it(tmp_path: Path) -> None:
    assert cl.client_library_needed({}, tmp_path, tmp_path / "no-token") is True


PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from berth_operator.k8s.client_library import keep_client_library_out
    kept_out = keep_client_library_out(token=Path(sys.argv[1]))
    import kopf
    from berth_operator.handlers.login import credentials
    info = credentials()
    try:
        import kubernetes  # noqa: F401
        importable = True
    except ModuleNotFoundError:
        importable = False
    print(json.dumps({
        "kept_out": kept_out,
        "kopf_imported_it": sys.modules.get("kubernetes") is not None,
        "importable": importable,
        "token": info.token,
        "server": info.server,
    }))
    """
)


def probe(tmp_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Run the operator's start-up order in a fresh interpreter: the decision, then kopf, then
    the login's credentials. Returns what that process saw."""
    path = write(tmp_path / "config", config)
    env = {**os.environ, "KUBECONFIG": str(path), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "no-token")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_token_kubeconfig_logs_in_without_the_library_in_the_process(tmp_path: Path) -> None:
    seen = probe(tmp_path, kubeconfig({"token": "plain-token"}))
    assert seen == {
        "kept_out": True,
        "kopf_imported_it": False,
        "importable": False,
        "token": "plain-token",
        "server": "https://127.0.0.1:6443",
    }


def test_an_exec_plugin_kubeconfig_keeps_the_library_for_its_loaders(tmp_path: Path) -> None:
    user = {"token": "static", **EXEC_USER}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path;"
            "from berth_operator.k8s.client_library import keep_client_library_out;"
            "kept = keep_client_library_out(token=Path(sys.argv[1])); import kopf;"
            "print(kept, sys.modules.get('kubernetes') is not None)",
            str(tmp_path / "no-token"),
        ],
        env={**os.environ, "KUBECONFIG": str(write(tmp_path / "config", kubeconfig(user)))},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_the_console_script_goes_through_the_launcher() -> None:
    from berth_operator import launch

    (script,) = entry_points(group="console_scripts", name="berth-operator")
    assert script.load() is launch.main
