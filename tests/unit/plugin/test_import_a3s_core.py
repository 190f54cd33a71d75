"""``kubectl berth import NAME --from-a3s EXPORT`` without a cluster: a run a3s-code-core 9.x
checkpointed (its own export sink, a real binding session and a scripted model) becomes a Berth
session's store and workspace on a local "shared volume" and an AgentSession created through a
small HTTP server standing in for the apiserver (the real kubernetes client makes the calls);
then a real session pod (``SessionPod``, as ``berth-session`` runs it) started on that volume
resumes the run, running no completed tool round again. What does not map is refused naming the
field, before anything is written or created."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubectl_berth import a3s_import, cli
from kubectl_berth.client import PluginClient
from kubernetes import client
from typer.testing import CliRunner

from berth_contract.options import parse_options
from session_runtime.a3s_core import binding as core
from session_runtime.llm.scripted import ScriptedServer
from session_runtime.metrics import SessionMetrics
from session_runtime.pod.config import parse_env
from session_runtime.pod.lifecycle import SessionPod
from tests.a3s_core_support import acl_config, binding

NS, NAME = "team-a", "imported"
COLLECTION = f"/apis/berth.dev/v1alpha1/namespaces/{NS}/agentsessions"
WRITE_ONCE = {"name": "write", "arguments": {"file_path": "side.txt", "content": "once\n"}}
MANIFEST = {
    "apiVersion": "berth.dev/v1alpha1",
    "kind": "AgentSession",
    "metadata": {"name": "ignored"},
    "spec": {"prompt": "go", "model": "openai/m"},
}


class Apiserver(BaseHTTPRequestHandler):
    """No AgentSession exists; a POST to the collection is recorded and created."""

    created: list[dict[str, Any]] = []
    forbid = False

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(404, {"kind": "Status", "reason": "NotFound", "message": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.split("?")[0] != COLLECTION:
            self._send(404, {"kind": "Status", "reason": "NotFound", "message": self.path})
            return
        if Apiserver.forbid:
            self._send(403, {"kind": "Status", "reason": "Forbidden", "message": "no create"})
            return
        Apiserver.created.append(body)
        self._send(201, body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginClient]:
    Apiserver.created, Apiserver.forbid = [], False
    server = ThreadingHTTPServer(("127.0.0.1", 0), Apiserver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cfg = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    api = PluginClient(api=client.ApiClient(cfg), namespace=NS)
    monkeypatch.setattr(a3s_import, "connect", lambda **_kw: api)
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()


async def checkpointed_9x_run(tmp_path: Path) -> tuple[Path, Path]:
    """A 9.x session whose run wrote ``side.txt`` in round one, then lost its model: the
    export a3s-code-core wrote at that round boundary, and the session's workspace."""
    binding()
    workspace = tmp_path / "a3s-ws"
    workspace.mkdir()
    model = ScriptedServer(
        {
            "turns": [{"tool_calls": [WRITE_ONCE]}, {"error": {"status": 400, "message": "gone"}}],
            "cursor": "history",
        }
    )
    await model.start()
    exports = tmp_path / "exports"
    session = core.CoreAgent(acl_config(model.base_url)).session(
        str(workspace), session_id="sess-9", export_dir=str(exports)
    )
    with pytest.raises(RuntimeError):
        await asyncio.to_thread(session.send, "go")
    await model.stop()
    export = core.latest_export(str(exports))
    assert export is not None
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    return path, workspace


#: Whom the import hands the files to: the pods' user when this test may give files away (root),
#: else this process's own uid (then there is nothing to hand over).
OWNER = 10001 if os.geteuid() == 0 else os.geteuid()


def invoke(tmp_path: Path, export: Path, *extra: str) -> Any:
    manifest = tmp_path / "session.yaml"
    manifest.write_text(yaml.safe_dump(MANIFEST))
    args = ["import", NAME, "--from-a3s", str(export), "--volume", str(tmp_path / "vol")]
    args += ["--owner", str(OWNER)]
    return CliRunner().invoke(cli.app, [*args, "--manifest", str(manifest), *extra])


