"""Whether the operator's process needs the ``kubernetes`` client library, and keeping it out.

The operator sends every request over its own aiohttp session (``k8s.connection``) and finds its
credentials the way kopf's default login does (``handlers.login.credentials``): the client
library's loaders when the package is importable, else kopf's own readers of the in-cluster
service account and of the kubeconfig's current context. kopf's readers take what a pod or a plain
kubeconfig holds (a service-account token, a static bearer token, a client certificate, basic
auth); only a kubeconfig user with an ``exec`` credential plugin or an ``auth-provider`` needs the
library's loaders.

Yet kopf imports the library whenever it is installed (its third-party type helpers import
``kubernetes.client`` to recognise its model objects), and the image installs it for the
``kubectl-berth`` plugin: ≈9 MiB of resident memory (270 modules) in a process that never uses
it (bench/README.md, operator memory). :func:`keep_client_library_out` marks the package absent
(a ``None`` entry in ``sys.modules``: Python's documented way to make an import raise
``ModuleNotFoundError``) before kopf is imported, unless the credentials need it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

PACKAGE = "kubernetes"
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
"""The token a pod's service account mounts (where kopf's in-cluster login reads it)."""
LIBRARY_ONLY_AUTH = ("exec", "auth-provider")
"""Kubeconfig user keys that only the client library's loaders can turn into credentials."""


def kubeconfig_paths(environ: Mapping[str, str], home: Path) -> list[Path]:
    """The kubeconfig files, as kopf's reader finds them: ``KUBECONFIG`` (a list joined by
    ``os.pathsep``; empty items skipped, ``~`` expanded) or else ``~/.kube/config`` when it
    exists; [] when there is neither."""
    listed = environ.get("KUBECONFIG", "")
    if listed:
        items = [item.strip() for item in listed.split(os.pathsep)]
        return [home / item[2:] if item.startswith("~/") else Path(item) for item in items if item]
    default = home / ".kube" / "config"
    return [default] if default.exists() else []


def current_user(configs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The current context's user entry of merged kubeconfigs, merged as kubectl and kopf do:
    the first file that sets ``current-context`` wins, and so does the first entry of each name.
    None when no context is current or it names no known user."""
    current: str | None = None
    contexts: dict[str, Mapping[str, Any]] = {}
    users: dict[str, Mapping[str, Any]] = {}
    for config in configs:
        current = current or config.get("current-context") or None
        for item in config.get("contexts") or []:
            contexts.setdefault(item["name"], item.get("context") or {})
        for item in config.get("users") or []:
            users.setdefault(item["name"], item.get("user") or {})
    if current is None or current not in contexts:
        return None
    return users.get(contexts[current].get("user") or "")


def user_needs_client_library(user: Mapping[str, Any]) -> bool:
    """Whether a kubeconfig user's credentials come from a plugin or provider that only the
    client library runs (``LIBRARY_ONLY_AUTH``)."""
    return any(user.get(key) for key in LIBRARY_ONLY_AUTH)


def client_library_needed(
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    token: Path = SERVICE_ACCOUNT_TOKEN,
) -> bool:
    """Whether this process's credentials need the client library: False in a pod (the service
    account comes first, as in kopf's default login) or when the kubeconfig's current user
    holds credentials kopf reads itself; True when the user has an ``exec`` plugin or an
    ``auth-provider``, and whenever the kubeconfig cannot be read or resolved (the library's
    loaders then report what is wrong, as before)."""
    if token.exists():
        return False
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    paths = kubeconfig_paths(environ, home)
    try:
        configs = [yaml.safe_load(path.read_text(encoding="utf-8")) or {} for path in paths]
        user = current_user(configs)
    except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError):
        return True
    return user is None or user_needs_client_library(user)


def keep_client_library_out(
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    token: Path = SERVICE_ACCOUNT_TOKEN,
) -> bool:
    """Make ``import kubernetes`` fail in this process unless the credentials need it
    (:func:`client_library_needed`) or it is already imported. Call it before kopf is imported.
    Returns whether the library is now kept out."""
    if sys.modules.get(PACKAGE, "absent") is None:
        return True
    if PACKAGE in sys.modules or client_library_needed(environ, home, token):
        return False
    sys.modules[PACKAGE] = None  # type: ignore[assignment]
    return True
