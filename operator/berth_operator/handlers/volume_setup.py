"""The shared claim's one-shot set-up, as a session or LaneWorker pass runs it (I/O around
``builders.volume_setup``): the set-up Job created when a claim lacks its record, its outcome
read, and success recorded on the claim so it never runs again for that claim."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth_operator.api.constants import ANNOTATION_VOLUME_SETUP
from berth_operator.builders.volume_setup import (
    build_setup_job,
    needs_setup,
    setup_job_name,
    setup_outcome,
    setup_record,
    setup_status,
)
from berth_operator.k8s.client import KubeClient
from berth_operator.settings import OperatorSettings


async def claim_setup_status(
    kube: KubeClient,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    claim: Mapping[str, Any] | None,
) -> tuple[bool, str, str] | None:
    """None when the claim ``namespace/name`` (its observed body; None: it does not exist) needs
    no set-up (set up already, or ``claims.setup`` off). Otherwise the ``StoreReady`` triple
    while its set-up Job runs or failed (``builders.volume_setup.setup_status``), after creating
    the Job when there is none; a succeeded Job is recorded on the claim (then None).
    Raises KubeError from the API calls."""
    if claim is None or not needs_setup(claim, settings):
        return None
    job = await kube.get_job(namespace, setup_job_name(name))
    if setup_outcome(job) == "succeeded":
        await kube.annotate_pvc(namespace, name, ANNOTATION_VOLUME_SETUP, setup_record(settings))
        return None
    if job is None:
        await kube.create_job(build_setup_job(namespace, name, settings))
    return setup_status(namespace, name, job)
