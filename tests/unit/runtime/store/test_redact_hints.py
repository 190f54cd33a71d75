"""Credential masking skips a pattern whose literal hints are absent from the text: a secret is
still masked wherever it stands, and patterns without hints always run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from session_runtime.store import redact
from session_runtime.store.redact import MASK, redact_text

#: One credential per pattern (in pattern order), and what must not survive masking.
SECRETS: tuple[tuple[str, str], ...] = (
    ("redis://user:hunter2pw@redis:6379/0", "hunter2pw"),
    ("OPENAI_API_KEY=plainvalue123", "plainvalue123"),
    ("Authorization: bearer abcdefgh12345678", "abcdefgh12345678"),
    ("sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghijklmnopqrstuvwx"),
    ("ghp_abcdefghijklmnopqrstuvwxyz12", "ghp_abcdefghijklmnopqrstuvwxyz12"),
    ("github_pat_abcdefghijklmnopqrstuvwx_yz", "github_pat_abcdefghijklmnopqrstuvwx_yz"),
    ("xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
    ("AIza" + "B" * 35, "AIza" + "B" * 35),
    ("eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl", "eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl"),
)

FILLER = "pytest -q tests/test_x.py ... 3 passed in 0.12s"


def full_pass(text: str) -> str:
    """Every pattern, hints ignored: what masking did before hints existed."""
    for rx, _hints in redact._TEXT_PATTERNS:
        text = rx.sub(lambda m: m.group(1) + MASK, text) if rx.groups else rx.sub(MASK, text)
    return text


def positions(secret: str) -> Iterator[str]:
    """``secret`` alone, at the start, in the middle, at the end, on its own line, twice."""
    yield secret
    yield f"{secret} {FILLER}"
    yield f"{FILLER} {secret} {FILLER}"
    yield f"{FILLER} {secret}"
    yield f"{FILLER}\n{secret}\n{FILLER}"
    yield f"{secret}\n{secret}"


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_a_secret_is_masked_in_every_position(text: str, secret: str) -> None:
    for where in positions(text):
        redact_text.cache_clear()
        masked = redact_text(where)
        assert secret not in masked, where
        assert MASK in masked
        assert masked == full_pass(where)


def test_every_secret_together_is_masked_as_a_full_pass_would() -> None:
    text = "\n".join(f"{FILLER} {t}" for t, _ in SECRETS)
    redact_text.cache_clear()
    masked = redact_text(text)
    assert masked == full_pass(text)
    for _, secret in SECRETS:
        assert secret not in masked


def test_every_match_of_a_hinted_pattern_holds_one_of_its_hints() -> None:
    # The premise of skipping: a pattern with hints cannot match text without one of them.
    texts = [t for s, _ in SECRETS for t in positions(s)]
    for rx, hints in redact._TEXT_PATTERNS:
        if not hints:
            continue
        assert not rx.flags & re.IGNORECASE, rx.pattern  # hints are case-sensitive
        for text in texts:
            for m in rx.finditer(text):
                assert any(h in m.group(0) for h in hints), (rx.pattern, m.group(0))


class Spy:
    """Stands in for a compiled pattern and records the texts it was run on."""

    def __init__(self, pattern: str) -> None:
        self.rx = re.compile(pattern)
        self.groups = self.rx.groups
        self.seen: list[str] = []

    def sub(self, repl: Any, text: str) -> str:
        self.seen.append(text)
        return self.rx.sub(repl, text)


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Spy, Spy]]:
    hinted, plain = Spy(r"\bzz-[a-z]{4,}"), Spy(r"(\bPIN=)\d+")
    patterns = ((hinted, ("zz-",)), (plain, ()))
    monkeypatch.setattr(redact, "_TEXT_PATTERNS", patterns)
    redact_text.cache_clear()
    yield hinted, plain
    redact_text.cache_clear()


def test_a_hinted_pattern_runs_only_when_its_hint_is_present(spies: tuple[Spy, Spy]) -> None:
    hinted, _ = spies
    assert redact_text("nothing here") == "nothing here"
    assert hinted.seen == []
    assert redact_text("key zz-abcdef end") == f"key {MASK} end"
    assert hinted.seen == ["key zz-abcdef end"]


def test_a_pattern_without_hints_always_runs(spies: tuple[Spy, Spy]) -> None:
    _, plain = spies
    assert redact_text("no hint of anything") == "no hint of anything"
    assert redact_text("PIN=1234 ok") == f"PIN={MASK} ok"
    assert plain.seen == ["no hint of anything", "PIN=1234 ok"]


def test_the_real_hintless_patterns_run_on_text_without_any_hint() -> None:
    hints = [h for _, hs in redact._TEXT_PATTERNS for h in hs]
    text = "export DB_PASSWORD=s3cr3tvalue\nBearer abcdefgh12345678"
    assert not any(h in text for h in hints)
    redact_text.cache_clear()
    masked = redact_text(text)
    assert "s3cr3tvalue" not in masked and "abcdefgh12345678" not in masked
