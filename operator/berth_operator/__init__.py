"""Berth operator: places, watches and resumes AgentSession pods (docs/architecture.md §2-§5, §8).

Package map (layers enforced by import-linter, see pyproject.toml):

- ``main``       console script ``berth-operator``: settings, leader election, kopf, health/metrics.
- ``handlers``   thin kopf handlers named ``<kind>_<event>``; read, decide, apply.
- ``reconcile``  pure decisions (placement, replacement reasons, status from observations).
- ``builders``   pure manifest builders (session Pod, options ConfigMap, cleanup Job).
- ``api``        pydantic models of the CRDs and of the pod contract, constants, CRD generator.
- ``k8s``        the only module that calls the Kubernetes API.
- ``settings``, ``metrics``, ``errors``, ``runtime_client`` (HTTP to session pods).

``__version__`` is the installed distribution's (``berth-operator``, or ``kubectl-berth``, the
plugin alone, plugin/pyproject.toml; the root pyproject.toml is the one source of both versions:
the default session image tag and the plugin's ``version`` read it, and a test holds the chart's
``appVersion`` to it).
"""

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "berth-operator"
"""The Python distribution name of the operator, session runtime and plugin (the image's)."""
PLUGIN_DISTRIBUTION = "kubectl-berth"
"""The distribution of the kubectl plugin alone (plugin/pyproject.toml)."""


def _installed_version() -> str:
    """The version of whichever distribution installed this package; ``0.0.0+unknown`` for a
    source tree that was never installed."""
    for name in (DISTRIBUTION, PLUGIN_DISTRIBUTION):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "0.0.0+unknown"


__version__ = _installed_version()
