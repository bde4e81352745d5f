"""A real HTTP rerank server on 127.0.0.1 answering in the Cohere, Jina, Voyage or TEI shape.

It is `FakeProvider` (same server, request log and HTTP-level faults: 429 with Retry-After in seconds or as
an HTTP date, 500, a stall, a dropped connection, malformed JSON, 400, 401 echoing the key) with a rerank
answer instead of vectors. Relevance is the share of query words found in the document, so a test knows
the right scores; results come best first, as the real services send them, so the client must use `index`.
Two more faults break the answer itself: `count` leaves one document out, `index` names one that was not sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fake_provider import FakeProvider

SHAPES = ("cohere", "jina", "voyage", "tei")


def fake_relevance(query: str, document: str) -> float:
    words = set(query.lower().split())
    return len(words & set(document.lower().split())) / (1 + len(words))


@dataclass
class FakeReranker(FakeProvider):
    #: how the answer is shaped, whatever the request's dialect
    shape: str = "cohere"

    def _answer(self, path: str, body: dict[str, Any], fault: str | None) -> Any:
        documents = body.get("documents") or body.get("texts") or []
        ranked = sorted(
            ({"index": i, "score": fake_relevance(body["query"], d), "text": d} for i, d in enumerate(documents)),
            key=lambda r: -r["score"],
        )
        ranked = ranked[: body.get("top_n") or body.get("top_k") or len(ranked)]
        if fault == "count":
            ranked = ranked[:-1]
        if fault == "index":
            ranked[0] = {**ranked[0], "index": len(documents)}
        if self.shape == "tei":
            return ranked  # a bare list of {index, score, text}
        items = [{"index": r["index"], "relevance_score": r["score"]} for r in ranked]
        if self.shape == "voyage":
            return {"object": "list", "data": items, "model": body.get("model"), "usage": {"total_tokens": 10}}
        with_documents = [{**item, "document": {"text": r["text"]}} for item, r in zip(items, ranked)]
        if self.shape == "jina":
            return {"model": body.get("model"), "usage": {"total_tokens": 10}, "results": with_documents}
        return {"id": "fake", "results": with_documents, "meta": {"billed_units": {"search_units": 1}}}
