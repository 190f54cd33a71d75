"""Keeps credentials out of the store: nothing a store writes may contain an API key.

Owned by ``session_runtime.store``; called by both stores on ``save_session`` (RUNTIME-CONTRACT,
"Saved session data never contains API keys"). The agent is expected not to hand secrets to the
store at all; this is the second line of defence: any mapping key that names a credential is
dropped, at any depth, before the record is encoded.
"""

from __future__ import annotations

from typing import Any

#: Normalised key names (lower case, ``-`` and ``_`` removed) whose values are never written.
SECRET_KEYS = frozenset(
    {
        "apikey",
        "openaiapikey",
        "xapikey",
        "authorization",
        "proxyauthorization",
        "bearertoken",
        "accesstoken",
        "password",
        "secret",
        "clientsecret",
    }
)


def _is_secret(key: str) -> bool:
    return key.lower().replace("-", "").replace("_", "") in SECRET_KEYS


def strip_secrets(value: Any) -> Any:
    """Return a copy of ``value`` (JSON-like) without any mapping entry whose key names a secret.

    ``api_key``, ``apiKey``, ``Authorization`` ... are dropped; ``api_key_env`` (the *name* of an
    environment variable) is kept. Non-container values are returned as they are.
    """
    if isinstance(value, dict):
        return {
            k: strip_secrets(v)
            for k, v in value.items()
            if not (isinstance(k, str) and _is_secret(k))
        }
    if isinstance(value, list | tuple):
        return [strip_secrets(v) for v in value]
    return value
