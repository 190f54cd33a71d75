"""Helpers of the operator integration tests: CRDs and RBAC in the dev cluster, the operator as a
subprocess running under its own ServiceAccount (so the real apiserver enforces config/rbac), the
scripted model, and small kubectl readers.

Waits are bounded (``WAIT_CAP``); reaching a bound is a failure (a hang), not a timing assertion.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.cluster import ROOT, DevCluster, host_ip, poll_until

WAIT_CAP = 180.0
OPERATOR_NS = "berth-tests"
"""Namespace of the tests' operator ServiceAccount and Leases: not the README's berth-system, so
that the tests' objects never stand in the way of a user's ``helm install`` there."""
OPERATOR_SA = "operator"
EXAMPLES = ROOT / "examples"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def install_crds(dc: DevCluster) -> None:
    """Apply crds/ and wait until every CRD is Established."""
    dc.kubectl("apply", "-f", str(ROOT / "crds"))
    for crd in ("agentsessions.berth.dev", "laneworkers.berth.dev", "sessionwarmpools.berth.dev"):
        dc.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


def rbac_for_tests(directory: str) -> list[dict[str, Any]]:
    """The objects of config/rbac/``directory`` (its kustomization's resources) renamed so that
    no user install takes their names: ClusterRoles and their bindings ``berth-tests:<name
    without berth->`` (also where a rule names a ClusterRole), the ServiceAccount ``operator`` and
    the Roles in ``OPERATOR_NS``. The rules stay config/rbac's, which the apiserver then enforces
    on the tests' operator."""
    base = ROOT / "config" / "rbac" / directory
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    docs = [
        doc
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((base / name).read_text())
        if doc
    ]

    def cluster_name(name: str) -> str:
        return f"berth-tests:{name.removeprefix('berth-')}"

    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            meta["name"] = cluster_name(meta["name"])
        else:
            meta["namespace"] = OPERATOR_NS
        if doc["kind"] == "ServiceAccount":
            meta["name"] = OPERATOR_SA
        ref = doc.get("roleRef")
        if ref is not None and ref["kind"] == "ClusterRole":
            ref["name"] = cluster_name(ref["name"])
        for rule in doc.get("rules") or []:  # the ClusterRole it reads (the policies' owner)
            if "clusterroles" in rule.get("resources", ()) and rule.get("resourceNames"):
                rule["resourceNames"] = [cluster_name(n) for n in rule["resourceNames"]]
        for subject in doc.get("subjects") or []:
            if subject["kind"] == "ServiceAccount":
                subject.update(name=OPERATOR_SA, namespace=OPERATOR_NS)
    return docs


def apply_test_rbac(dc: DevCluster, directory: str = ".") -> None:
    """Create ``OPERATOR_NS`` and apply :func:`rbac_for_tests` of config/rbac/``directory``."""
    dc.kubectl("create", "namespace", OPERATOR_NS, check=False)
    dc.apply(rbac_for_tests(directory))


def operator_kubeconfig(dc: DevCluster, directory: Path) -> Path:
    """Apply config/rbac (as :func:`rbac_for_tests` names it) and write a kubeconfig that
    authenticates as its ServiceAccount."""
    apply_test_rbac(dc)
    token = dc.kubectl(
        "-n", OPERATOR_NS, "create", "token", OPERATOR_SA, "--duration=4h"
    ).stdout.strip()
    return token_kubeconfig(dc, "berth-operator", token, directory / "operator.kubeconfig")


def token_kubeconfig(dc: DevCluster, user: str, token: str, path: Path) -> Path:
    """Write to ``path`` a kubeconfig of the dev cluster that authenticates ``user`` with the
    bearer ``token`` (e.g. a ServiceAccount's from ``kubectl create token``)."""
    raw = yaml.safe_load(dc.kubectl("config", "view", "--raw", "--minify", "-o", "yaml").stdout)
    cluster = raw["clusters"][0]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


class OperatorProcess:
    """``berth-operator`` as a subprocess watching one namespace; restartable."""

    def __init__(
        self, dc: DevCluster, namespace: str, kubeconfig: Path, log_dir: Path, **env: str
    ) -> None:
        self.dc = dc
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.extra = env
        self.procs: list[subprocess.Popen[bytes]] = []
        self.port = 0
        self.starts = 0
        self.command: list[str] = [str(Path(sys.executable).parent / "berth-operator")]
        """How a replica is started (a benchmark may run another checkout's operator)."""

    def use_checkout(self, src: Path) -> None:
        """Start replicas from the source checkout ``src`` (e.g. a ``git worktree`` of an older
        commit) by its entry module: ``berth_operator.launch`` where it exists, else the older
        ``berth_operator.main``."""
        self.extra["PYTHONPATH"] = f"{src / 'operator'}:{src}"
        entry = "launch" if (src / "operator" / "berth_operator" / "launch.py").exists() else "main"
        self.command = [sys.executable, "-m", f"berth_operator.{entry}"]

    def env(self) -> dict[str, str]:
        self.port = free_port()
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "BERTH_NAMESPACES": self.namespace,
            "BERTH_REDIS_URL": self.dc.env.get("BERTH_REDIS_URL", "redis://127.0.0.1:6379/0"),
            "BERTH_SESSION_IMAGE": self.dc.image,
            **{
                k: v
                for k in (
                    "BERTH_REDIS_SESSION_URL",
                    "BERTH_REDIS_WORKER_URL",
                    "BERTH_REDIS_OPERATOR_URL",
                )
                if (v := self.dc.env.get(k))
            },
            "BERTH_LEASE_NAMESPACE": OPERATOR_NS,
            "BERTH_LEASE_NAME": f"berth-operator-{self.namespace}",
            "BERTH_LEASE_DURATION_SECONDS": "4",
            "BERTH_LEASE_RENEW_SECONDS": "1",
            "BERTH_STATUS_REFRESH_SECONDS": "1",
            "BERTH_BACKOFF_BASE_SECONDS": "1",
            "BERTH_BACKOFF_CAP_SECONDS": "4",
            # Claims the operator creates come from the dev cluster's RWX provisioner.
            "BERTH_SHARED_CLAIM_STORAGE_CLASS": "berth-shared",
            "BERTH_HTTP_HOST": "127.0.0.1",
            "BERTH_HTTP_PORT": str(self.port),
            "BERTH_IDENTITY": f"test-operator-{self.starts}",
            **self.extra,
        }

    def start(self, **env: str) -> subprocess.Popen[bytes]:
        """Start one replica (several may run: the Lease keeps one active); ``env`` overrides
        this replica's variables (e.g. its own webhook port)."""
        self.starts += 1
        log = open(self.log_dir / f"operator-{self.starts}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            self.command,
            env={**self.env(), **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
        """Signal one replica and wait for it to exit (SIGKILL after 30 s)."""
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc)

    def logs(self) -> str:
        """The last 4000 characters of each replica's log, then its last 8 webhook access lines
        (one per admission request: kept apart so they do not push everything else out of a
        failure report, yet show whether the apiserver called that replica)."""
        parts = []
        for p in sorted(self.log_dir.glob("operator-*.log")):
            lines = p.read_text(errors="replace").splitlines()
            access = [line for line in lines if " aiohttp.access: " in line]
            kept = "\n".join(line for line in lines if " aiohttp.access: " not in line)
            parts.append(f"== {p.name}\n{kept[-4000:]}")
            parts.append(f"== {p.name}: {len(access)} webhook requests, the last ones:")
            parts.extend(line[:300] for line in access[-8:])
        return "\n".join(parts)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())


