"""``kubectl berth import NAME --from-a3s EXPORT``: an a3s-code-core 9.x checkpoint becomes a
Berth session that resumes the checkpointed run.

A ``SessionCheckpointExportV1`` (its cross-language wire form ``{descriptor, contentBase64}``, as
a3s-code-core's checkpoint export sink writes it) is turned into:

1. the session's store, ``<volume>/store/<ns>/<NAME>/``: a session record whose run is
   ``interrupted`` and the run's loop checkpoint, written by the runtime's own
   ``berth-a3s-checkpoint import`` (run as a program: the plugin never imports the session
   runtime) into a staging directory on the same volume and renamed into place, so a session
   pod never sees half of it;
2. optionally the 9.x session's workspace, copied to ``<volume>/workspaces/<ns>/<NAME>/``
   (plus ``spec.workspace.subPath``): the files its completed tool rounds changed;
3. ownership of both handed to the session pods' user (``--owner``, default the image's uid
   10001), as the pods run non-root;
4. the AgentSession from ``--manifest`` (its name and namespace set to the import's), created
   through the apiserver with the caller's credentials.

``<volume>`` is the namespace's shared volume (the claim every session pod mounts) as this machine
sees it. The session pod then finds a saved session with one unfinished run and resumes it from
its checkpoint (``session_runtime.pod.start``): no completed tool round runs again. What does not
map is refused before anything is written, with the runtime's message naming the field (exit
code 1); an existing AgentSession or kept store of that name is refused too (an import never
merges into another conversation). When the AgentSession cannot be created (RBAC, a name taken
meanwhile), the store and workspace the import wrote are removed again.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from berth_operator.api.constants import (
    GROUP,
    SESSION_KIND,
    STORE_SUBDIR,
    VERSION,
    WORKSPACES_SUBDIR,
)
from berth_operator.errors import BerthOperatorError, NotFound
from berth_operator.k8s.paths import session_path

from kubectl_berth import rest as sync_rest
from kubectl_berth.client import PluginClient, connect
from kubectl_berth.errors import PluginError

#: The runtime's interchange program (console script ``berth-a3s-checkpoint``), run with the
#: plugin's own interpreter so it is the one installed alongside the plugin.
CHECKPOINT_PROGRAM = (sys.executable, "-m", "session_runtime.a3s_core.cli")
#: Exit code of ``berth-a3s-checkpoint`` when a field does not map.
UNMAPPED_EXIT = 2
#: The uid (and gid) Berth's pods run as by default: the image's user, the chart's
#: ``pods.runAsUser``. What the import writes is handed to it, so the session pod can write there.
POD_UID = 10001

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


@dataclass(frozen=True)
class Imported:
    """What an import did: the store directory, the workspace (None: not copied), the run the
    session resumes (None: the export had no loop checkpoint), the fields left behind."""

    store: Path
    workspace: Path | None
    run_id: str | None
    dropped: list[str]


def session_manifest(manifest: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    """``manifest`` (an AgentSession) with its name and namespace set to the import's.
    Raises PluginError when it is not an AgentSession of Berth's API."""
    if manifest.get("kind") != SESSION_KIND or manifest.get("apiVersion") != f"{GROUP}/{VERSION}":
        raise PluginError(f"--manifest must be an {SESSION_KIND} ({GROUP}/{VERSION})")
    meta = dict(manifest.get("metadata") or {})
    meta.update({"name": name, "namespace": namespace})
    return {**manifest, "metadata": meta}


def hand_over(path: Path, uid: int) -> None:
    """Make ``path`` (a tree) owned by ``uid``:``uid``, the session pods' user; nothing to do
    when this process already runs as ``uid``. Raises PluginError when it may not (only root
    may give files away)."""
    if os.geteuid() == uid:
        return
    try:
        os.chown(path, uid, uid, follow_symlinks=False)
        for entry in path.rglob("*"):
            os.chown(entry, uid, uid, follow_symlinks=False)
    except PermissionError as exc:
        raise PluginError(
            f"cannot hand {path} to uid {uid}, the session pods' user ({exc}): run the import "
            "as root or as that user, or name the pods' user with --owner"
        ) from exc


def write_store(
    export: Path,
    volume: Path,
    namespace: str,
    name: str,
    accept: Sequence[str],
    run: Runner,
    owner: int = POD_UID,
) -> tuple[Path, str | None, list[str]]:
    """Write the store of session ``name`` from ``export`` under ``volume``; return its
    directory, the run to resume and the fields left behind. Raises PluginError naming the
    field that does not map, or saying the store exists (nothing is written then)."""
    root = volume / STORE_SUBDIR / namespace
    target = root / name
    if target.exists():
        raise PluginError(
            f"{target} exists: a kept store of session {namespace}/{name} (delete it with "
            "berth.dev/delete-store, or import under another name)"
        )
    staging = volume / STORE_SUBDIR / f".import-{secrets.token_hex(4)}"
    argv = [*CHECKPOINT_PROGRAM, "import", "--store", str(staging), "--from", str(export)]
    argv += ["--session-id", name]
    for field in accept:
        argv += ["--accept", field]
    try:
        done = run(argv)
        if done.returncode != 0:
            why = done.stderr.strip().removeprefix("berth-a3s-checkpoint: ")
            kind = "does not map" if done.returncode == UNMAPPED_EXIT else "failed"
            raise PluginError(f"the a3s-code-core export {kind}: {why}")
        hand_over(staging / name, owner)
        root.mkdir(parents=True, exist_ok=True)
        os.rename(staging / name, target)  # same volume: atomic, and refused if it appeared
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    run_id, dropped = None, []
    for line in done.stdout.splitlines():
        if line.startswith("imported session "):
            run_id = line.rsplit(", run ", 1)[1]
        elif line.startswith("left behind: "):
            dropped.append(line.removeprefix("left behind: "))
    return target, None if run_id in (None, "None") else run_id, dropped


