"""Every design citation in the repository points into it: ``docs/architecture.md §N`` with a
section that exists, never a document kept outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\bARCHITECTURE(\.md)?\s*§|\bRUNTIME-CONTRACT\b|\bsecurity contract\b")
CITED = re.compile(r"docs/architecture\.md\s*§\s*(\d+)")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".tpl", ".txt", ".json", ".toml", ".env"}


def tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / f for f in out if Path(f).suffix in SUFFIXES and (ROOT / f).is_file()]


def test_no_citation_of_a_document_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in tracked()
        if path.name != Path(__file__).name
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "\n".join(found)


def test_every_cited_section_exists() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", doc, re.M)}
    assert sections == set(range(1, len(sections) + 1)), sections
    cited = {
        (str(path.relative_to(ROOT)), int(n))
        for path in tracked()
        for n in CITED.findall(path.read_text(errors="replace"))
    }
    missing = sorted((where, n) for where, n in cited if n not in sections)
    assert not missing, missing
