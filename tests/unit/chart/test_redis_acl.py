"""The bundled Redis's ACL, as the chart renders it, loaded by a real ``redis-server``.

The chart's ConfigMap (redis.conf, users.acl.tmpl, render-acl.sh) is rendered with ``helm
template``; render-acl.sh runs under ``sh`` exactly as the init container runs it, and Debian's
``redis-server`` starts from the rendered redis.conf (paths moved into a temp dir, loopback
only). Then every ACL user is tried: what its component needs passes (the real session transport
and pressure code, the worker's command sequence from session_runtime/worker/lane.py), and the
attacks are refused (no credentials, wrong password, reading or forging another role's keys).
Skipped without helm or redis-server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from berth_contract import names
from tests.unit.chart.helm import documents, one, render

PASSWORDS = {
    "session": "session-Pw_0123456789abcdef",
    "worker": "worker-Pw_0123456789abcdef~",
    "operator": "operator-Pw_0123456789.abcd",
}
TASKS = names.task_stream("team-a", "pool")
OTHER_TASKS = names.task_stream("team-b", "pool")
REPLIES = names.reply_stream("team-a", "uid-1")
DEAD = names.dead_letter_stream("team-a", "pool")
ALIVE = names.alive_key("team-a", "pool", "pool-abc")
DEDUPE = names.task_claim_key("team-a", "uid-1", "t-1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def chart_files(values: dict[str, Any] | None = None) -> dict[str, str]:
    """The data of the bundled Redis's ConfigMap."""
    data: dict[str, str] = one(documents(render(values)), "ConfigMap", "-redis-config")["data"]
    return data


def render_acl(
    files: dict[str, str], tmp: Path, passwords: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run the chart's render-acl.sh as the init container does (secrets as files)."""
    secrets = tmp / "secrets"
    secrets.mkdir(exist_ok=True)
    for role, pw in passwords.items():
        (secrets / f"{role}-password").write_text(pw)
    (tmp / "render-acl.sh").write_text(files["render-acl.sh"])
    (tmp / "users.acl.tmpl").write_text(files["users.acl.tmpl"])
    env = {
        "PATH": "/usr/bin:/bin",
        "SECRETS_DIR": str(secrets),
        "TEMPLATE": str(tmp / "users.acl.tmpl"),
        "OUT": str(tmp / "users.acl"),
    }
    return subprocess.run(
        ["sh", str(tmp / "render-acl.sh")], env=env, capture_output=True, text=True, check=False
    )


@dataclass
class Server:
    port: int
    tmp: Path

    def client(
        self, user: str | None = None, password: str | None = None, **kw: Any
    ) -> redis.Redis:
        return redis.Redis(port=self.port, username=user, password=password, **kw)

    def role(self, role: str) -> redis.Redis:
        return self.client(f"berth-{role}", PASSWORDS[role])

    def url(self, role: str) -> str:
        return f"redis://berth-{role}:{PASSWORDS[role]}@127.0.0.1:{self.port}/0"


def start_redis(files: dict[str, str], tmp: Path, *extra: str) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    proc = render_acl(files, tmp, PASSWORDS)
    assert proc.returncode == 0, proc.stderr
    conf = files["redis.conf"].replace("/run/redis/users.acl", str(tmp / "users.acl"))
    conf = conf.replace("dir /data", f"dir {tmp}").replace("/etc/redis/tls", str(tmp / "tls"))
    (tmp / "redis.conf").write_text(conf)
    return subprocess.Popen(
        [binary, str(tmp / "redis.conf"), "--bind", "127.0.0.1", *extra],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "redis.log", "wb"),
    )


def wait_listening(proc: subprocess.Popen[bytes], port: int, tmp: Path) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"redis-server did not start:\n{(tmp / 'redis.log').read_text()}"
                ) from None
            time.sleep(0.05)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("redis-acl")
    port = _free_port()
    proc = start_redis(chart_files(), tmp, "--port", str(port))
    wait_listening(proc, port, tmp)
    yield Server(port, tmp)
    proc.terminate()
    proc.wait(timeout=10)


def refused(call: Any, *args: Any, **kw: Any) -> str:
    """The error text of a command Redis must refuse for lack of permission."""
    with pytest.raises(NoPermissionError) as err:
        call(*args, **kw)
    return str(err.value)


# -- the ACL file and its renderer ---------------------------------------------------------


def test_acl_file_has_hashes_only_and_default_user_off(server: Server) -> None:
    acl = (server.tmp / "users.acl").read_text()
    for pw in PASSWORDS.values():
        assert pw not in acl
    assert acl.splitlines()[0].startswith("user default off")
    assert not [line for line in acl.splitlines() if line.startswith("#")]


