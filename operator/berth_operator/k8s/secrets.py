"""Secret calls of the operator (docs/architecture.md §11): the namespace's task master key
``berth-task-key``, each session's ``<name>-berth`` and the LLM key Secret a session names.

Requests by path (:mod:`berth_operator.k8s.rest`) over the operator's shared session; answers
are plain dicts. Errors as in :mod:`berth_operator.k8s.client` (NotFound, AlreadyExists,
Conflict, KubeError).
Values read or written here are never logged and never put in an error message: messages name
the Secret, not its content.

- :meth:`SecretApi.ensure_task_master`: read ``berth-task-key``; create it with 32 random bytes
  when absent (AlreadyExists: another writer won, read theirs). Idempotent.
- :meth:`SecretApi.ensure_session_secret`: create ``<name>-berth`` (token, task key, the session
  role's Redis URL) or bring it up to date (task key added once the master exists, URL
  following the operator's setting); returns the API token.
- :meth:`SecretApi.ensure_worker_redis`: ``berth-worker-redis`` holds the workers' Redis URL.
- :meth:`SecretApi.ensure_redis_ca`: ``berth-redis-ca`` holds the CA files Redis URLs name.
- :meth:`SecretApi.read_secret`: a Secret or None.
- :meth:`SecretApi.read_secret_shared`: the same, one GET shared by concurrent readers of one
  Secret (the LLM key Secret a burst of sessions names).

Needs RBAC ``secrets: get, create, update`` (config/rbac).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from berth_operator.api.common import SessionRef
from berth_operator.api.constants import TASK_MASTER_SECRET
from berth_operator.builders.names import session_secret_name
from berth_operator.builders.redis_ca import build_redis_ca_secret, redis_ca_paths
from berth_operator.builders.secrets import (
    api_token_of,
    build_session_secret,
    build_task_master_secret,
    build_worker_redis_secret,
    decode_data,
    master_of,
    new_api_token,
    new_master_key,
    session_data,
    session_secret_update,
)
from berth_operator.errors import AlreadyExists, KubeError, NotFound
from berth_operator.k8s import rest
from berth_operator.k8s.connection import ApiSession
from berth_operator.k8s.singleflight import SingleFlight


class SecretApi:
    """Secret reads and writes of the operator; every method is a coroutine."""

    def __init__(self, session: ApiSession) -> None:
        # secret=True: an answer about a Secret may echo its data, so errors are not chained.
        self.rest = rest.AsyncRest(session, secret=True)
        self._shared_reads: SingleFlight[tuple[str, str], dict[str, Any] | None] = SingleFlight()

    @classmethod
    def from_kube(cls, kube: Any) -> SecretApi:
        """Share the session of a :class:`berth_operator.k8s.client.KubeClient`."""
        return cls(kube.session)

    async def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Secret as a dict, or None when it does not exist."""
        try:
            return await self.rest.get(
                f"get secret {namespace}/{name}", rest.core(namespace, "secrets", name)
            )
        except NotFound:
            return None

    async def read_secret_shared(self, namespace: str, name: str) -> dict[str, Any] | None:
        """:meth:`read_secret`, with callers that ask while a GET of the same Secret is in
        flight given that GET's answer (:class:`~berth_operator.k8s.singleflight.SingleFlight`):
        the dict is shared, so it is for reading only. Nothing is cached after the GET."""
        return await self._shared_reads.do(
            (namespace, name), lambda: self.read_secret(namespace, name)
        )

    async def create_secret(self, body: dict[str, Any]) -> None:
        """POST a Secret (AlreadyExists when it exists)."""
        meta = body["metadata"]
        await self.rest.create(
            f"create secret {meta['namespace']}/{meta['name']}",
            rest.core(meta["namespace"], "secrets"),
            body,
        )

    async def replace_secret(self, body: dict[str, Any]) -> None:
        """PUT a Secret with its resourceVersion (Conflict when someone wrote first)."""
        meta = body["metadata"]
        await self.rest.replace(
            f"replace secret {meta['namespace']}/{meta['name']}",
            rest.core(meta["namespace"], "secrets", meta["name"]),
            body,
        )

    async def ensure_task_master(self, namespace: str) -> bytes:
        """The namespace's master key, creating ``berth-task-key`` when absent. Raises
        KubeError (also when the Secret exists but holds no 32-byte ``master``)."""
        current = await self.read_secret(namespace, TASK_MASTER_SECRET)
        if current is None:
            with contextlib.suppress(AlreadyExists):  # another writer won: read theirs
                await self.create_secret(build_task_master_secret(namespace, new_master_key()))
            current = await self.read_secret(namespace, TASK_MASTER_SECRET)
        master = master_of(current)
        if master is None:
            raise KubeError(
                f"secret {namespace}/{TASK_MASTER_SECRET} has no 32-byte key 'master'; delete it "
                "and the operator creates a new one"
            )
        return master

    async def ensure_worker_redis(self, namespace: str, url: str) -> None:
        """Create ``berth-worker-redis`` holding ``url``, or update it when it differs (a rotated
        password). Raises KubeError."""
        await self._ensure_data(build_worker_redis_secret(namespace, url))

    async def ensure_redis_ca(self, namespace: str, urls: Iterable[str]) -> None:
        """Copy the CA files the Redis ``urls`` name (``ssl_ca_certs``, read from this
        process's filesystem) into the namespace's ``berth-redis-ca``, which the pods given those
        URLs mount (builders/redis_ca.py); nothing when none names one. Raises KubeError, also
        when a file cannot be read (the message names it)."""
        files: dict[str, bytes] = {}
        for path in redis_ca_paths(urls):
            try:
                files[path] = await asyncio.to_thread(Path(path).read_bytes)
            except OSError as exc:
                raise KubeError(
                    f"cannot read {path}, the CA file a Redis URL names: {exc.strerror}"
                ) from None
        if files:
            try:
                wanted = build_redis_ca_secret(namespace, files)
            except ValueError as exc:
                raise KubeError(str(exc)) from None
            await self._ensure_data(wanted)

    async def _ensure_data(self, wanted: dict[str, Any]) -> None:
        """Create the Secret ``wanted``, or replace it when its data differs. Raises KubeError."""
        namespace, name = wanted["metadata"]["namespace"], wanted["metadata"]["name"]
        current = await self.read_secret(namespace, name)
        if current is None:
            with contextlib.suppress(AlreadyExists):
                await self.create_secret(wanted)
                return
            current = await self.read_secret(namespace, name)
            if current is None:
                raise KubeError(f"secret {namespace}/{name} vanished")
        if decode_data(current) == decode_data(wanted):
            return
        wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await self.replace_secret(wanted)

    async def ensure_session_secret(
        self,
        ref: SessionRef,
        master: bytes | None,
        redis_url: str = "",
        *,
        options: bytes | None = None,
        known: bool = False,
    ) -> str:
        """Create or update ``<name>-berth`` (token, task key, the session role's Redis URL, the
        pod's options.json when given); return its API token. ``known``: the Secret was seen
        before, so read it first; otherwise create first (one call for a new session instead of
        a GET and a POST). Raises KubeError."""
        name = session_secret_name(ref.name)
        current = await self.read_secret(ref.namespace, name) if known else None
        if current is None:
            token = new_api_token()
            try:
                await self.create_secret(
                    build_session_secret(ref, session_data(ref, token, master, redis_url, options))
                )
                return token
            except AlreadyExists:
                current = await self.read_secret(ref.namespace, name)
                if current is None:
                    raise KubeError(f"secret {ref.namespace}/{name} vanished") from None
        wanted = session_secret_update(ref, current, master, redis_url, options)
        if wanted is not None:
            body = build_session_secret(ref, wanted)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            body["metadata"]["labels"] = {
                **(current["metadata"].get("labels") or {}),
                **body["metadata"]["labels"],
            }
            await self.replace_secret(body)
            current = body
        issued = api_token_of(current)
        if issued is None:
            raise KubeError(f"secret {ref.namespace}/{name} has no api-token")
        return issued

    async def api_token(self, ref: SessionRef) -> str | None:
        """The API token of session ``ref`` from its Secret, or None when there is none."""
        return api_token_of(await self.read_secret(ref.namespace, session_secret_name(ref.name)))
