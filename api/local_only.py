"""A server on loopback without an API key answers only requests meant for this machine.

Such a server trusts whoever can reach it, which loopback makes the user's own programs. A web page the user
opens can reach it too: its script may POST to `http://127.0.0.1:8000` (a "simple" request, `text/plain`,
asks no CORS permission: searches and syncs run for another site), and by DNS rebinding (its own host name
re-pointed at 127.0.0.1) it reads the answers as same-origin: `POST /v1/get` hands the memory to that site.
Both carry what the browser cannot forge: the Host the page named, and the page's Origin. So a request whose
Host is not a loopback name or address is refused (421, as the MCP SDK's loopback transport does), and one
whose Origin is another site's (403). Clients other than browsers send no Origin and a loopback Host, and
the docs page served here is of this origin. With `api.key` set the key protects every `/v1` route (a page
cannot know it), and a reverse proxy may pass its own Host through, so nothing is checked.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, PermissionDeniedException
from litestar.handlers import BaseRouteHandler


class MisdirectedRequest(HTTPException):
    status_code = 421


#: What `check` answers, on every route: the OpenAPI document lists both for each (api.routes.problems).
REFUSALS = (MisdirectedRequest.status_code, PermissionDeniedException.status_code)


def local_only(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """The guard, on every route, before the API key's: its refusals are answered and counted as any error."""
    check(connection.headers)


def check(headers: Mapping[str, str]) -> None:
    host = headers.get("host")
    if host is not None and not is_local(_hostname(f"//{host}")):
        raise MisdirectedRequest(
            f"Host {host!r} is not this machine: a server on loopback without api.key answers only requests to "
            "localhost, 127.0.0.1 or [::1] (set api.key to serve another name, e.g. behind a proxy)"
        )
    origin = headers.get("origin")
    if origin is not None and not (origin.startswith(("http://", "https://")) and is_local(_hostname(origin))):
        raise PermissionDeniedException(
            f"Origin {origin!r}: a page of another site may not use this server (it has no api.key); "
            "programs send no Origin"
        )


def _hostname(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:  # "[::1" and the like: no host this server has
        return None


def is_local(name: str | None) -> bool:
    """localhost (and RFC 6761's *.localhost, which browsers keep on this machine), this machine's own name
    (`curl http://$(hostname):8000`; a rebinding page names its own site), or a loopback or unspecified address
    (`http://0.0.0.0:8000` reaches loopback on Linux)."""
    if not name:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return name == socket.gethostname().lower()
    return address.is_loopback or address.is_unspecified
