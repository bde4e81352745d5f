"""Every error memsift raises on purpose, under one base, so each front door maps one class.

A `MemsiftError` is a failure a person can act on: its message says what went wrong and what to do, so the
CLI prints it as one line, MCP returns it as the tool's `reason` and REST as the problem's `detail`. Each
error also keeps the standard base it had (a bad value is still a ValueError). `status` is the HTTP status
REST answers with; None means a failure of the server itself (500, logged).
"""

from __future__ import annotations


class MemsiftError(Exception):
    """The base of memsift's own errors; the message is meant for the person who ran the command."""

    status: int | None = None


class ConfigError(MemsiftError, ValueError):
    """A configuration key is unknown or has a bad value; the message names the key."""


class UnknownAgent(ConfigError, LookupError):
    """`--agent ID` or a request's `agent` names an agent the configuration does not have (404)."""

    status = 404


class QueryFileError(MemsiftError, ValueError):
    """A query file (`memsift eval`, `train-ranker`) is missing, empty, or has a bad line; the message names it."""


class SearchError(MemsiftError, ValueError):
    """The request itself is wrong (blank query, bad mode); the message says which part."""

    status = 400


class GetError(MemsiftError):
    """A refused or malformed `get`; `status` is the HTTP status the API answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class StoreError(MemsiftError, RuntimeError):
    """The index file cannot be used (newer schema, corrupt file); the message says what to do."""

    status = 503


class LockTimeout(MemsiftError, RuntimeError):
    """Another process holds the agent's writer lock; the message names its pid."""

    status = 503  # a sync holds the writer lock while a never-indexed agent's first search waits


class EmbedderUnavailable(MemsiftError, RuntimeError):
    """The configured embedder cannot run; search degrades to keyword mode and says why."""


class EmbeddingError(MemsiftError, RuntimeError):
    """A provider failed to embed after its retries (quota, outage, bad answer); the message names the
    provider, the status and what to do, never a key. A sync that meets it may switch to the fallback."""


class ProviderDown(EmbeddingError):
    """The provider could not be reached or kept failing past its retries (5xx, 429, timeouts, dropped or
    refused connections): it may come back as it was, unlike a refusal (a key, a model, a parameter to fix).
    An agent's first index meeting it goes on keyword-only, its vectors pending, as a later sync does."""


class GraphBuildError(MemsiftError, RuntimeError):
    """The optimised graph could not be built or did not agree with the shipped one."""


class RerankError(MemsiftError, RuntimeError):
    """The reranker could not score this shortlist; search answers in fused order and says why (`degraded`)."""
