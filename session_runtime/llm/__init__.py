"""LLM access: the OpenAI-compatible client (``client``) and the scripted test server
(``scripted``, runnable with ``python -m session_runtime.llm.scripted``)."""

from session_runtime.llm.client import (
    LlmClient,
    LlmResponse,
    OpenAIChatClient,
    ProviderConfig,
    RawToolCall,
    parse_model,
)

__all__ = [
    "LlmClient",
    "LlmResponse",
    "OpenAIChatClient",
    "ProviderConfig",
    "RawToolCall",
    "parse_model",
]
