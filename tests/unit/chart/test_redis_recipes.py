"""The managed-Redis recipes of docs/redis.md render with the chart (``helm template`` checks
them against values.schema.json) and give the operator the URLs the recipe means: one Redis
URL per role, the single password (no user) or the ACL users, the cluster scheme when the
recipe says ``cluster: true``, the CA file when it names one. Also: the schema refuses the
single-password mode and the cluster flag with the bundled Redis.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth_contract.redis_url import parse
from tests.unit.chart.helm import documents, one, render

DOC = Path(__file__).resolve().parents[3] / "docs" / "redis.md"
RECIPE = re.compile(r"<!-- recipe: (?P<name>[a-z-]+) -->\n```yaml\n(?P<body>.*?)```", re.DOTALL)
ROLES = ("SESSION", "WORKER", "OPERATOR")


def recipes() -> dict[str, dict[str, Any]]:
    found = {m["name"]: yaml.safe_load(m["body"]) for m in RECIPE.finditer(DOC.read_text())}
    assert found, "docs/redis.md has no recipes"
    return found


def operator_env(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    docs = documents(render(values))
    pod = one(docs, "Deployment", "-operator")["spec"]["template"]["spec"]
    return {e["name"]: e for e in pod["containers"][0]["env"]}


def test_docs_name_the_four_services() -> None:
    assert set(recipes()) == {"elasticache", "elasticache-cluster", "memorystore", "azure-cache"}


@pytest.mark.parametrize("name", sorted(recipes()))
def test_recipe_renders_with_the_urls_it_means(name: str) -> None:
    values = recipes()[name]
    redis = values["redis"]
    env = operator_env(values)
    target = parse(env["BERTH_REDIS_URL"]["value"])
    assert target.cluster is bool(redis.get("cluster"))
    assert target.url.startswith("rediss://")  # every recipe uses TLS
    for role in ROLES:
        url = env[f"BERTH_REDIS_{role}_URL"]["value"]
        assert parse(url).cluster is target.cluster
        if redis["auth"].get("mode") == "password":
            assert "://:$(REDIS_PASSWORD)@" in url, url
        else:
            assert f"://berth-{role.lower()}:$(REDIS_{role}_PASSWORD)@" in url, url
        if "ssl_ca_certs=" in redis["url"]:
            assert url.endswith("?ssl_ca_certs=/var/run/berth/redis-tls/ca.crt"), url
    if redis["auth"].get("mode") == "password":
        ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": redis["auth"]["existingSecret"], "key": "password"}


@pytest.mark.parametrize(
    "redis",
    [
        {"enabled": True, "cluster": True},
        {"enabled": True, "auth": {"mode": "password", "existingSecret": "s"}},
        {"enabled": False, "url": "redis://r:6379/0", "auth": {"mode": "password"}},
        {"enabled": False, "url": "redis://r:6379/0", "auth": {"mode": "token"}},
    ],
)
def test_schema_refuses_what_only_an_external_redis_can_be(redis: dict[str, Any]) -> None:
    with pytest.raises(AssertionError, match="helm template failed"):
        render({"redis": redis})
