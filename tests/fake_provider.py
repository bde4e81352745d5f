"""A real HTTP embedding server on 127.0.0.1 speaking the OpenAI, Gemini, Voyage and Ollama shapes.

Vectors are deterministic (a hash of the text seeds a unit vector), so a test can compute what the client
should return. Faults are chosen per request number (1-based, every POST counts), and every request is
recorded with its arrival time so tests can measure retries and waits from the server's side.

It keeps the documented rules a client can get wrong, as the real services do: an unknown path is 404; the
dimension asked for (`dimensions`, `output_dimension`, Gemini's `outputDimensionality`, Ollama's `dimensions`)
is the dimension answered; Gemini takes at most 100 requests a batch, each naming the model of the URL, and
OpenAI 2048 inputs a request (400 past them); with `key` set, a request
without it in the API's own header (`x-goog-api-key` for Gemini, `Authorization: Bearer` for the others) is
401; and every error body has the API's own shape (OpenAI `{error: {message, type, param, code}}`, Gemini
`{error: {code, message, status}}`, Ollama `{error: "..."}`).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

#: 429 with Retry-After 1 s, 429 with an HTTP date ~2 s ahead, 429 with Retry-After 0, 500, 503, a stall past
#: the client's timeout, a dropped connection, malformed JSON, one vector too few, vectors of the wrong
#: dimension, a vector holding NaN or one holding infinity (JSON has neither: written as Python's json writes them,
#: `NaN`/`Infinity`, which a lenient decoder such as httpx's reads), 400 and 401 (whose message echoes the
#: Authorization header, as careless servers do; 401-long puts it across the 500th character). Apart from these,
#: `reject` answers 400 to requests holding an input it names bad.
FAULTS = (
    *("429", "429-date", "429-zero", "500", "503", "stall", "drop", "malformed", "count", "dim", "nan", "inf"),
    *("400", "401", "401-long"),
)

#: Google's canonical error status per HTTP status, as Gemini names it in `error.status`.
GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}


def fake_vector(text: str, dims: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return vec / np.linalg.norm(vec)


@dataclass
class Request:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float
    fault: str | None


@dataclass
class FakeProvider:
    dims: int = 16
    stall_seconds: float = 1.5
    #: request number (1-based) -> fault name or None
    fault: Callable[[int], str | None] = lambda n: None
    requests: list[Request] = field(default_factory=list)
    #: texts answered with a 200 and correct vectors, in arrival order
    embedded: list[str] = field(default_factory=list)
    #: seconds each request takes (a slow provider; benches measure throughput against it)
    delay: float = 0.0
    #: request number at which the server stops answering until `close` (a client to kill mid-run); 0: never
    hold_at: int = 0
    #: text whose first request (any input holding it) is held as `hold_at` holds: a client's requests whose order
    #: is not known (a server's start-up probes, made by threads) cannot be held by number
    hold_text: str | None = None
    #: a request holding an input this says is bad is answered 400 naming that input (as OpenAI does for an
    #: input over the model's context length); e.g. `lambda t: len(t) > 500` or `lambda t: "BAD" in t`
    reject: Callable[[str], bool] | None = None
    #: the API key the server wants, in the API's own header; None: any request is let in
    key: str | None = None
    #: the path the API is served under (`/v1` as vLLM and OpenAI serve it); other paths are 404
    prefix: str = ""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        #: set when request `hold_at` arrives: everything before it was answered
        self.held = threading.Event()
        self._release = threading.Event()
        self._answer_held = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body in one write: two small writes cost a 40 ms delayed ACK on every answer.
            wbufsize = 1 << 16

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                fake._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Answer the held request after all, and every later one: the client goes on as if it had been slow."""
        self._answer_held = True
        self._release.set()

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def gaps(self) -> list[float]:
        """Seconds between consecutive arrivals."""
        return [b.at - a.at for a, b in zip(self.requests, self.requests[1:])]

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        body = json.loads(raw or b"{}")
        with self._lock:
            number = len(self.requests) + 1
            fault = self.fault(number)
            self.requests.append(Request(h.path, body, dict(h.headers), time.monotonic(), fault))
        if not self._serves(h.path):
            return self._send(h, 404, self._error(h.path, 404, f"no route for POST {h.path}"))
        if number == self.hold_at or self._hold_text(raw):
            self.held.set()
            self._release.wait()
            if not self._answer_held:
                h.close_connection = True
                return
        if self.delay:
            time.sleep(self.delay)  # the provider's own latency, not test synchronisation
        if fault == "drop":
            h.close_connection = True
            return  # the socket closes with no response at all
        if fault == "stall":
            time.sleep(self.stall_seconds)  # the server being slow, not test synchronisation
        if fault in ("429", "429-date", "429-zero"):
            after = {"429": "1", "429-zero": "0", "429-date": email.utils.formatdate(time.time() + 2, usegmt=True)}
            error = self._error(h.path, 429, "Rate limit reached")
            return self._send(h, 429, error, {"Retry-After": after[fault]})
        if fault in ("500", "503"):
            return self._send(h, int(fault), self._error(h.path, int(fault), "upstream trouble"))
        if fault == "400":
            return self._send(h, 400, self._error(h.path, 400, "input is too long"))
        auth = h.headers.get("x-goog-api-key") if self._gemini(h.path) else h.headers.get("Authorization")
        if fault in ("401", "401-long"):
            auth = h.headers.get("Authorization") or h.headers.get("x-goog-api-key") or ""
            # 401-long: the key straddles the 500th character, where clients cut a server's message
            padding = "." * (490 - len("Incorrect API key provided: Bearer ")) if fault == "401-long" else ""
            return self._send(h, 401, self._error(h.path, 401, f"{padding}Incorrect API key provided: {auth}"))
        if self.key and auth != (self.key if self._gemini(h.path) else f"Bearer {self.key}"):
            return self._send(h, 401, self._error(h.path, 401, "invalid or missing API key"))
        if fault == "malformed":
            return self._send_raw(h, 200, b'{"data": [')
        refused = self._refuse(h.path, body)
        if refused:
            return self._send(h, 400, self._error(h.path, 400, refused))
        bad = [i for i, t in enumerate(body.get("input") or []) if self.reject and self.reject(t)]
        if bad:
            message = f"input[{bad[0]}] is invalid: this model's maximum context length was exceeded"
            return self._send(h, 400, self._error(h.path, 400, message, param=f"input[{bad[0]}]"))
        self._send(h, 200, self._answer(h.path, body, fault))

    def _hold_text(self, raw: bytes) -> bool:
        """Whether this request is the first to carry `hold_text` (in whatever shape the API sends inputs)."""
        with self._lock:
            if self.hold_text is None or self.hold_text.encode() not in raw:
                return False
            self.hold_text = None
        return True

    # -- what the real APIs document (a subclass speaks another API) ---------------------------------------

    @staticmethod
    def _gemini(path: str) -> bool:
        return path.endswith(":batchEmbedContents")

    def _serves(self, path: str) -> bool:
        """The documented routes, under any prefix (a base URL may carry one): anything else is 404."""
        return path.startswith(self.prefix) and path.endswith(("/embeddings", ":batchEmbedContents", "/api/embed"))

    def _refuse(self, path: str, body: dict[str, Any]) -> str | None:
        """The reason a documented limit refuses this request (400), or None."""
        if self._gemini(path):
            requests = body.get("requests") or []
            if len(requests) > 100:
                return "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch"
            model = "models/" + path.rsplit("/", 1)[-1].split(":")[0]
            if any(r.get("model") != model for r in requests):
                return f"* BatchEmbedContentsRequest.model: every request must name the model of the URL ({model})"
        elif path.endswith("/embeddings") and len(body.get("input") or []) > 2048:
            return "'$.input' is invalid: an array must be 2048 items or fewer"
        return None

    def _error(self, path: str, status: int, message: str, param: str | None = None) -> Any:
        """An error body in the API's own shape."""
        if self._gemini(path):
            return {"error": {"code": status, "message": message, "status": GOOGLE_STATUS.get(status, "INTERNAL")}}
        if path.endswith("/api/embed"):
            return {"error": message}
        return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}

    def _answer(self, path: str, body: dict[str, Any], fault: str | None) -> Any:
        """The 200 answer to a request that met no HTTP-level fault (a subclass speaks another API)."""
        texts, dims, answer = self._parse(path, body)
        if fault == "count":
            texts = texts[:-1]
        vectors = [fake_vector(t, dims + (1 if fault == "dim" else 0)).tolist() for t in texts]
        if fault in ("nan", "inf"):
            vectors[-1][0] = float(fault)
        if fault is None:
            with self._lock:
                self.embedded.extend(texts)
        return answer(vectors)

    def _parse(self, path: str, body: dict[str, Any]) -> tuple[list[str], int, Callable[[list], Any]]:
        """The texts, the dimension asked for and how to shape the answer, by wire format."""
        if path.endswith(":batchEmbedContents"):
            texts = [r["content"]["parts"][0]["text"] for r in body["requests"]]
            dims = body["requests"][0].get("outputDimensionality") or self.dims
            return texts, dims, lambda vs: {"embeddings": [{"values": v} for v in vs]}
        if path.endswith("/api/embed"):
            return body["input"], body.get("dimensions") or self.dims, lambda vs: {"embeddings": vs}
        dims = body.get("dimensions") or body.get("output_dimension") or self.dims
        # Answer in reverse order: clients must sort by `index`.
        return (
            body["input"],
            dims,
            lambda vs: {
                "object": "list",
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in reversed(list(enumerate(vs)))],
                "model": body.get("model"),
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )

    def _send(
        self, h: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None
    ) -> None:
        self._send_raw(h, status, json.dumps(payload).encode(), headers)

    def _send_raw(
        self, h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str] | None = None
    ) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                h.send_header(name, value)
            h.end_headers()
            h.wfile.write(data)
        except OSError:  # the client gave up (a stall past its timeout)
            h.close_connection = True
