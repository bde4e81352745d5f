"""One embedding quota shared by every worker: a Prefect global concurrency limit with slot decay.

When `embedding.requestsPerMinute` is set, `memsift up` (or `memsift ratelimit`) creates the limit
`memsift-embedding` with `requestsPerMinute / 60` slots decaying per second, and every embedding request
made inside a flow first takes a slot with `rate_limit`. Without a server, or when the limit does not
exist, `rate_limit(strict=False)` returns at once and only the in-process limiter applies.

Prefect is imported inside the functions: `memsift status` reads this module and should not pay a second
for importing Prefect when no server is configured.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from core.config_types import Config
from core.embedders import Embedder, EmbedderWrapper, create_embedder
from core.limiter import RateLimiter

LIMIT_NAME = "memsift-embedding"


class RateLimitedEmbedder(EmbedderWrapper):
    """The same embedder, taking a slot of the shared limit before each request it makes: each HTTP request of
    a hosted provider (a retry too: the provider counts it against the quota), each step of the local model.

    A hosted provider's `embed_documents` call is `concurrency` requests or more (core.sync_vectors.embed_step):
    a slot per call let two workers at `requestsPerMinute = 120` and `concurrency = 2` send 2.8 requests a
    second between them where the quota said 2. The slot is now taken beside the provider's
    in-process limiter, which every request passes (core.json_endpoint)."""

    def __init__(self, inner: Embedder, limit: str = LIMIT_NAME) -> None:
        super().__init__(inner)
        self.limit = limit
        self._missing_said = False
        limiter = getattr(inner, "limiter", None)
        self._per_request = isinstance(limiter, RateLimiter)
        if self._per_request:
            inner.limiter = _SlotPerRequest(limiter, self.before_request)  # type: ignore[attr-defined]

    def before_request(self) -> None:
        """One slot of the shared limit. A limit missing on the server is said once per run (Prefect logged a
        warning for every request: hundreds in a run's log) and lets the request go, paced in-process only."""
        from prefect.concurrency._asyncio import ConcurrencySlotAcquisitionError
        from prefect.concurrency.sync import rate_limit

        try:
            rate_limit(self.limit, occupy=1, strict=True)
        except ConcurrencySlotAcquisitionError as exc:
            if "must be created" not in str(exc):
                raise
            if not self._missing_said:
                self._missing_said = True
                _say(
                    f"the shared embedding limit {self.limit!r} does not exist on the Prefect server: this run is "
                    "paced by its own process only (`memsift ratelimit` creates the limit)"
                )

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not self._per_request:
            self.before_request()
        return self.inner.embed_documents(texts)


class _SlotPerRequest:
    """A hosted provider's in-process limiter that also takes a slot of the shared limit for every request."""

    def __init__(self, inner: RateLimiter, take_slot: Callable[[], None]) -> None:
        self.inner, self.take_slot = inner, take_slot

    def acquire(self, tokens: int, deadline: float | None = None) -> float:
        waited = self.inner.acquire(tokens, deadline)
        self.take_slot()
        return waited

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _say(message: str) -> None:
    """A warning in the flow run's log (outside a run, on memsift's logger)."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        get_run_logger().warning(message)
    except MissingContextError:
        logging.getLogger("memsift").warning(message)


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
