"""Google's Gemini API `batchEmbedContents`, with RETRIEVAL_DOCUMENT / RETRIEVAL_QUERY task types.

The key goes in the `x-goog-api-key` header, not the `?key=` query parameter, so it never reaches a URL
that an error message or a proxy log would show. A batch holds at most 100 requests, each naming the model
of the URL as `models/<id>`; the model may be configured with that prefix too, as Google's examples write it.
"""

from __future__ import annotations

from typing import Any

from .hosted import HostedEmbedder


class GeminiEmbedder(HostedEmbedder):
    provider = "gemini"
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    default_model = "gemini-embedding-001"
    key_env = "GEMINI_API_KEY"
    model_tokens = {"gemini-embedding-001": 2048, "text-embedding-004": 2048}
    model_dims = {"gemini-embedding-001": 3072, "text-embedding-004": 768}
    input_scheme = "taskType"
    max_inputs = 100
    api_version = "/v1beta"

    @staticmethod
    def catalogue_name(model: str) -> str:
        return model.removeprefix("models/")

    def _auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._key} if self._key else {}

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        task = "RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT"
        model = self.catalogue_name(self.model)
        requests = []
        for text in texts:
            item: dict[str, Any] = {"model": f"models/{model}", "content": {"parts": [{"text": text}]}}
            item["taskType"] = task
            if self._requested_dims:
                item["outputDimensionality"] = self._requested_dims
            requests.append(item)
        return f"/models/{model}:batchEmbedContents", {"requests": requests}

    def _vectors(self, payload: Any) -> list[list[float]]:
        return [item["values"] for item in payload["embeddings"]]