@pytest.mark.parametrize(
    ("passwords", "message"),
    [
        ({"session": "x" * 20, "worker": "y" * 20}, "operator-password is missing"),
        ({**PASSWORDS, "worker": "short-password"}, "worker-password must be at least 16"),
        ({**PASSWORDS, "session": "has@at/slash:0123456789"}, "session-password may only use"),
        ({**PASSWORDS, "operator": PASSWORDS["operator"] + "\n"}, "operator-password may only use"),
        ({**PASSWORDS, "session": "space in it 0123456789"}, "session-password may only use"),
    ],
)
def test_render_acl_refuses_bad_passwords(
    tmp_path: Path, passwords: dict[str, str], message: str
) -> None:
    proc = render_acl(chart_files(), tmp_path, passwords)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert not (tmp_path / "users.acl").exists()


# -- attacks -----------------------------------------------------------------------------------


def raw_command(port: int, *args: str) -> bytes:
    """One RESP command on a fresh, unauthenticated connection; the first reply line."""
    wire = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(wire.encode())
        return conn.recv(4096).split(b"\r\n")[0]


def test_client_without_credentials_is_refused(server: Server) -> None:
    for args in (
        ("PING",),
        ("XADD", TASKS, "*", "k", "v"),
        ("KEYS", "*"),
        ("XRANGE", TASKS, "-", "+"),
    ):
        assert raw_command(server.port, *args).startswith(b"-NOAUTH"), args
    assert raw_command(server.port, "AUTH", "anything").startswith(b"-WRONGPASS")
    with pytest.raises(AuthenticationError):
        server.client("default", "anything").ping()
    with pytest.raises(AuthenticationError):
        server.client("berth-worker", PASSWORDS["session"]).ping()


def test_session_user_cannot_consume_read_tasks_or_forge_replies(server: Server) -> None:
    s = server.role("session")
    assert "xreadgroup" in refused(s.xreadgroup, "workers", "me", {TASKS: ">"}, 1)
    refused(s.xrange, TASKS)
    refused(s.xadd, REPLIES, {"forged": "reply"})
    refused(s.set, ALIVE, "1")
    refused(s.get, DEDUPE)
    refused(s.delete, TASKS)
    refused(s.keys, "*")
    refused(s.flushall)
    refused(s.config_get, "*")
    refused(s.execute_command, "ACL", "LIST")


def test_worker_user_cannot_publish_tasks_or_read_other_key_families(server: Server) -> None:
    w = server.role("worker")
    refused(w.xadd, TASKS, {"forged": "task"})
    refused(w.xrange, REPLIES)
    refused(w.xread, {REPLIES: "0-0"})
    refused(w.xdel, REPLIES, "1-1")
    refused(w.get, "some:other:key")
    refused(w.xrange, DEAD)
    refused(w.keys, "berth:*")
    refused(w.scan)
    refused(w.flushall)
    refused(w.execute_command, "CONFIG", "SET", "aclfile", "/tmp/x")


def test_operator_user_cannot_write(server: Server) -> None:
    o = server.role("operator")
    refused(o.xadd, TASKS, {"k": "v"})
    refused(o.xgroup_create, TASKS, "workers", id="0", mkstream=True)
    refused(o.xack, TASKS, "workers", "1-1")
    refused(o.delete, TASKS)
    refused(o.set, ALIVE, "1")
    refused(o.xrange, REPLIES)
    refused(o.xtrim, TASKS, 0)


# -- what each component does passes -----------------------------------------------------------


