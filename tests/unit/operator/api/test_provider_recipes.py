"""The provider recipes of docs/llm-providers.md are valid AgentSession specs (the CRD's model),
and the model names they send are what the recipes say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth_operator.api.agentsession import AgentSessionSpec

from session_runtime.llm.client import parse_model

DOC = Path(__file__).resolve().parents[4] / "docs" / "llm-providers.md"


def recipes() -> dict[str, dict[str, Any]]:
    """Section title → the spec of the yaml block in it (blocks without a ``spec``, such as Helm
    values, are not recipes)."""
    out: dict[str, dict[str, Any]] = {}
    for section in re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        for block in re.findall(r"```yaml\n(.*?)```", body, flags=re.S):
            doc = yaml.safe_load(block)
            if "spec" in doc:
                out[title.strip()] = doc["spec"]
    return out


def test_the_doc_has_a_recipe_per_provider() -> None:
    assert set(recipes()) == {
        "OpenAI",
        "Azure OpenAI",
        "vLLM or llama.cpp server",
        "LiteLLM proxy",
    }


@pytest.mark.parametrize("title", sorted(recipes()))
def test_each_recipe_is_a_valid_spec(title: str) -> None:
    spec = AgentSessionSpec.model_validate({"prompt": "p", **recipes()[title]})
    assert spec.llm is not None and spec.llm.api_key_secret_ref is not None


def test_a_model_name_with_slashes_reaches_the_endpoint_whole() -> None:
    model = recipes()["vLLM or llama.cpp server"]["model"]
    assert parse_model(model) == ("vllm", "meta-llama/Llama-3.1-8B-Instruct")
