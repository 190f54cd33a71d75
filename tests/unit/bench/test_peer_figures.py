"""The pure parts of bench/peers.py: percentile math, the PEER lines and the peers' manifests."""

from __future__ import annotations

import math

from berth_operator.api.agentsession import AgentSessionSpec
from berth_operator.builders.names import SessionRef
from berth_operator.builders.session_pod import build_session_pod
from berth_operator.settings import OperatorSettings

from bench.peer_figures import (
    job_manifest,
    pct,
    peer_lines,
    poisson_offsets,
    ratio,
    sandbox_claim_manifest,
    sandbox_manifest,
    sandbox_template_manifest,
    sandbox_warm_pool_manifest,
)


def session_pod() -> dict:
    spec = AgentSessionSpec.model_validate({"prompt": "p", "model": "openai/gpt-4o-mini"})
    ref = SessionRef("ns", "s1", "uid-1")
    return build_session_pod(
        ref, spec, OperatorSettings(), epoch=1, resume_run_id=None, reason="Initial"
    )


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert pct(values, 50) == 10.0
    assert pct(values, 99) == 20.0  # of 20 values, p99 is the largest
    assert pct(values, 0) == 1.0
    assert pct(list(reversed(values)), 95) == 19.0
    assert math.isnan(pct([], 50))
    assert pct([list(range(100))[i] for i in range(100)], 99) == 98


def test_ratio_formatting() -> None:
    assert ratio(1.23, 1.0) == "1.23x"
    assert ratio(1.0, 3.0) == "0.33x"
    assert ratio(None, 1.0) == "n/a"
    assert ratio(1.0, 0.0) == "n/a"
    assert ratio(math.nan, 1.0) == "n/a"


def test_peer_lines_exactly_as_listed() -> None:
    results = {
        "placement": {
            "kinds": {
                "sessions": {"total": 53.0, "p99": 40.0},
                "bare": {"total": 18.0, "p99": 16.0},
                "jobs": {"total": 53.0, "p99": 50.0},
                "jobs-default-qps": {"total": 124.0, "p99": 100.0},
                "agent-sandbox": {"total": 50.0, "p99": 40.0},
            }
        },
        "adoption": {
            "burst": {"berth": [0.4] * 10 + [0.9] * 10, "agent-sandbox": [0.2] * 19 + [0.5]},
            "steady": {"berth": [1.0, 2.0], "agent-sandbox": [1.0, 4.0]},
        },
        "cold": {"session": [14.0, 17.6], "bare-pod": [2.4, 3.8]},
        "drain": {"warm": [0.5, 1.0], "cold": [4.0, 8.0]},
    }
    assert peer_lines(results) == [
        "PEER sessions/bare: total 2.94x, p99 2.50x",
        "PEER sessions/jobs: total 1.00x, p99 0.80x",
        "PEER sessions/jobs-default-qps: total 0.43x, p99 0.40x",
        "PEER sessions/agent-sandbox: total 1.06x, p99 1.00x",
        "PEER adoption berth/agent-sandbox burst: p50 2.00x, p99 1.80x",
        "PEER adoption berth/agent-sandbox steady: p50 1.00x, p99 0.50x",
        "PEER cold-start session/bare-pod: p99 4.63x",
        "PEER drain-resume warm/cold: p99 0.12x",
    ]


def test_peer_lines_say_na_for_what_was_not_measured() -> None:
    lines = peer_lines({})
    assert len(lines) == 8
    assert lines[0] == "PEER sessions/bare: total n/a, p99 n/a"
    assert lines[-1] == "PEER drain-resume warm/cold: p99 n/a"


def test_job_and_sandbox_run_the_session_pods_template() -> None:
    pod = session_pod()
    job = job_manifest("j1", pod)
    assert job["spec"]["template"]["spec"] == pod["spec"]
    assert job["spec"]["template"]["metadata"]["labels"] == pod["metadata"]["labels"]
    assert job["spec"]["parallelism"] == 1 and job["spec"]["backoffLimit"] == 0
    assert pod["spec"]["restartPolicy"] in ("Never", "OnFailure")  # what a Job accepts
    sandbox = sandbox_manifest("x1", pod)
    assert sandbox["spec"]["podTemplate"]["spec"] == pod["spec"]
    assert sandbox["spec"]["podTemplate"]["metadata"]["labels"]["berth.dev/session"] == "s1"
    template = sandbox_template_manifest("t", pod)
    assert template["spec"]["podTemplate"]["spec"] == pod["spec"]
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "changed"
    assert pod["spec"]["containers"][0]["image"] != "changed"  # a copy, not the pod's own
    assert sandbox_warm_pool_manifest("p", "t", 20)["spec"] == {
        "replicas": 20,
        "sandboxTemplateRef": {"name": "t"},
    }
    assert sandbox_claim_manifest("c", "p")["spec"] == {"warmPoolRef": {"name": "p"}}


def test_poisson_arrivals_are_seeded_and_near_the_rate() -> None:
    arrivals = poisson_offsets(2.0, 60.0)
    assert arrivals == poisson_offsets(2.0, 60.0)
    assert arrivals == sorted(arrivals) and arrivals[-1] < 60.0
    assert 80 <= len(arrivals) <= 160  # 120 expected; a bound the seed's draw sits well inside
