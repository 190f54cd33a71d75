"""Berth operator: places, watches and resumes AgentSession pods (ARCHITECTURE.md §2-§5, §8).

Package map (layers enforced by import-linter, see pyproject.toml):

- ``main``       console script ``berth-operator``: settings, leader election, kopf, health/metrics.
- ``handlers``   thin kopf handlers named ``<kind>_<event>``; read, decide, apply.
- ``reconcile``  pure decisions (placement, replacement reasons, status from observations).
- ``builders``   pure manifest builders (session Pod, options ConfigMap, cleanup Job).
- ``api``        pydantic models of the CRDs and of the pod contract, constants, CRD generator.
- ``k8s``        the only module that calls the Kubernetes API.
- ``settings``, ``metrics``, ``errors``, ``runtime_client`` (HTTP to session pods).
"""