def test_worker_command_sequence_passes(server: Server) -> None:
    """The calls session_runtime/worker/lane.py makes, with its arguments."""
    s, w = server.role("session"), server.role("worker")
    try:
        w.xgroup_create(OTHER_TASKS, "workers", id="0", mkstream=True)  # _ensure_group
    except ResponseError as exc:  # pragma: no cover - module-scoped server reused
        assert "BUSYGROUP" in str(exc)
    s.xadd(OTHER_TASKS, {"task_id": "t-1"})
    batch = w.xreadgroup("workers", "pool-abc", {OTHER_TASKS: ">"}, count=1, block=100)
    entry_id = batch[0][1][0][0]
    assert w.set(ALIVE, "10.0.0.1", px=30_000)  # heartbeat
    assert w.exists(ALIVE) == 1
    assert w.set(DEDUPE, "1", nx=True, ex=3600)  # task-id dedupe
    assert w.set(DEDUPE, "1", nx=True, ex=3600) is None
    pipe = w.pipeline(transaction=True)  # _dead_letter: the failure reply, then the record
    pipe.xadd(REPLIES, {"task_id": "t-1"})
    pipe.expire(REPLIES, 3600)
    pipe.execute()
    pipe.xadd(DEAD, {"reason": "bad"}, maxlen=1000, approximate=True)
    pipe.xack(OTHER_TASKS, "workers", entry_id)
    assert pipe.execute()[1] == 1
    s.xadd(OTHER_TASKS, {"task_id": "t-2"})
    w.xreadgroup("workers", "pool-gone", {OTHER_TASKS: ">"}, count=1)
    pending = w.xpending_range(OTHER_TASKS, "workers", min="-", max="+", count=200)
    claimed = w.xclaim(OTHER_TASKS, "workers", "pool-abc", 0, [pending[0]["message_id"]])
    w.xack(OTHER_TASKS, "workers", claimed[0][0])
    w.xautoclaim(OTHER_TASKS, "workers", "pool-abc", 0)
    assert w.xinfo_groups(OTHER_TASKS)[0]["pending"] == 0
    w.xinfo_consumers(OTHER_TASKS, "workers")
    w.xgroup_delconsumer(OTHER_TASKS, "workers", "pool-gone")
    w.delete(ALIVE)


async def test_worker_scripts_run_as_the_worker_user(server: Server) -> None:
    """The claim and answer scripts (session_runtime/worker/scripts.py) as berth-worker: every
    command inside them passes, and they still touch nothing outside the worker's keys."""
    from redis.asyncio import Redis

    from session_runtime.worker.scripts import TaskScripts

    s, w = server.role("session"), server.role("worker")
    stream = names.task_stream("team-d", "pool")
    replies = names.reply_stream("team-d", "uid-4")
    claim = names.task_claim_key("team-d", "uid-4", "t-4")
    w.xgroup_create(stream, "workers", id="0", mkstream=True)
    s.xadd(stream, {"task_id": "t-4"})
    entry_id = w.xreadgroup("workers", "pool-abc", {stream: ">"}, count=1)[0][1][0][0].decode()
    worker: Redis[Any] = Redis.from_url(server.url("worker"))
    scripts = TaskScripts(worker, stream, 3600)
    assert await scripts.claim(replies, claim, entry_id) == "claimed"
    assert await scripts.claim(replies, claim, entry_id) == "claimed"  # the same delivery, again
    assert await scripts.claim(replies, claim, "9-9") == "duplicate"  # another delivery
    assert await scripts.answer(replies, claim, {"task_id": "t-4"}, entry_id) == "replied"
    assert await scripts.answer(replies, claim, {"task_id": "t-4"}, entry_id) == "duplicate"
    assert len(s.xrange(replies)) == 1 and w.xinfo_groups(stream)[0]["pending"] == 0
    with pytest.raises(NoPermissionError):
        await scripts.claim(DEAD, claim, entry_id)  # a key outside the script rule
    await worker.aclose()


def test_session_command_sequence_passes(server: Server) -> None:
    """The calls session_runtime/transport/client.py makes, with its arguments."""
    s, w = server.role("session"), server.role("worker")
    s.xadd(TASKS, {"task_id": "t-5"})  # publish
    w.xadd(REPLIES, {"task_id": "t-5"})
    batches = s.xread({REPLIES: "0-0"}, count=100, block=100)  # the reply reader
    entry_id = batches[0][1][0][0]
    assert s.xrange(REPLIES, min="-", max="+", count=500)  # find_reply
    assert s.xdel(REPLIES, entry_id) == 1  # settle
    s.xtrim(REPLIES, maxlen=1000)
    s.delete(REPLIES)  # delete_replies
    assert s.ping()


