"""`rerank.provider = "cohere"`: any Cohere-style `/rerank` endpoint (Cohere, Jina, Voyage, text-embeddings-inference).

The services agree on the idea (a query, a list of documents, one relevance per document, answered by index)
and differ in the field names, so `rerank.dialect` picks how the request is written and the answer parser
reads every known shape:

- request: Cohere and Jina send `documents` and `top_n`, Voyage `documents` and `top_k`, TEI `texts`;
- answer: `{results: [{index, relevance_score}]}` (Cohere, Jina), `{data: [{index, relevance_score}]}`
  (Voyage), a bare list `[{index, score}]` (TEI); a `document`/`text` field in an item is ignored.

Every document must come back with a score, or the whole answer is refused (RerankError): a partial
ranking would silently push the unscored documents down. HTTP, retries, Retry-After and the redaction of
secrets are `core.json_endpoint.JsonEndpoint`'s, as the hosted embedders', so both behave the same under faults.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any
from urllib.parse import urlsplit

from ..config_types import RerankConfig
from ..embedders import Embedder
from ..errors import RerankError
from ..json_endpoint import JsonEndpoint, public_headers, public_url
from ..limiter import RateLimiter
from ..words import counted

#: The key for any dialect; the dialect's own variable (COHERE_API_KEY...) is read when this one is unset.
KEY_ENV = "MEMSIFT_RERANK_API_KEY"
DIALECT_KEY_ENV = {"cohere": "COHERE_API_KEY", "jina": "JINA_API_KEY", "voyage": "VOYAGE_API_KEY"}
DEFAULT_BASE_URL = {
    "cohere": "https://api.cohere.com",
    "jina": "https://api.jina.ai",
    "voyage": "https://api.voyageai.com",
}
DEFAULT_MODEL = {"cohere": "rerank-v3.5", "jina": "jina-reranker-v2-base-multilingual", "voyage": "rerank-2.5"}
#: Appended to a base URL that names neither the endpoint nor an API version.
DEFAULT_PATH = {"cohere": "/v2/rerank", "jina": "/v1/rerank", "voyage": "/v1/rerank", "tei": "/rerank"}
#: Documents per request: TEI refuses more than 32 by default (`--max-client-batch-size`); the hosted
#: services take 1000, more than `rerank.candidates` allows.
MAX_DOCUMENTS = {"tei": 32}
HOSTED_MAX_DOCUMENTS = 1000
#: TEI serves the model it was started with and takes no `model` field; `rerank.model` only names it.
TEI_MODEL = "tei"
_VERSION_SEGMENT = re.compile(r"/v\d+$")


def rerank_url(base_url: str, dialect: str) -> str:
    """The endpoint to POST to: the base URL itself when it already ends in `/rerank`, `<base>/rerank` when it
    ends in an API version (`/v1`, `/v2`), else `<base>` + the dialect's usual path (Cohere `/v2/rerank`,
    Jina and Voyage `/v1/rerank`, TEI `/rerank`)."""
    base = base_url.rstrip("/")
    path = urlsplit(base).path
    if path.endswith("/rerank"):
        return base
    if _VERSION_SEGMENT.search(path):
        return base + "/rerank"
    return base + DEFAULT_PATH[dialect]


def relevance_scores(payload: Any, count: int) -> list[float]:
    """One score per document, in input order, from any known answer shape; ValueError naming what is wrong."""
    items = payload
    if isinstance(payload, dict):
        items = next((payload[k] for k in ("results", "data") if isinstance(payload.get(k), list)), None)
    if not isinstance(items, list):
        raise ValueError("no `results` or `data` list in the answer")
    scores: list[float | None] = [None] * count
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"a result is not an object: {item!r:.80}")
        index = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise ValueError(f"index {index!r:.40} is not one of the {count} documents sent")
        if scores[index] is not None:
            raise ValueError(f"index {index} is scored twice")
        if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
            raise ValueError(f"document {index} has no numeric relevance_score or score")
        scores[index] = float(score)
    missing = [i for i, s in enumerate(scores) if s is None]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise ValueError(f"no score for {len(missing)} of {counted(count, 'document')} (index {shown})")
    return [s for s in scores if s is not None]


def service(config: RerankConfig) -> tuple[str, str | None]:
    """The model and the endpoint (as `status` shows it: a password as `<set>`, no query string, where a proxy's
    key may sit) that a reranker built from `config` calls; no endpoint when the dialect has no default URL
    and none is set."""
    base_url = config.baseUrl or DEFAULT_BASE_URL.get(config.dialect)
    endpoint = public_url(rerank_url(base_url.rstrip("/"), config.dialect)).split("?")[0] if base_url else None
    return config.model or DEFAULT_MODEL.get(config.dialect, TEI_MODEL), endpoint


def from_config(config: RerankConfig, embedder: Embedder | None = None) -> CohereReranker:
    """`rerank.provider = "cohere"`; the index's embedder plays no part."""
    return CohereReranker(config)


