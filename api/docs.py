"""The API docs page at `/schema`: Redoc, loaded from this package (`api/static`), so it renders offline.

Litestar's Redoc page would fetch the script from Redocly's CDN, fonts from Google and a favicon from
jsDelivr; here the script is the vendored file, there are no web fonts and the favicon is empty. Redoc's
sidebar footer still asks Redocly's CDN for a logo image, so the page carries a Content-Security-Policy that
lets it load nothing from anywhere but this server (the image is then simply not shown).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import Request
from litestar.openapi.plugins import RedocRenderPlugin

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PATH = "/static"

CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'"
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
