"""``berth-operator``'s entry point: keeps the ``kubernetes`` client library out of the
operator's process when its credentials do not need it (``k8s.client_library``: kopf would
import it, ≈9 MiB, for nothing), then runs :func:`berth_operator.main.main`.

This module imports nothing heavy before that decision: kopf must not be imported yet.
"""

from __future__ import annotations

from berth_operator.k8s.client_library import keep_client_library_out


def main(argv: list[str] | None = None) -> int:
    """Run the operator (``berth_operator.main.main``, same arguments and exit status) after
    :func:`keep_client_library_out`."""
    keep_client_library_out()
    from berth_operator.main import main as run_operator  # imported after the decision

    return run_operator(argv)


if __name__ == "__main__":
    raise SystemExit(main())