async def test_real_transport_and_pressure_code_run_as_their_users(server: Server) -> None:
    """RedisTaskTransport as berth-session, stream_pressure, last_entry_id and await_new_entries as
    berth-operator raise no permission error (message signing is not this test's business:
    replies are built raw)."""
    from berth_operator.stream_pressure import (
        await_new_entries,
        last_entry_id,
        stream_pressure,
    )
    from redis.asyncio import Redis

    from session_runtime.lanes.external import ExternalReply, ExternalTask
    from session_runtime.tools.base import ToolContext
    from session_runtime.transport.client import RedisTaskTransport

    transport = RedisTaskTransport.from_url(
        server.url("session"),
        namespace="team-c",
        session_name="s1",
        session_uid="uid-c",
        epoch=1,
        lane_workers={"execute": "pool"},
    )
    tasks = transport.task_stream("execute")
    w = server.role("worker")
    w.xgroup_create(tasks, "workers", id="0", mkstream=True)
    task = ExternalTask(
        task_id="t-9",
        session_id="team-c/s1",
        lane="execute",
        command_type="bash",
        payload={"command": "true"},
        timeout_ms=60_000,
        created_ms=int(time.time() * 1000),
        tool_call_id="c-9",
    )
    ctx = ToolContext(session_id="team-c/s1", workspace=str(server.tmp), run_id="r-1", turn=1)
    await transport.publish(task, ctx)
    operator: Redis[Any] = Redis.from_url(server.url("operator"))
    assert (await stream_pressure(operator, tasks, "workers"))["backlog"] == 1
    entry_id = w.xreadgroup("workers", "pool-x", {tasks: ">"}, count=1)[0][1][0][0]
    pressure = await stream_pressure(operator, tasks, "workers")
    assert pressure["inFlight"] == 1 and pressure["per_consumer_pending"] == {"pool-x": 1}
    ref = w.xadd(transport.reply_stream, {"task_id": "t-9", "tool_call_id": "c-9"})
    w.xack(tasks, "workers", entry_id)
    await transport.find_reply("c-9")
    await transport.settle(
        ExternalReply(task_id="t-9", tool_call_id="c-9", success=True, ref=ref.decode())
    )
    await transport.delete_replies()
    assert (await stream_pressure(operator, tasks, "workers"))["inFlight"] == 0
    # The autoscaler's wake-up: a plain blocking read, which nothing added since ends by timeout
    # and an XADD during it ends at once; the group's counts are untouched.
    assert await await_new_entries(operator, tasks, 0.05) is False
    waiting = asyncio.create_task(await_new_entries(operator, tasks, 30))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await transport.publish(dataclasses.replace(task, task_id="t-10", tool_call_id="c-10"), ctx)
    assert await asyncio.wait_for(waiting, 10) is True
    assert (await stream_pressure(operator, tasks, "workers"))["backlog"] == 1
    # ... and from the ID of its last reading: a task added after that ID, before the wait,
    # ends the wait at once (it is not missed, as it is from ``$``).
    assert await last_entry_id(operator, names.task_stream("team-c", "none")) == "0-0"
    seen = await last_entry_id(operator, tasks)
    assert seen == w.xinfo_stream(tasks)["last-entry"][0].decode()
    await transport.publish(dataclasses.replace(task, task_id="t-11", tool_call_id="c-11"), ctx)
    assert await await_new_entries(operator, tasks, 0.05) is False
    assert await await_new_entries(operator, tasks, 0.05, after=seen) is True
    newest = await last_entry_id(operator, tasks)
    assert newest > seen and await await_new_entries(operator, tasks, 0.05, after=newest) is False
    await transport.close()
    closer: Any = operator
    await closer.aclose()


def _make_tls(tls: Path) -> None:
    """A CA and a server certificate for 127.0.0.1 (openssl), in the Secret's key names."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    tls.mkdir()

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=tls, check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=berth-test-ca",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "tls.key",
        "-out",
        "tls.csr",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
    )
    (tls / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run(
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "tls.crt",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
    )


def test_tls_values_serve_tls_only_with_the_role_urls(tmp_path: Path) -> None:
    values = {"redis": {"tls": {"enabled": True, "secretName": "redis-tls"}}}
    docs = documents(render(values))
    files = one(docs, "ConfigMap", "-redis-config")["data"]
    env = {
        e["name"]: e
        for e in one(docs, "Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    }
    url = env["BERTH_REDIS_WORKER_URL"]["value"]
    assert url.startswith("rediss://berth-worker:$(REDIS_WORKER_PASSWORD)@")
    assert url.endswith("?ssl_ca_certs=/var/run/berth/redis-tls/ca.crt")
    _make_tls(tmp_path / "tls")
    port = _free_port()
    proc = start_redis(files, tmp_path, "--tls-port", str(port))
    try:
        wait_listening(proc, port, tmp_path)
        # The operator's URL, with the password and the CA path of this machine.
        real = (
            url.replace("$(REDIS_WORKER_PASSWORD)", PASSWORDS["worker"])
            .replace("berth-redis.berth-system.svc:6379", f"127.0.0.1:{port}")
            .replace("/var/run/berth/redis-tls", str(tmp_path / "tls"))
        )
        worker = redis.Redis.from_url(real)
        assert worker.ping()
        refused(worker.xrange, REPLIES)
        with pytest.raises(redis.exceptions.ConnectionError):
            redis.Redis(
                port=port, username="berth-worker", password=PASSWORDS["worker"], socket_timeout=2
            ).ping()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
