"""Voyage AI `/embeddings`, with `input_type` document / query (Voyage prepends its own instructions)."""

from __future__ import annotations

from typing import Any

from .hosted import HostedEmbedder


class VoyageEmbedder(HostedEmbedder):
    provider = "voyage"
    default_base_url = "https://api.voyageai.com/v1"
    default_model = "voyage-3.5"
    key_env = "VOYAGE_API_KEY"
    model_tokens = {"voyage-3.5": 32000, "voyage-3.5-lite": 32000, "voyage-3-large": 32000, "voyage-code-3": 32000}
    model_dims = {"voyage-3.5": 1024, "voyage-3.5-lite": 1024, "voyage-3-large": 1024, "voyage-code-3": 1024}
    input_scheme = "input_type"
    max_inputs = 1000
    api_version = "/v1"

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"input": texts, "model": self.model, "input_type": "query" if query else "document"}
        if self._requested_dims:
            body["output_dimension"] = self._requested_dims
        return "/embeddings", body

    def _vectors(self, payload: Any) -> list[list[float]]:
        return [item["embedding"] for item in sorted(payload["data"], key=lambda item: item["index"])]
