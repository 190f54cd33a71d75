"""request_kind: the (verb, resource) labels of berth_operator_api_requests_total."""

import pytest
from berth_operator.k8s.calls import request_kind


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        ("create pod ns/s-e1", ("create", "pods")),
        ("get agentsession ns/s", ("get", "agentsessions")),
        ("update status of agentsession ns/s", ("update", "agentsessions/status")),
        ("patch laneworker ns/w status", ("patch", "laneworkers/status")),
        ("read log of pod ns/p", ("read", "pods/log")),
        ("list pods ns berth.dev/session-uid=u", ("list", "pods")),
        ("create poddisruptionbudget ns/s", ("create", "poddisruptionbudgets")),
        ("scale deployment ns/w to 3", ("scale", "deployments")),
        ("", ("unknown", "unknown")),
    ],
)
def test_request_kind_names_verb_and_plural_resource(what: str, expected: tuple[str, str]) -> None:
    assert request_kind(what) == expected
