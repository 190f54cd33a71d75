"""The Job calls of retention (``berth_operator.retention``): list the planned store-cleanup
Jobs, resume one when its time has come, delete one that is no longer wanted or done.

Used by ``berth_operator.handlers.retention``; straight to the apiserver (no cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from berth_operator.errors import NotFound
from berth_operator.k8s import paths as rest
from berth_operator.k8s.client import KubeClient


def _jobs(namespace: str | None, name: str = "") -> str:
    return rest.group("batch", "v1", namespace, "jobs", name)


async def list_jobs(kube: KubeClient, selector: str, namespaces: Sequence[str]) -> list[Any]:
    """The Jobs matching label ``selector`` in ``namespaces`` (empty: every namespace)."""
    items: list[Any] = []
    scopes: list[str | None] = list(namespaces) or [None]
    for namespace in scopes:
        where = namespace or "all namespaces"
        obj = await kube.rest.get(
            f"list jobs {where} {selector}", _jobs(namespace), labelSelector=selector
        )
        items.extend(obj.get("items") or [])
    return items


async def resume_job(kube: KubeClient, namespace: str, name: str) -> None:
    """Set ``spec.suspend: false`` (a merge patch): the Job's pod starts."""
    patch = {"spec": {"suspend": False}}
    await kube.rest.patch(f"resume job {namespace}/{name}", _jobs(namespace, name), patch)


async def delete_job(kube: KubeClient, namespace: str, name: str) -> None:
    """DELETE a Job and its pods (background propagation); a missing Job is fine."""
    options = {"propagationPolicy": "Background"}
    try:
        await kube.rest.delete(f"delete job {namespace}/{name}", _jobs(namespace, name), options)
    except NotFound:
        return
