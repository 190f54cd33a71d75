"""kubectl-berth: the kubectl plugin for Berth's AgentSessions, a user's CLI on their machine.

Package map:

- ``cli``          the Typer app and console script ``kubectl-berth`` (``kubectl berth ...``).
- ``views``        the terminal layout of ``status`` and ``events`` (describe-style, never cut).
- ``session_api``  the session pod's HTTP API (docs/architecture.md §5) through the apiserver's
                   pod proxy: send, passivate, wake, logs.
- ``front_door``   the front door (gateway) calls of ``send --gateway`` and ``logs --message``.
- ``client``       ``PluginClient``: the Kubernetes reads and writes, with the user's kubeconfig.
- ``rest``         synchronous requests by path over the ``kubernetes`` client.
- ``ui``           ``kubectl berth ui``: a local web view (imported only by that command).

It shares with the operator only the vocabulary of the API (``berth_operator.api``: the CRD
models and constants), its errors (``berth_operator.errors``) and the API paths and error
translation (``berth_operator.k8s.paths``, ``.calls``); an import contract in pyproject.toml keeps
the operator from importing this package and this package from the operator's other modules.
``__version__`` is the installed distribution's: ``kubectl-berth`` (the plugin alone) or
``berth-operator`` (the image, whose chart's cleanup hook runs ``kubectl-berth cleanup-lease``).
"""

from berth_operator import __version__

__all__ = ["__version__"]
