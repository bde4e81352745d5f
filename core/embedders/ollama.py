"""A local or remote Ollama server's `/api/embed`. No key; no input types, so the models' own prefixes;
`dimensions` for shorter vectors of the models that allow it (Matryoshka-trained ones)."""

from __future__ import annotations

from typing import Any

from .hosted import HostedEmbedder


class OllamaEmbedder(HostedEmbedder):
    provider = "ollama"
    default_base_url = "http://127.0.0.1:11434"
    default_model = "nomic-embed-text"
    # Ollama's default context is 2048 tokens whatever the model allows.
    model_tokens = {"nomic-embed-text": 2048, "mxbai-embed-large": 512, "all-minilm": 256, "bge-m3": 2048}
    model_dims = {"nomic-embed-text": 768, "mxbai-embed-large": 1024, "all-minilm": 384, "bge-m3": 1024}
    model_prefixes = {
        "nomic-embed-text": ("search_query: ", "search_document: "),
        "mxbai-embed-large": ("Represent this sentence for searching relevant passages: ", ""),
    }

    @staticmethod
    def catalogue_name(model: str) -> str:
        """Without its tag: `nomic-embed-text:latest` and `:v1.5` are nomic-embed-text, and need its prefixes."""
        name, colon, tag = model.rpartition(":")
        return name if colon and "/" not in tag else model

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self._requested_dims:
            body["dimensions"] = self._requested_dims
        return "/api/embed", body

    def _vectors(self, payload: Any) -> list[list[float]]:
        return payload["embeddings"]
