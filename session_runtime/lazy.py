"""Package attributes imported on first use (PEP 562 module ``__getattr__``).

A package re-exports its public names so callers write ``from session_runtime.lanes import
LaneQueue``; importing every submodule eagerly would load the lane queue and the built-in tools
into every process that needs one constant of the package (the worker reads stream names and
lane names: ≈1.4 MiB of resident memory for code it never runs). With
:func:`exports` the package imports a heavy submodule the first time one of its names is read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``where`` maps each lazily exported name to
    the absolute name of the module that defines it, imported on first access (the import
    system caches it; the name is then read from it). Any other name raises AttributeError, as
    a missing module attribute does."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
