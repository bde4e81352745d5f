"""The API docs page at `/docs` (and `/schema`): Redoc, loaded from this package (`api/static`), so it renders offline.

Litestar's Redoc page would fetch the script from Redocly's CDN, fonts from Google and a favicon from
jsDelivr; here the script is the vendored file, there are no web fonts and the favicon is empty. Redoc's
sidebar footer still asks Redocly's CDN for a logo image, so the page carries a Content-Security-Policy that
lets it load nothing from anywhere but this server (the image is then simply not shown).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import MediaType, Request, get
from litestar.openapi.plugins import RedocRenderPlugin

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PATH = "/static"
DOCS_PATH = "/docs"

CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'"
)


# The page's introduction: it speaks to the people who call the API, so it names what they send and get.
DESCRIPTION = (
    "Search an AI agent's Markdown memory (`MEMORY.md`, `memory.md`, `memory/*.md` daily notes and the "
    "configured `extraPaths`) by words and by meaning, then read the exact lines a hit points to.\n\n"
    "- `POST /v1/search` answers hits: a path, a line range, a score, a snippet and a citation.\n"
    "- `POST /v1/get` reads a line range of one of those files (`from`, `lines`).\n"
    "- `GET /v1/status` and `POST /v1/index` show and refresh the index.\n\n"
    "Every error is a problem document (`application/problem+json`, RFC 9457) whose `detail` names the field "
    "or says what to do. When the server has an API key, every `/v1` route needs `Authorization: Bearer <key>`; "
    "without one, a server on loopback answers 421 to a request whose `Host` is not this machine and 403 to one "
    "with another site's `Origin`, on every route."
)


class OfflineRedoc(RedocRenderPlugin):
    def __init__(self) -> None:
        super().__init__(
            js_url=f"{STATIC_PATH}/redoc.standalone.js",
            google_fonts=False,
            favicon="<link rel='icon' href='data:,'>",
            path="/",
        )

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        page = super().render(request, openapi_schema)
        return page.replace(b"<head>", f'<head><meta http-equiv="Content-Security-Policy" content="{CSP}">'.encode(), 1)


@get(DOCS_PATH, include_in_schema=False, media_type=MediaType.HTML, sync_to_thread=False)
def docs_page(request: Request[Any, Any, Any]) -> bytes:
    """The docs page at the address people try first; `/schema` keeps serving it too."""
    return OfflineRedoc().render(request, request.app.openapi_schema.to_schema())
