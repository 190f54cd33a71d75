"""Key properties of the Dockerfile, checked with a small parser (no Docker engine here, so the
image is not built in tests; these are the properties a reviewer would check by eye).

- multi-stage, every stage from a slim Python base;
- the final stage runs as a numeric non-root USER (UID:GID), so runAsNonRoot can verify it;
- runtime writes go to /tmp only: HOME, TMPDIR and XDG_CACHE_HOME under /tmp, bytecode compiled at
  build time and PYTHONDONTWRITEBYTECODE set, /tmp declared as a VOLUME, WORKDIR /tmp;
- the three console scripts are built and checked in the image, and the default command is
  berth-operator (session and worker pods override the command);
- the build context is limited by .dockerignore to the files the build copies.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from tests.unit.chart.helm import ROOT

DOCKERFILE = ROOT / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, instruction: str) -> list[str]:
        return [a for i, a in self.instructions if i == instruction]


def parse(text: str) -> list[Stage]:
    """Instructions per stage; continuation lines joined, comments dropped, ARGs expanded."""
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        rest = rest.strip()
        if instr == "ARG" and not stages:
            key, _, value = rest.partition("=")
            global_args[key] = value
            continue
        if instr == "FROM":
            rest = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), m.group(0)), rest)
            parts = rest.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else ""
            stages.append(Stage(base=parts[0], name=name))
            continue
        assert stages, f"instruction before FROM: {line}"
        stages[-1].instructions.append((instr, rest))
    return stages


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in stage.args("ENV"):
        for token in shlex.split(rest):
            key, _, value = token.partition("=")
            env[key] = value
    return env


def test_multi_stage_from_slim_python() -> None:
    stages = parse(DOCKERFILE.read_text())
    assert len(stages) >= 2
    for stage in stages:
        assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", stage.base), stage.base
    assert stages[-1].name == "runtime"
    copies = stages[-1].args("COPY")
    assert any(c.startswith("--from=build") for c in copies), (
        "runtime must copy from the build stage"
    )
    # No compilers or build context in the runtime stage: it copies only the venv.
    assert all("--from=" in c for c in copies), copies


def test_runs_as_numeric_non_root_user() -> None:
    final = parse(DOCKERFILE.read_text())[-1]
    users = final.args("USER")
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) > 0), users[-1]
    # USER comes after every RUN (nothing runs as root after it, nothing as the user before).
    order = [i for i, _ in final.instructions]
    assert order.index("USER") > max(i for i, x in enumerate(order) if x == "RUN")


def test_writes_only_to_tmp_and_volumes() -> None:
    final = parse(DOCKERFILE.read_text())[-1]
    env = env_of(final)
    for key in ("HOME", "TMPDIR", "XDG_CACHE_HOME"):
        assert env[key] == "/tmp" or env[key].startswith("/tmp/"), (key, env[key])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PATH"].startswith("/opt/berth/bin:")
    volumes = [v for rest in final.args("VOLUME") for v in json.loads(rest)]
    assert volumes == ["/tmp"]
    assert final.args("WORKDIR") == ["/tmp"]
    # The venv is owned by root (the runtime user cannot modify the code) and bytecode is compiled
    # at build time, so nothing under /opt is written at run time.
    assert any("--chown=0:0" in c and "/opt/berth" in c for c in final.args("COPY"))
    build = parse(DOCKERFILE.read_text())[0]
    assert any("compileall" in r for r in build.args("RUN"))


def test_one_image_for_the_three_programs() -> None:
    stages = parse(DOCKERFILE.read_text())
    build_runs = " ".join(stages[0].args("RUN"))
    for script in ("berth-operator", "berth-session", "berth-worker", "kubectl-berth"):
        assert f"test -x /opt/berth/bin/{script}" in build_runs, script
    assert (
        "import berth_operator.main, session_runtime.server, session_runtime.worker" in build_runs
    )
    final = stages[-1]
    assert json.loads(final.args("CMD")[-1]) == ["berth-operator"]
    assert not final.args("ENTRYPOINT"), "an ENTRYPOINT would wrap the pods' command overrides"


def test_dockerignore_limits_the_context_to_what_is_copied() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "**"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied: set[str] = set()
    for rest in parse(DOCKERFILE.read_text())[0].args("COPY"):
        copied.update(p.rstrip("/") for p in rest.split()[:-1])
    assert copied <= allowed, copied - allowed


def test_parser_catches_a_root_user() -> None:
    """The checks above can fail: a root USER is seen as such."""
    stages = parse("FROM python:3.11-slim AS runtime\nRUN true\nUSER root\n")
    assert stages[-1].args("USER") == ["root"]
    assert not stages[-1].args("USER")[-1].partition(":")[0].isdigit()
