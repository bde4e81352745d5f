"""Hosted embedding providers (OpenAI, Gemini, Voyage, Mistral, Ollama) behind the Embedder protocol."""

from __future__ import annotations

import os

from ..config import EmbeddingConfig
from .base import DownEmbedder, Embedder, EmbedderUnavailable, EmbedderWrapper, EmbeddingError, create_embedder
from .gemini import GeminiEmbedder
from .hosted import HostedEmbedder
from .ollama import OllamaEmbedder
from .openai import MistralEmbedder, OpenAIEmbedder
from .voyage import VoyageEmbedder

PROVIDERS: dict[str, type[HostedEmbedder]] = {
    cls.provider: cls for cls in (OpenAIEmbedder, GeminiEmbedder, VoyageEmbedder, MistralEmbedder, OllamaEmbedder)
}
__all__ = [
    "PROVIDERS",
    "DownEmbedder",
    "Embedder",
    "EmbedderUnavailable",
    "EmbedderWrapper",
    "EmbeddingError",
    "auto_provider",
    "create_embedder",
]

#: `auto` tries these, in this order, when a model or base URL is configured and the key is set.
AUTO_ORDER = ("openai", "gemini", "voyage", "mistral")


def auto_provider(config: EmbeddingConfig) -> str:
    """`local` unless a model or base URL is configured and a hosted key is in the environment."""
    if config.model or config.baseUrl:
        for name in AUTO_ORDER:
            key_env = PROVIDERS[name].key_env
            if key_env and os.environ.get(key_env):
                return name
    return "local"
