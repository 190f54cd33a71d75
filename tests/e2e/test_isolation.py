"""Attacks on a session running as a real container, and on the LaneWorker serving it.

On the dev cluster's real nodes, with the operator under its ServiceAccount:

- the session's HTTP API refuses a call without its token (401) and with a wrong one (403), from
  the pod network; the right token (from the session's own Secret) is accepted;
- inside the session container the uid is not 0, the root filesystem is read-only, the LLM key
  is not in the environment and no other session's workspace or any store is mounted;
- Redis refuses a client without credentials;
- a forged task written straight to the LaneWorker's stream (valid shape, naming another
  session's workspace, signed with a key that is not the namespace's) is dropped and counted by
  the worker, and its side effect never happens; a task of the same session signed with its real
  key runs once;
- an agent scripted to walk out of its workspace (``..``, absolute paths, a planted symlink, the
  store, ``/proc``, its environment) reaches nothing of another session and sees no credential,
  both with bash in the session pod and on a LaneWorker (which mounts every workspace of the
  namespace, so there the tool sandbox is what stops it).

Waits are bounded only so that a hang fails.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest
import redis
from berth_operator.builders.redis_ca import redis_ca_path

from berth_contract.taskauth import derive_session_key, sign_fields
from session_runtime.transport import TaskMessage, reply_stream, task_stream
from tests.cluster import DevCluster
from tests.integration.operator.harness import (
    SECRET,
    apply_in,
    kget,
    operator,
    scripted_model,
    session_manifest,
    wait,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

POOL = {
    "apiVersion": "berth.dev/v1alpha1",
    "kind": "LaneWorker",
    "metadata": {"name": "pool"},
    "spec": {"lane": "execute", "minReplicas": 1, "maxReplicas": 1},
}
"""One LaneWorker pod serving the execute lane."""
REMOTE = {"execute": {"mode": "external", "laneWorkerRef": {"name": "pool"}}}
"""``spec.lanes`` sending bash/write/edit to :data:`POOL`."""


def _call(url: str, token: str | None) -> int:
    req = urllib.request.Request(url, method="GET")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _secret(dc: DevCluster, ns: str, name: str) -> dict[str, bytes]:
    raw = json.loads(dc.kubectl("-n", ns, "get", "secret", name, "-o", "json").stdout)
    return {k: base64.b64decode(v) for k, v in raw["data"].items()}


def _rejected(pod_ip: str, reason: str) -> float:
    url = f"http://{pod_ip}:9090/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    prefix = f'berth_worker_tasks_rejected_total{{reason="{reason}"}}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_session_and_worker_refuse_what_is_not_theirs(dev_cluster: DevCluster) -> None:
    dc = dev_cluster
    script = {"turns": [{"text": "ready"}], "on_exhausted": "repeat_last"}
    with (
        dc.namespace("iso") as ns,
        scripted_model(script) as llm,
        operator(dc, ns),
    ):
        victim = session_manifest("victim", llm.base_url, "wait", keepAlive=True, lanes=REMOTE)
        apply_in(dc, ns, [SECRET, POOL, victim])
        obj = wait(
            "session victim running with a pod IP",
            lambda: (
                (o := kget(dc, ns, "agentsession", "victim"))
                and (o.get("status") or {}).get("podIP")
                and (o["status"].get("phase") in ("Running", "Succeeded"))
                and o
            ),
        )
        pod_ip, pod_name = obj["status"]["podIP"], obj["status"]["podName"]
        base = f"http://{pod_ip}:8080"

        # --- the session API: token or nothing ------------------------------------------------
        token = _secret(dc, ns, "victim-berth")["api-token"].decode().strip()
        assert _call(f"{base}/healthz", None) == 200  # probes stay open
        assert _call(f"{base}/v1/state", None) == 401
        assert _call(f"{base}/v1/state", "not-the-token") == 403
        assert _call(f"{base}/v1/state", token) == 200

        # --- what the session container sees ---------------------------------------------------
        probe = (
            "id -u; touch /.probe 2>/dev/null && echo rw || echo ro; "
            "env | grep -c -E 'OPENAI_API_KEY|sk-test' || true; ls /var/lib/berth; "
            "ls /var/lib/berth/store"
        )
        out = dc.kubectl("-n", ns, "exec", pod_name, "--", "sh", "-c", probe).stdout.split()
        assert out[0] != "0" and out[1] == "ro" and out[2] == "0", out
        assert sorted(out[3:5]) == ["store", "workspace"], out  # no shared root, no other dirs
        assert out[5:] == [ns], out  # only its own namespace's store path

        # --- Redis: no credentials, no entry --------------------------------------------------
        url = urllib.parse.urlsplit(dc.env["BERTH_REDIS_URL"])
        ca = redis_ca_path(dc.env["BERTH_REDIS_URL"])  # the dev Redis serves TLS only
        anonymous = redis.Redis(
            host=url.hostname, port=url.port or 6379, ssl=ca is not None, ssl_ca_certs=ca
        )
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.ping()

        # --- a forged task for another session's workspace ------------------------------------
        worker = wait(
            "a worker pod of the pool Ready",
            lambda: next(
                (
                    p
                    for p in json.loads(
                        dc.kubectl(
                            "-n", ns, "get", "pods", "-l", "berth.dev/laneworker=pool", "-o", "json"
                        ).stdout
                    )["items"]
                    if any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in p["status"].get("conditions", [])
                    )
                ),
                None,
            ),
        )
        other = dc.make_dirs(dc.claim_dir(ns) / "workspaces" / ns / "other")
        admin = redis.Redis.from_url(dc.env["BERTH_REDIS_URL"])
        uid = obj["metadata"]["uid"]

        def task(task_id: str, session: str, command: str) -> dict[str, str]:
            return TaskMessage(
                task_id=task_id,
                session=f"{ns}/{session}",
                session_uid=uid,
                epoch=1,
                run_id="r",
                tool_call_id=f"c-{task_id}",
                lane="execute",
                command_type="bash",
                payload={"command": command},
                workspace=".",
                deadline_ms=int(time.time() * 1000) + 600_000,
                reply_to=reply_stream(ns, uid),
            ).to_fields()

        guessed = derive_session_key(b"g" * 32, ns, "other")  # the attacker has no master
        forged = sign_fields(guessed, task(uuid.uuid4().hex, "other", "touch pwned"))
        admin.xadd(task_stream(ns, "pool"), forged)  # type: ignore[arg-type]
        worker_ip = worker["status"]["podIP"]
        wait("the worker to count the forged task", lambda: _rejected(worker_ip, "mac") >= 1)
        assert not (other / "pwned").exists()

        # The namespace master is what makes a task valid: the same task signed with the real
        # key of the session it names runs (once).
        master = _secret(dc, ns, "berth-task-key")["master"]
        real = derive_session_key(master, ns, "other")
        signed = sign_fields(real, task(uuid.uuid4().hex, "other", "echo ran >> ran.txt"))
        for _ in range(2):
            admin.xadd(task_stream(ns, "pool"), signed)  # type: ignore[arg-type]
        wait("the signed task to run", lambda: (other / "ran.txt").exists())
        wait("the redelivery to be counted", lambda: _rejected(worker_ip, "duplicate") >= 1)
        assert (other / "ran.txt").read_text().split() == ["ran"]


def _tool_outputs(llm: object, prompt: str) -> list[str]:
    """Every tool result the scripted model received in the conversation started by ``prompt``."""
    outputs: list[str] = []
    for req in getattr(llm, "requests", []):
        messages = req["messages"]
        if any(m.get("role") == "user" and m.get("content") == prompt for m in messages):
            outputs = [str(m.get("content", "")) for m in messages if m.get("role") == "tool"]
    return outputs


def test_agent_tools_cannot_reach_another_session(dev_cluster: DevCluster) -> None:
    """An agent told to walk out of its workspace (``..``, absolute paths, the store, ``/proc``,
    its environment) gets nothing of another session's files, can write nothing there and sees
    no credential; both where its bash runs in the session pod and where it runs on a LaneWorker.
    Every refusal is a tool result the model sees, and both runs still complete."""
    dc = dev_cluster
    secret = uuid.uuid4().hex
    probe = (
        "for p in ../victim/secret.txt ../../workspaces/{ns}/victim/secret.txt "
        "/var/lib/berth/workspaces/{ns}/victim/secret.txt /var/lib/berth/store/{ns}/victim "
        # /proc/1 is pause (the pod shares its PID namespace); $PPID is the session's or the
        # worker's own process, which runs the tool
        '/proc/1/environ /proc/$PPID/environ /var/run/berth; do echo "== $p"; cat $p; ls $p; '
        "done > leak.txt 2>&1; "
        "echo x > ../victim/pwned 2>> leak.txt; ln -s ../victim/secret.txt link 2>> leak.txt; "
        "cat link >> leak.txt 2>&1; env > env.txt"
    )
    reads = [
        {"name": "read", "arguments": {"file_path": "../victim/secret.txt"}},
        {
            "name": "read",
            "arguments": {"file_path": "/var/lib/berth/workspaces/{ns}/victim/secret.txt"},
        },
        {"name": "read", "arguments": {"file_path": "link"}},
        {"name": "write", "arguments": {"file_path": "../victim/pwned", "content": "x"}},
    ]
    with (
        dc.namespace("iso2") as ns,
        operator(dc, ns),
    ):
        turns = [
            {"tool_calls": [{"name": "bash", "arguments": {"command": probe.format(ns=ns)}}]},
            *({"tool_calls": [json.loads(json.dumps(r).replace("{ns}", ns))]} for r in reads),
            {"text": "done"},
        ]
        victim_dir = dc.make_dirs(dc.claim_dir(ns) / "workspaces" / ns / "victim")
        (victim_dir / "secret.txt").write_text(secret)
        with scripted_model({"turns": turns}) as llm:
            local_prompt, remote_prompt = "walk out (local)", "walk out (remote)"
            apply_in(
                dc,
                ns,
                [
                    SECRET,
                    POOL,
                    session_manifest("local", llm.base_url, local_prompt),
                    session_manifest("remote", llm.base_url, remote_prompt, lanes=REMOTE),
                ],
            )
            for name in ("local", "remote"):
                obj = wait(
                    f"session {name} to finish",
                    lambda name=name: (
                        (o := kget(dc, ns, "agentsession", name))
                        and (o.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                        and o
                    ),
                )
                assert obj["status"]["phase"] == "Succeeded", json.dumps(obj["status"], indent=1)
            for name, prompt in (("local", local_prompt), ("remote", remote_prompt)):
                workspace = dc.claim_dir(ns) / "workspaces" / ns / name
                leak = (workspace / "leak.txt").read_text()
                env = (workspace / "env.txt").read_text()
                outputs = _tool_outputs(llm, prompt)
                assert len(outputs) == 1 + len(reads), (name, outputs)
                assert "== ../victim/secret.txt" in leak  # the probe really ran
                for seen in (leak, env, *outputs):
                    assert secret not in seen, (name, seen)
                    assert "sk-test" not in seen and "redis://" not in seen, (name, seen)
                assert all("refused" in o for o in outputs[1:]), (name, "\n".join(outputs))
        assert not (victim_dir / "pwned").exists()
        assert (victim_dir / "secret.txt").read_text() == secret
