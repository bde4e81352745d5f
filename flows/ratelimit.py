"""One embedding quota shared by every worker: a Prefect global concurrency limit with slot decay.

When `embedding.requestsPerMinute` is set, `memsift up` (or `memsift ratelimit`) creates the limit
`memsift-embedding` with `requestsPerMinute / 60` slots decaying per second, and every embedding request
made inside a flow first takes a slot with `rate_limit`. Without a server, or when the limit does not
exist, `rate_limit(strict=False)` returns at once and only the in-process limiter applies.

Prefect is imported inside the functions: `memsift status` reads this module and should not pay a second
for importing Prefect when no server is configured.
"""

from __future__ import annotations

import os

import numpy as np

from core.config_types import Config
from core.embedders import Embedder, EmbedderWrapper, create_embedder

LIMIT_NAME = "memsift-embedding"


class RateLimitedEmbedder(EmbedderWrapper):
    """The same embedder, taking a slot of the shared limit before each document request."""

    def __init__(self, inner: Embedder, limit: str = LIMIT_NAME) -> None:
        super().__init__(inner)
        self.limit = limit

    def before_request(self) -> None:
        from prefect.concurrency.sync import rate_limit

        rate_limit(self.limit, occupy=1, strict=False)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.before_request()
        return self.inner.embed_documents(texts)


def limited_embedder(config: Config) -> Embedder | None:
    """The configured embedder (EmbedderUnavailable if it cannot start), rate limited when a quota is set."""
    embedder = create_embedder(config.embedding)
    if embedder is None or config.embedding.requestsPerMinute is None:
        return embedder
    return RateLimitedEmbedder(embedder)


def ensure_limit(requests_per_minute: float) -> dict[str, float]:
    """Create or update the shared limit so it admits `requests_per_minute` on average."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    per_second = requests_per_minute / 60.0
    burst = max(1, round(per_second))
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(LIMIT_NAME)
            client.update_global_concurrency_limit(
                LIMIT_NAME, GlobalConcurrencyLimitUpdate(limit=burst, slot_decay_per_second=per_second)
            )
        except ObjectNotFound:
            client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name=LIMIT_NAME, limit=burst, slot_decay_per_second=per_second)
            )
    return {"limit": burst, "slotDecayPerSecond": per_second}


def limit_status() -> dict[str, float] | None:
    """The shared limit as the server has it, or None (no server, or no limit)."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            gcl = client.read_global_concurrency_limit_by_name(LIMIT_NAME)
    except Exception:  # no server reachable, or no such limit: the in-process limiter alone applies
        return None
    return {"name": LIMIT_NAME, "limit": gcl.limit, "slotDecayPerSecond": gcl.slot_decay_per_second}


def rate_limit_status(config: Config) -> dict[str, object]:
    """What throttles embedding requests, for `status`: the shared Prefect limit or nothing.

    The server is asked only when PREFECT_API_URL is set: without it, Prefect would start a temporary
    server just to answer.
    """
    shared = limit_status() if os.environ.get("PREFECT_API_URL") else None
    return {
        "requestsPerMinute": config.embedding.requestsPerMinute,
        "active": "prefect" if shared and config.embedding.requestsPerMinute else "none",
        "prefect": shared,
    }