async def test_an_imported_9x_run_is_resumed_by_a_session_pod_without_a_tool_rerun(
    tmp_path: Path, api: PluginClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    export, a3s_workspace = await checkpointed_9x_run(tmp_path)
    (tmp_path / "vol").mkdir()
    accept = ("--accept", "logical_resume.capability_binding")
    result = invoke(tmp_path, export, "--workspace-from", str(a3s_workspace), *accept)
    assert result.exit_code == 0, result.output
    [created] = Apiserver.created
    assert created["metadata"] == {"name": NAME, "namespace": NS}
    assert created["spec"] == MANIFEST["spec"]
    assert "its pod resumes run " in result.output
    assert "left behind: logical_resume.capability_binding" in result.output
    workspace = tmp_path / "vol" / "workspaces" / NS / NAME
    assert (workspace / "side.txt").read_text() == "once\n"
    assert not [p for p in (tmp_path / "vol" / "store").iterdir() if p.name.startswith(".")]
    store = tmp_path / "vol" / "store" / NS / NAME
    owners = {p.stat().st_uid for p in [store, *store.rglob("*"), workspace, *workspace.rglob("*")]}
    assert owners == {OWNER}  # the session pods' user may write it all
    (workspace / "side.txt").write_text("changed after the import\n")  # a rerun would undo it

    model = ScriptedServer({"turns": [{"text": "resumed on berth"}], "on_exhausted": "error"})
    await model.start()
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    (tmp_path / "token").write_text("t")
    env = {
        "BERTH_SESSION": f"{NS}/{NAME}",
        "BERTH_SESSION_UID": "uid-imported",
        "BERTH_EPOCH": "1",
        "BERTH_STORE_DIR": str(tmp_path / "vol" / "store"),
        "BERTH_WORKSPACE": str(workspace),
        "BERTH_OPTIONS_FILE": str(tmp_path / "options.json"),
        "BERTH_API_TOKEN_FILE": str(tmp_path / "token"),
        "OPENAI_BASE_URL": model.base_url,
    }
    pod = SessionPod(parse_env(env), parse_options(created["spec"]), SessionMetrics())
    pod.build()  # as berth-session does: claim the store, resume the session, plan the start
    pod.start()
    message = await pod.wait()
    await model.stop()

    assert pod.plan.action == "resume" and pod.plan.run_id in result.output
    assert message.outcome == "completed"
    assert pod.live.runs()[-1]["result_text"] == "resumed on berth"
    [request] = model.requests
    roles = [m["role"] for m in request["messages"]]
    assert roles[-2:] == ["assistant", "tool"]  # round one's write and its result, not redone
    assert (workspace / "side.txt").read_text() == "changed after the import\n"


async def test_what_does_not_map_is_refused_naming_it_and_nothing_is_made(
    tmp_path: Path, api: PluginClient
) -> None:
    export, _ = await checkpointed_9x_run(tmp_path)
    (tmp_path / "vol").mkdir()
    result = invoke(tmp_path, export)
    assert result.exit_code == 1
    assert "does not map" in result.output and "logical_resume.capability_binding" in result.output
    assert Apiserver.created == []
    assert [p for p in (tmp_path / "vol").rglob("*") if p.is_file()] == []

    garbage = tmp_path / "garbage.json"
    garbage.write_text("{}")
    result = invoke(tmp_path, garbage)
    assert result.exit_code == 1 and "missing field `descriptor`" in result.output

    (tmp_path / "vol" / "store" / NS / NAME).mkdir(parents=True)  # a kept store of that name
    accept = ("--accept", "logical_resume.capability_binding")
    result = invoke(tmp_path, export, *accept)
    assert result.exit_code == 1 and "a kept store of session" in result.output
    assert Apiserver.created == []


async def test_an_import_the_apiserver_refuses_leaves_nothing_behind(
    tmp_path: Path, api: PluginClient
) -> None:
    export, a3s_workspace = await checkpointed_9x_run(tmp_path)
    (tmp_path / "vol").mkdir()
    Apiserver.forbid = True
    accept = ("--accept", "logical_resume.capability_binding")
    result = invoke(tmp_path, export, "--workspace-from", str(a3s_workspace), *accept)
    assert result.exit_code == 1 and "no create" in result.output
    left = [p for p in (tmp_path / "vol").rglob("*") if p.is_file()]
    assert left == []  # neither the store nor the workspace
    Apiserver.forbid = False
    assert invoke(tmp_path, export, "--workspace-from", str(a3s_workspace), *accept).exit_code == 0