@contextmanager
def operator(dc: DevCluster, namespace: str, **env: str) -> Iterator[OperatorProcess]:
    """Install CRDs and RBAC, run one operator replica for ``namespace``; stop it afterwards."""
    install_crds(dc)
    with tempfile.TemporaryDirectory(prefix="berth-op-") as tmp:
        kubeconfig = operator_kubeconfig(dc, Path(tmp))
        op = OperatorProcess(dc, namespace, kubeconfig, Path(tmp), **env)
        op.start()
        try:
            yield op
        except BaseException:
            print(op.logs(), file=sys.stderr)
            raise
        finally:
            # Every kind of Berth's may carry the operator's finalizer: delete them while it
            # still runs, so the test namespace can go away afterwards (a LaneWorker left
            # behind kept namespaces Terminating, and the documented uninstall's --all -A
            # waiting on them).
            dc.kubectl(
                "-n",
                namespace,
                "delete",
                "agentsessions,sessionwarmpools,laneworkers,budgetpolicies",
                "--all",
                "--wait=true",
                "--timeout=120s",
                check=False,
                timeout=150,
            )
            op.stop_all()


@contextmanager
def scripted_model(script: dict[str, Any]) -> Iterator[Any]:
    """The scripted OpenAI-compatible server (session_runtime.llm.scripted) on a free port."""
    from session_runtime.llm.scripted import ScriptedServer

    srv = ScriptedServer(script, host=host_ip(), port=0)
    srv.start_in_thread()
    try:
        yield srv
    finally:
        srv.stop_thread()