def workspace_dest(volume: Path, namespace: str, manifest: dict[str, Any]) -> Path:
    """The session's workspace on ``volume`` (``spec.workspace.subPath`` included); raises
    PluginError when it leaves the session's workspace root or already holds files."""
    name = str(manifest["metadata"]["name"])
    sub = str(((manifest.get("spec") or {}).get("workspace") or {}).get("subPath") or "")
    root = volume / WORKSPACES_SUBDIR / namespace / name
    dest = root / sub
    if not dest.resolve().is_relative_to(root.resolve()):
        raise PluginError(f"spec.workspace.subPath {sub!r} leaves the session's workspace")
    if dest.exists() and any(dest.iterdir()):
        raise PluginError(f"{dest} is not empty: the imported workspace would mix with it")
    return dest


def import_from_a3s(
    api: PluginClient,
    manifest: dict[str, Any],
    export: Path,
    volume: Path,
    workspace_from: Path | None = None,
    accept: Sequence[str] = (),
    run: Runner = _run,
    owner: int = POD_UID,
) -> Imported:
    """Store, workspace, then the AgentSession (module docstring). Raises PluginError (what
    does not map, an existing session, store or workspace) or the apiserver's errors."""
    name = manifest["metadata"]["name"]
    try:
        api.get_session(name)
        raise PluginError(f"agentsession {api.namespace}/{name} exists: import makes a new one")
    except NotFound:
        pass
    workspace = None
    if workspace_from is not None:
        workspace = workspace_dest(volume, api.namespace, manifest)  # checked before any write
    store, run_id, dropped = write_store(export, volume, api.namespace, name, accept, run, owner)
    try:
        if workspace_from is not None and workspace is not None:
            shutil.copytree(workspace_from, workspace, symlinks=True, dirs_exist_ok=True)
            hand_over(volume / WORKSPACES_SUBDIR / api.namespace / name, owner)
        what = f"create agentsession {api.namespace}/{name}"
        path = session_path(api.namespace)
        sync_rest.call_sync(what, api.rest.create, what, path, manifest)
    except BaseException:
        # Nothing half-made stays behind: a retry of the import would be refused by it.
        shutil.rmtree(store, ignore_errors=True)
        if workspace is not None:
            shutil.rmtree(workspace, ignore_errors=True)
        raise
    return Imported(store, workspace, run_id, dropped)


FromA3sOpt = Annotated[
    Path,
    typer.Option(
        "--from-a3s",
        exists=True,
        dir_okay=False,
        help="An a3s-code-core 9.x SessionCheckpointExportV1 (wire form JSON).",
    ),
]
VolumeOpt = Annotated[
    Path,
    typer.Option(
        "--volume",
        exists=True,
        file_okay=False,
        help="The namespace's shared session volume as mounted here (holds store/ and "
        "workspaces/).",
    ),
]
ManifestOpt = Annotated[
    Path, typer.Option("--manifest", exists=True, dir_okay=False, help="The AgentSession (YAML).")
]
WorkspaceFromOpt = Annotated[
    Path | None,
    typer.Option(
        "--workspace-from", exists=True, file_okay=False, help="The 9.x session's workspace."
    ),
]
AcceptOpt = Annotated[
    list[str] | None,
    typer.Option("--accept", help="A 9.x field to drop rather than refuse (repeatable)."),
]
OwnerOpt = Annotated[
    int, typer.Option("--owner", min=1, help="The uid the session pods run as (pods.runAsUser).")
]


def import_command(
    name: Annotated[str, typer.Argument(help="Name of the AgentSession to create.")],
    from_a3s: FromA3sOpt,
    volume: VolumeOpt,
    manifest: ManifestOpt,
    workspace_from: WorkspaceFromOpt = None,
    accept: AcceptOpt = None,
    owner: OwnerOpt = POD_UID,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig")] = None,
    context: Annotated[str | None, typer.Option("--context")] = None,
) -> None:
    """Import an a3s-code-core 9.x checkpoint as a new session that resumes its run.

    Writes the session's store (and, with --workspace-from, its workspace) on the shared
    volume, then creates the AgentSession from --manifest; its pod resumes the checkpointed
    run, running no completed tool round again. A field that does not map is refused by name.
    """
    try:
        api = connect(kubeconfig=kubeconfig, context=context, namespace=namespace)
        body = session_manifest(yaml.safe_load(manifest.read_text()), name, api.namespace)
        done = import_from_a3s(
            api, body, from_a3s, volume, workspace_from, accept or (), owner=owner
        )
    except (BerthOperatorError, PluginError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    typer.echo(f"agentsession {api.namespace}/{name} created; store {done.store}")
    if done.workspace is not None:
        typer.echo(f"workspace copied to {done.workspace}")
    typer.echo(f"its pod resumes run {done.run_id}" if done.run_id else "no run to resume")
    for field in done.dropped:
        typer.echo(f"left behind: {field}")
