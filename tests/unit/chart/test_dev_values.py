"""hack/dev-values.sh writes values that pass the schema and run Berth on the dev cluster."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import yaml

from tests.unit.chart.helm import ROOT, documents, one, render

PASSWORDS = {role: f"{role}-pw-0123456789abcdef" for role in ("session", "worker", "operator")}


def run_script(
    tmp_path: Path, env_text: str, passwords: dict[str, str] = PASSWORDS
) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "env"
    env_file.write_text(env_text)
    secrets = tmp_path / "redis-secrets"  # as hack/cluster-up.sh leaves them
    secrets.mkdir(exist_ok=True)
    for role, password in passwords.items():
        (secrets / f"{role}-password").write_text(password)
    return subprocess.run(
        ["bash", str(ROOT / "hack" / "dev-values.sh"), str(tmp_path / "values.yaml")],
        env={**os.environ, "BERTH_DEV_ENV": str(env_file), "BERTH_DEV_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_dev_values_render_an_operator_of_the_loaded_image(tmp_path: Path) -> None:
    proc = run_script(
        tmp_path,
        "export KUBECONFIG=/x/kubeconfig\n"
        "export BERTH_REDIS_URL=redis://berth-admin:pw@198.19.0.1:6390/0\n"
        'export BERTH_NODES="node-a node-b"\nexport BERTH_IMAGE=berth.dev.local/berth:0123abcd\n',
    )
    assert proc.returncode == 0, proc.stderr
    values = yaml.safe_load((tmp_path / "values.yaml").read_text())
    docs = documents(render(values))
    deploy = one(docs, "Deployment", "-operator")
    spec = deploy["spec"]["template"]["spec"]
    assert not spec.get("nodeSelector")
    container = spec["containers"][0]
    assert container["image"] == "berth.dev.local/berth:0123abcd"
    assert container["imagePullPolicy"] == "Never"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["BERTH_REDIS_URL"] == "redis://198.19.0.1:6390/0"  # no admin password in values
    # Each role's URL carries its ACL user, the password from the dev Secret.
    assert (
        "berth-session:$(REDIS_SESSION_PASSWORD)@198.19.0.1:6390" in env["BERTH_REDIS_SESSION_URL"]
    )
    assert env["BERTH_SESSION_IMAGE"] == "berth.dev.local/berth:0123abcd"
    assert env["BERTH_DEFAULT_CLAIM_NAME"] == "berth-shared"
    kinds = {d["kind"] for d in docs}
    assert "PersistentVolumeClaim" not in kinds  # the dev cluster's claim is pre-bound
    assert not [d for d in docs if d["metadata"]["name"].endswith("-redis")]
    # The values carry the dev Redis's role passwords: the chart makes the Secret the operator
    # reads them from, so nothing has to be created in the namespace before installing.
    secret = one(docs, "Secret", "-redis-auth")
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {
        f"{role}-password": pw for role, pw in PASSWORDS.items()
    }
    refs = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in container["env"]
        if e["name"].startswith("REDIS_") and "valueFrom" in e
    }
    assert refs == {secret["metadata"]["name"]}
    assert (tmp_path / "values.yaml").stat().st_mode & 0o077 == 0  # passwords: owner only


def test_dev_values_over_tls_give_the_operator_the_dev_ca(tmp_path: Path) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    (tmp_path / "ca.crt").write_text(pem)
    proc = run_script(
        tmp_path,
        f"export BERTH_REDIS_URL='rediss://berth-admin:pw@198.19.0.1:6390/0"
        f"?ssl_ca_certs={tmp_path}/ca.crt'\n"
        f"export BERTH_REDIS_CA={tmp_path}/ca.crt\nexport BERTH_IMAGE=b/berth:0123abcd\n",
    )
    assert proc.returncode == 0, proc.stderr
    values = yaml.safe_load((tmp_path / "values.yaml").read_text())
    assert values["redis"]["tls"]["caCert"] == pem
    docs = documents(render(values))
    container = one(docs, "Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # The path the chart mounts the CA at, not the host's: the operator pod reads it there.
    assert env["BERTH_REDIS_SESSION_URL"] == (
        "rediss://berth-session:$(REDIS_SESSION_PASSWORD)@198.19.0.1:6390/0"
        "?ssl_ca_certs=/var/run/berth/redis-tls/ca.crt"
    )
    assert any(m["mountPath"] == "/var/run/berth/redis-tls" for m in container["volumeMounts"])


def test_dev_values_needs_the_dev_redis_passwords(tmp_path: Path) -> None:
    proc = run_script(
        tmp_path,
        "export BERTH_REDIS_URL=redis://a:b@h:1/0\nexport BERTH_IMAGE=i:1\n",
        passwords={"session": "s" * 20},
    )
    assert proc.returncode != 0
    assert "no worker password" in proc.stderr
    assert not (tmp_path / "values.yaml").exists()


def test_dev_values_needs_the_cluster_env(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "export KUBECONFIG=/x\nexport BERTH_IMAGE=i:1\n")
    assert proc.returncode != 0
    assert "BERTH_REDIS_URL missing" in proc.stderr
    assert not (tmp_path / "values.yaml").exists()
