"""Keeps credentials out of the store: nothing a store writes may contain an API key.

Owned by ``session_runtime.store``; called by both stores on ``save_session`` (docs/architecture.md
§10, "Saved session data never contains API keys"), on every tool result and on the tool messages of
every committed round. The agent is expected not to hand secrets to the store at all; this is the
second line of defence: any mapping key that names a credential is dropped, at any depth, before
the record is encoded, and credentials inside tool output (keys, tokens, ``NAME=secret`` lines,
passwords in URLs such as ``redis://:pw@host``) are masked before they are journaled.
"""

from __future__ import annotations

import functools
import re
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


# ---- credentials inside text (tool output) ----------------------------------------------------

#: Replacement for a credential found in text.
MASK = "[REDACTED]"

#: Patterns of credentials that tool output may carry (``env``, ``cat .env``, a URL in a log),
#: each with its *hints*: literal substrings one of which every match contains (case-sensitive).
#: A pattern with hints is run only when a hint is in the text (a substring test costs a small
#: fraction of a regex pass); one without hints always runs. Each is linear-time (no nested
#: quantifiers). Group 1, when present, is kept.
_TEXT_PATTERNS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    # scheme://user:password@host (redis, postgres, https ...): keep scheme and user
    (re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)[^@\s/]+(?=@)"), ("://",)),
    # NAME=value where NAME names a credential (env output, .env files, shell traces)
    (
        re.compile(
            r"(\b(?:[A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)[A-Z0-9_]*"
            r"|(?:api|access|auth|client|secret)[_-]?(?:key|token|secret)|password|passwd|token)"
            r"\s*[=:]\s*[\"']?)[^\s'\"]+"
        ),
        (),
    ),
    (re.compile(r"(\bBearer\s+)[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE), ()),  # any case
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), ("sk-",)),  # OpenAI / Anthropic style keys
    (
        re.compile(r"\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"),
        ("ghp_", "gho_", "ghs_", "ghu_", "ghr_", "github_pat_"),
    ),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"), ("xox",)),  # Slack
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), ("AKIA",)),  # AWS access key id
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), ("AIza",)),  # Google API key
    (
        re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),  # JWT
        ("eyJ",),
    ),
)


def _keep_group(m: re.Match[str]) -> str:
    return m.group(1) + MASK


@functools.lru_cache(maxsize=32)
def redact_text(text: str) -> str:
    """``text`` with every credential of :data:`_TEXT_PATTERNS` replaced by :data:`MASK`.

    A pattern none of whose hints is in the text (as masked so far) cannot match and is
    skipped, so the result is the one of running every pattern. Memoised (the last 32 texts):
    a tool's output is masked when its result is journaled and again, as the same string, in
    the tool message of the round's commit; the second time costs a dictionary lookup."""
    for rx, hints in _TEXT_PATTERNS:
        if hints:
            for hint in hints:  # a plain loop: a generator for any() costs more than the tests
                if hint in text:
                    break
            else:
                continue
        text = rx.sub(_keep_group, text) if rx.groups else rx.sub(MASK, text)
    return text


def _redact_content(content: Any) -> Any:
    if isinstance(content, str):
        return redact_text(content)
    if isinstance(content, list):
        return [_redact_content(part) for part in content]
    if isinstance(content, dict):
        return {k: _redact_content(v) if k == "text" else v for k, v in content.items()}
    return content


def redact_tool_result(result: dict[str, Any]) -> dict[str, Any]:
    """A tool result dict (``{"output", "exit_code", "is_error", ...}``) with credentials masked
    in its ``output`` and ``error`` texts; other keys are kept as they are."""
    return {
        k: redact_text(v) if k in ("output", "error") and isinstance(v, str) else v
        for k, v in result.items()
    }


def redact_messages(messages: list[dict[str, Any]], start: int = 0) -> list[dict[str, Any]]:
    """Mask credentials in the ``content`` of ``role: tool`` messages from index ``start`` on.

    Returns ``messages`` itself when nothing changed (so callers keep object identity and cheap
    prefix checks); otherwise a new list whose changed entries are new dicts. Cost: one scan of
    the messages from ``start``.
    """
    out: list[dict[str, Any]] | None = None
    for i in range(start, len(messages)):
        m = messages[i]
        if m.get("role") != "tool" or "content" not in m:
            continue
        content = _redact_content(m["content"])
        if content != m["content"]:
            if out is None:
                out = list(messages)
            out[i] = {**m, "content": content}
    return messages if out is None else out
