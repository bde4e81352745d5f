"""A real HTTP rerank server on 127.0.0.1 answering in the Cohere, Jina, Voyage or TEI shape.

It is `FakeProvider` (same server, request log and HTTP-level faults: 429 with Retry-After in seconds or as
an HTTP date, 500, a stall, a dropped connection, malformed JSON, 400, 401 echoing the key) with a rerank
answer instead of vectors. Relevance is the share of query words found in the document, so a test knows
the right scores; results come best first, as the real services send them, so the client must use `index`.
Two more faults break the answer itself: `count` leaves one document out, `index` names one that was not sent.

As the services document: it serves `.../rerank` alone (404 elsewhere); a document may be a string or an
object with `text` (Cohere v1, Jina); `top_n` / `top_k` cut the answer; the document text comes back only when
asked (`return_documents`, TEI's `return_text`); and an error body has the service's shape (Cohere
`{message}`, Jina and Voyage `{detail}`, TEI `{error, error_type}`).
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

    def _gemini(self, path: str) -> bool:
        return False

    def _serves(self, path: str) -> bool:
        return path.startswith(self.prefix) and path.endswith("/rerank")

    def _refuse(self, path: str, body: dict[str, Any]) -> str | None:
        return None

    def _error(self, path: str, status: int, message: str, param: str | None = None) -> Any:
        if self.shape == "tei":
            return {"error": message, "error_type": "Validation" if status < 500 else "Backend"}
        return {"message": message} if self.shape == "cohere" else {"detail": message}

    def _answer(self, path: str, body: dict[str, Any], fault: str | None) -> Any:
        documents = [d["text"] if isinstance(d, dict) else d for d in body.get("documents") or body.get("texts") or []]
        ranked = sorted(
            ({"index": i, "score": fake_relevance(body["query"], d), "text": d} for i, d in enumerate(documents)),
            key=lambda r: -r["score"],
        )
        ranked = ranked[: body.get("top_n") or body.get("top_k") or len(ranked)]
        if fault == "count":
            ranked = ranked[:-1]
        if fault == "index":
            ranked[0] = {**ranked[0], "index": len(documents)}
        if self.shape == "tei":  # a bare list of {index, score}, and the text when asked for
            return [r if body.get("return_text") else {"index": r["index"], "score": r["score"]} for r in ranked]
        items = [{"index": r["index"], "relevance_score": r["score"]} for r in ranked]
        if body.get("return_documents", self.shape == "jina"):  # Jina returns them unless told not to
            items = [{**item, "document": {"text": r["text"]}} for item, r in zip(items, ranked)]
        if self.shape == "voyage":
            return {"object": "list", "data": items, "model": body.get("model"), "usage": {"total_tokens": 10}}
        if self.shape == "jina":
            return {"model": body.get("model"), "usage": {"total_tokens": 10}, "results": items}
        return {"id": "fake", "results": items, "meta": {"billed_units": {"search_units": 1}}}