class CohereReranker(JsonEndpoint):
    """A Reranker over HTTP. No request at construction: a search pays for the reranker only when it reranks."""

    provider = "cohere"
    failure = RerankError
    quota_advice = "Lower rerank.candidates or the search rate, or check the plan and quota of the API key."

    def __init__(self, config: RerankConfig) -> None:
        self.dialect = config.dialect
        base_url = config.baseUrl or DEFAULT_BASE_URL.get(self.dialect)
        if not base_url:
            raise RerankError(f"rerank.baseUrl: the {self.dialect} dialect needs the server's URL")
        self.base_url = base_url.rstrip("/")
        self.endpoint = rerank_url(self.base_url, self.dialect)
        self.model, _ = service(config)
        dialect_env = DIALECT_KEY_ENV.get(self.dialect)
        self._key = os.environ.get(KEY_ENV) or (os.environ.get(dialect_env) if dialect_env else None)
        self.key_origin = KEY_ENV if os.environ.get(KEY_ENV) else dialect_env
        self.key_settings = f"{KEY_ENV} or {dialect_env}" if dialect_env else KEY_ENV
        if dialect_env and not self._key and not config.baseUrl:
            raise RerankError(f"{self.provider}: set {KEY_ENV} or {dialect_env} in the environment")
        self.max_documents = MAX_DOCUMENTS.get(self.dialect, HOSTED_MAX_DOCUMENTS)
        self._connect(config.headers, config.retries, config.timeoutSeconds, RateLimiter(None, None))
        self.fingerprint = json.dumps(
            {
                "dialect": self.dialect,
                "endpoint": public_url(self.endpoint),
                "model": self.model,
                "headers": public_headers(config.headers),
            },
            sort_keys=True,
        )

    def score(self, query: str, documents: list[str]) -> list[float]:
        """A search is waiting: every request, attempt and wait (a Retry-After too) fits in one `timeoutSeconds`
        (10 s at most), where a stalled service held each search for two timeouts and the backoff (21 s)."""
        scores: list[float] = []
        deadline = self.waiting_deadline()
        for start in range(0, len(documents), self.max_documents):
            batch = documents[start : start + self.max_documents]
            payload = self._post_retrying(self.endpoint, self._request(query, batch), tokens=1, deadline=deadline)
            try:
                scores.extend(relevance_scores(payload, len(batch)))
            except ValueError as exc:
                raise RerankError(
                    f"{self.provider}: unexpected answer from {public_url(self.endpoint)}: {exc}"
                ) from None
        return scores

    def close(self) -> None:
        self._client.close()

    def _request(self, query: str, documents: list[str]) -> dict[str, Any]:
        """The body in the configured dialect, asking for every document back (no cut to a top few)."""
        if self.dialect == "tei":
            return {"query": query, "texts": documents, "truncate": True, "return_text": False}
        body = {"model": self.model, "query": query, "documents": documents}
        if self.dialect == "voyage":
            return {**body, "top_k": len(documents), "return_documents": False, "truncation": True}
        if self.dialect == "jina":
            return {**body, "top_n": len(documents), "return_documents": False}
        return {**body, "top_n": len(documents)}