def apply_in(dc: DevCluster, namespace: str, docs: list[dict[str, Any]]) -> None:
    """``kubectl -n NAMESPACE apply`` a list of manifests."""
    dc.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump_all(docs))


def example_docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def with_base_url(docs: list[dict[str, Any]], base_url: str) -> list[dict[str, Any]]:
    """The example with llm.baseURL pointed at the scripted model (nothing else changes)."""
    for doc in docs:
        if doc["kind"] == "AgentSession":
            doc["spec"]["llm"]["baseURL"] = base_url
    return docs


def kget(dc: DevCluster, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    res = dc.kubectl("-n", ns, "get", kind, name, "-o", "json", check=False)
    if res.returncode != 0:
        if "NotFound" in res.stderr:
            return None
        raise subprocess.CalledProcessError(res.returncode, res.args, res.stdout, res.stderr)
    obj: dict[str, Any] = json.loads(res.stdout)
    return obj


def klist(dc: DevCluster, ns: str, kind: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["-n", ns, "get", kind, "-o", "json"]
    if selector:
        args += ["-l", selector]
    items: list[dict[str, Any]] = json.loads(dc.kubectl(*args).stdout)["items"]
    return items


def wait(what: str, check: Callable[[], Any], cap: float = WAIT_CAP, every: float = 0.5) -> Any:
    """Poll ``check`` until truthy; AssertionError naming ``what`` after ``cap`` seconds."""
    return poll_until(what, check, cap, every)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            c: dict[str, Any] = cond
            return c
    return None


def session_phase(dc: DevCluster, ns: str, name: str) -> str:
    obj = kget(dc, ns, "agentsession", name) or {}
    return str((obj.get("status") or {}).get("phase", ""))


def bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


def blocking_bash(marker: str, go: str = "go") -> dict[str, Any]:
    """Records that it started, then blocks until the file ``go`` exists in the workspace."""
    return bash(f"echo ran >> {marker}; while [ ! -f {go} ]; do sleep 0.05; done")


def session_manifest(name: str, base_url: str, prompt: str, **spec: Any) -> dict[str, Any]:
    """A minimal AgentSession using the example's Secret name."""
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name},
        "spec": {
            "prompt": prompt,
            "model": "openai/gpt-4o-mini",
            "llm": {
                "baseURL": base_url,
                "apiKeySecretRef": {"name": "llm-credentials", "key": "api-key"},
            },
            **spec,
        },
    }


SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "llm-credentials", "labels": {"berth.dev/llm-credentials": "true"}},
    "stringData": {"api-key": "sk-test"},
}
