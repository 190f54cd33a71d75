"""What the tests of the a3s-code-core 9.x binding share (modules named ``*a3s_core*``).

:func:`binding` is the installed ``berth_a3s_core`` module (``make a3s-core-binding`` builds
and installs it, and ``make test`` runs that first). Where cargo is on PATH the binding can be
built, so its absence fails the test (saying how to build it) instead of skipping; only on a
machine without the Rust toolchain do the tests skip, saying so.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest


def binding() -> Any:
    """``berth_a3s_core``, or fail (cargo present) / skip (no Rust toolchain) saying why."""
    try:
        import berth_a3s_core
    except ImportError:
        if shutil.which("cargo") is None:
            pytest.skip("no Rust toolchain (cargo) here: the a3s-code-core binding cannot be built")
        pytest.fail(
            "the a3s-code-core binding is not installed: run `make a3s-core-binding` "
            "(hack/a3s-core-binding.sh); `make test` does it first"
        )
    return berth_a3s_core


def acl_config(base_url: str = "http://127.0.0.1:9/v1") -> str:
    """An a3s-code-core agent config (ACL) with one OpenAI-compatible model at ``base_url``
    (the default is a closed port: for tests that never call the model)."""
    return (
        'default_model = "openai/gpt-4o-mini"\nproviders "openai" {\n  api_key = "k"\n'
        f'  base_url = "{base_url}"\n  models "gpt-4o-mini" {{\n  }}\n}}\n'
    )
