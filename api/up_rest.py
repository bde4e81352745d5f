"""The REST API inside `memsift up` (api/up.py): checked and bound as `memsift serve` does, before anything
else starts, then served by uvicorn in a thread of `up`'s process.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack

import uvicorn

from api.agents import Agents
from api.app import create_app
from api.docs import DOCS_PATH
from api.prefect_server import ServerError
from api.serve import is_loopback, listen_socket
from core import Config, ConfigError

API_START_TIMEOUT = 30.0


def check_rest_api(config: Config) -> None:
    """`memsift serve`'s rule, before anything starts: no address beyond this machine without an API key."""
    if not config.api.key and not is_loopback(config.api.host):
        raise ConfigError(
            f"api.host {config.api.host}: refusing to serve beyond this machine without an API key; set api.key "
            "or MEMSIFT_API_KEY"
        )


def rest_socket(config: Config) -> socket.socket:
    """The REST API's socket, bound as `memsift serve` binds it: a port in use is a one-line error naming it,
    before a Prefect server starts."""
    return listen_socket(config.api.host, config.api.port)


def rest_api(
    config: Config, stack: ExitStack, sock: socket.socket, agent: str, say: Callable[[str], None]
) -> tuple[str, Agents]:
    """Start the REST API in a thread on `sock`; its address and its agents (a configuration change replaces
    their settings)."""
    app = create_app(config, agent, loopback_only=not config.api.key and is_loopback(config.api.host))
    app.state.agents.say = say  # a first index a search runs says so, as `serve` does
    server = uvicorn.Server(
        uvicorn.Config(app, host=config.api.host, port=config.api.port, access_log=False, log_level="warning")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="memsift-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + API_START_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise ServerError(f"the REST API could not listen on {config.api.host}:{config.api.port} (api.port)")
        time.sleep(0.05)
    stack.callback(thread.join, 10)
    stack.callback(setattr, server, "should_exit", True)
    address = f"http://{config.api.host}:{config.api.port}"
    return f"{address} (docs: {address}{DOCS_PATH})", app.state.agents
