"""The dev cluster as the test suite sees it (docs/architecture.md §9).

``DevCluster.ensure()`` runs ``hack/cluster-up.sh`` (idempotent: it reuses a cluster that is up)
under a file lock, so parallel pytest processes share one cluster, then reads ``.berth/dev/env``.
Pods run as real containers on the real nodes ``BERTH_NODES`` (kubelet + containerd), from the
image ``BERTH_IMAGE`` built from the Dockerfile; services the pods need (Redis, scripted models)
listen on ``BERTH_HOST_IP``. With ``BERTH_EXTERNAL_CLUSTER=1`` the cluster named by ``KUBECONFIG``
is used as it is (kind, k3d or a real cluster) with those variables taken from the environment.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from berth_operator.builders.claim import build_shared_claim
from berth_operator.settings import OperatorSettings, SharedClaimSettings

ROOT = Path(__file__).resolve().parent.parent
DEV_DIR = Path(os.environ.get("BERTH_DEV_DIR", ROOT / ".berth" / "dev"))
POD_UID = 10001
"""The uid (and gid) Berth's pods run as: the image's user."""


def host_ip() -> str:
    """The address on this machine that pods can reach (``BERTH_HOST_IP``; 127.0.0.1 when unset).

    Test servers that pods call (a scripted model) bind here instead of loopback.
    """
    if os.environ.get("BERTH_HOST_IP"):
        return os.environ["BERTH_HOST_IP"]
    env_file = DEV_DIR / "env"
    if env_file.exists():
        return parse_env_file(env_file.read_text()).get("BERTH_HOST_IP", "127.0.0.1")
    return "127.0.0.1"


def parse_env_file(text: str) -> dict[str, str]:
    """Parse the ``export K=V`` lines of ``.berth/dev/env``; ``$PATH`` expands from os.environ."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("export "):
            continue
        key, _, raw = line[len("export ") :].partition("=")
        value = shlex.split(raw)[0] if raw else ""
        env[key] = value.replace("$PATH", os.environ.get("PATH", ""))
    return env


def poll_until(
    what: str,
    check: Any,
    timeout: float,
    interval: float = 0.5,
    *,
    error: type[Exception] = AssertionError,
) -> Any:
    """Call ``check()`` every ``interval`` seconds until it returns a truthy value (returned);
    a failed kubectl call (``CalledProcessError``) counts as "not yet". After ``timeout`` seconds
    raise ``error`` naming ``what`` and the last value. Bounds a wait; never a timing assertion.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except subprocess.CalledProcessError as exc:
            last = exc.stderr
        else:
            if last:
                return last
        time.sleep(interval)
    raise error(f"gave up after {timeout}s waiting for {what}; last: {str(last)[:2000]}")


@dataclass
class DevCluster:
    """Handle on the running dev cluster: kubeconfig, environment and a kubectl runner."""

    kubeconfig: str
    env: dict[str, str]
    nodes: list[str]
    """Names of the real nodes (where Berth's pods run)."""
    shared_dir: str
    """Host directory under which the dev cluster's provisioner makes its volumes."""
    external: bool = False
    _proc_env: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def ensure(cls) -> DevCluster:
        """Start (or reuse) the dev cluster and return a handle. Raises RuntimeError on failure."""
        if os.environ.get("BERTH_EXTERNAL_CLUSTER") == "1":
            kubeconfig = os.environ["KUBECONFIG"]
            env = {k: v for k, v in os.environ.items() if k.startswith(("BERTH_", "PROMETHEUS_"))}
            env["KUBECONFIG"] = kubeconfig
            nodes = os.environ.get("BERTH_NODES", "").split()
            return cls(kubeconfig, env, nodes, os.environ.get("BERTH_SHARED_DIR", ""), True)
        DEV_DIR.mkdir(parents=True, exist_ok=True)
        with open(DEV_DIR / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = subprocess.run(
                ["bash", str(ROOT / "hack" / "cluster-up.sh")],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"cluster-up failed:\n{proc.stdout}\n{proc.stderr}")
        env = parse_env_file((DEV_DIR / "env").read_text())
        return cls(
            kubeconfig=env["KUBECONFIG"],
            env=env,
            nodes=env.get("BERTH_NODES", "").split(),
            shared_dir=env.get("BERTH_SHARED_DIR", ""),
        )

    @property
    def image(self) -> str:
        """Berth's image as loaded into the nodes (``BERTH_IMAGE``)."""
        return self.env["BERTH_IMAGE"]

    @property
    def host_ip(self) -> str:
        """Address of this machine that pods reach (Redis, Prometheus, scripted models)."""
        return self.env.get("BERTH_HOST_IP", "127.0.0.1")

    def lose_node(self, node: str) -> None:
        """Node loss: SIGKILL the node's kubelet, containerd and every container it ran."""
        self._nodes_sh("kill", node)

    def restore_node(self, node: str) -> None:
        """Start a lost node's containerd and kubelet again (it turns Ready by itself)."""
        self._nodes_sh("start", node)

    def container_pid(self, pod: dict[str, Any], container: int = 0) -> int:
        """Host PID of a running container of ``pod`` (a Pod as a dict), read from its node's CRI.

        Raises LookupError when the container is not running or its node is not a dev node.
        """
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        cid = statuses[container].get("containerID", "") if len(statuses) > container else ""
        node = (pod.get("spec") or {}).get("nodeName", "")
        sock = DEV_DIR / "nodes" / node / "containerd.sock"
        if not cid.startswith("containerd://") or not sock.exists():
            raise LookupError(f"no running container on a dev node: {cid!r} on {node!r}")
        out = subprocess.run(
            ["crictl", "-r", f"unix://{sock}", "inspect", "-o", "json", cid.split("://", 1)[1]],
            env=self.proc_env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        pid = int(json.loads(out)["info"]["pid"])
        if pid <= 0:
            raise LookupError(f"container {cid} has no process")
        return pid

    def _nodes_sh(self, *args: str) -> None:
        subprocess.run(
            ["bash", str(ROOT / "hack" / "nodes.sh"), *args],
            env=self.proc_env,
            check=True,
            capture_output=True,
            timeout=120,
        )

    @property
    def proc_env(self) -> dict[str, str]:
        """``os.environ`` plus the cluster's env, for subprocesses (kubectl, helm, operator)."""
        if not self._proc_env:
            self._proc_env = {**os.environ, **self.env}
        return self._proc_env

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the cluster. Raises CalledProcessError when ``check`` and rc != 0."""
        proc = subprocess.run(
            ["kubectl", *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.proc_env,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, proc.args, proc.stdout, proc.stderr
            )
        return proc

    def apply(self, manifest: dict[str, Any] | Sequence[dict[str, Any]] | str) -> str:
        """``kubectl apply -f -`` a manifest (dict, list of dicts or YAML text); returns stdout."""
        if isinstance(manifest, str):
            text = manifest
        elif isinstance(manifest, dict):
            text = yaml.safe_dump(manifest)
        else:
            text = yaml.safe_dump_all(list(manifest))
        return self.kubectl("apply", "-f", "-", input=text).stdout

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        """Return one object as a dict (``kubectl get -o yaml``)."""
        ns = ["-n", namespace] if namespace else []
        out = self.kubectl("get", kind, name, *ns, "-o", "yaml").stdout
        obj: dict[str, Any] = yaml.safe_load(out)
        return obj

    def wait_for(
        self, what: str, predicate: Any, timeout: float = 120, interval: float = 0.5
    ) -> Any:
        """Poll ``predicate()`` until it returns a truthy value; raise TimeoutError naming ``what``.

        This bounds how long a test waits for the cluster; it is not a timing assertion.
        """
        return poll_until(what, predicate, timeout, interval, error=TimeoutError)

    @contextmanager
    def namespace(self, prefix: str = "t") -> Iterator[str]:
        """A fresh namespace for one test, deleted afterwards (without waiting for it to go).

        Its shared claim comes the way a user's does: the operator creates it (managed claims)
        from the StorageClass berth-shared, served by the dev cluster's provisioner
        (hack/provisioner.sh), whose volume is removed with the claim."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", name)
        try:
            yield name
        finally:
            self.kubectl("delete", "namespace", name, "--wait=false", check=False)

    def make_dirs(self, path: Path) -> Path:
        """``mkdir -p`` inside a claim, as directories below a set-up volume root are: owned by
        the pods' user and group (10001), group-writable and setgid (mode 2775), so that the
        directories the kubelet makes below them for a pod's subPath (as root) get the pods'
        group and its write access, as they do below the root itself (docs/install.md, "The
        shared volume")."""
        created = []
        p = path
        while not p.exists():
            created.append(p)
            p = p.parent
        for d in reversed(created):
            d.mkdir()
            os.chown(d, POD_UID, POD_UID)
            d.chmod(0o2775)
        return path

    def claim_dir(self, namespace: str, claim: str = "berth-shared", timeout: float = 180) -> Path:
        """Host directory of the volume behind ``namespace/claim`` (the provisioner's volumes
        are directories on this machine, seen by both nodes). A test that needs the directory
        before any session made the claim creates it here with the operator's own claim body
        (``build_shared_claim``, class berth-shared), so the operator takes it as the one it
        manages and sets it up as usual. Waits up to ``timeout`` seconds for it to be bound."""
        if self.kubectl("-n", namespace, "get", "pvc", claim, check=False).returncode != 0:
            settings = OperatorSettings(claims=SharedClaimSettings(storage_class="berth-shared"))
            self.kubectl(
                "create",
                "-f",
                "-",
                input=json.dumps(build_shared_claim(namespace, claim, settings)),
                check=False,
            )

        def volume() -> str:
            pvc = json.loads(
                self.kubectl("-n", namespace, "get", "pvc", claim, "-o", "json").stdout
            )
            return str((pvc.get("spec") or {}).get("volumeName") or "")

        pv_name = self.wait_for(f"claim {namespace}/{claim} bound", volume, timeout)
        pv = json.loads(self.kubectl("get", "pv", pv_name, "-o", "json").stdout)["spec"]
        source = pv.get("hostPath") or pv.get("local") or {}
        if not source.get("path"):
            raise LookupError(f"PersistentVolume {pv_name} has no host path: {pv}")
        return Path(source["path"])
