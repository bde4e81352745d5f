"""The `memsift` commands that run servers, `serve`, `up` and `mcp`, and set up what they use: `ratelimit`
(the shared embedding limit on the Prefect server) and `model build` (the local embedder's optimised graph).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from api.cli_command import Command
from core import Config, ConfigError, load_config
from core.config import every_agent


def agent_configs(config_path: str | None, workspace: str | None) -> dict[str, Config]:
    """`main` (its workspace from --workspace, the config or the current folder) and every `agents.<id>`,
    all validated before anything starts."""
    return every_agent(load_config(config_path, workspace=workspace))


def with_rest_port(configs: dict[str, Config], port: int | None) -> dict[str, Config]:
    """`--port P`: the REST API's port, as `memsift serve --port` sets it (over api.port). Applied to every
    configuration read, the first and each one a change reloads, so a reload never sees the port move."""
    if port is None:
        return configs
    return {name: replace(c, api=replace(c.api, port=port)) for name, c in configs.items()}


def cmd_serve(command: Command) -> int:
    from api.serve import run_serve

    args = command.args
    # Every agent is served; --agent chooses the one a request without an `agent` field is answered for.
    main_config = load_config(args.config, workspace=args.workspace)
    with command.addresses_as_json() as ready:
        return run_serve(
            main_config,
            host=args.host,
            port=args.port,
            insecure=args.insecure,
            workers=args.workers,
            load=lambda: agent_configs(args.config, args.workspace),
            agent=args.agent,
            ready=ready,
        )


def cmd_up(command: Command) -> int:
    from api.up import run_up

    args = command.args

    def load() -> dict[str, Config]:
        return with_rest_port(agent_configs(args.config, args.workspace), args.port)

    with command.addresses_as_json() as ready:
        return run_up(load(), args.prefect_port, load=load, agent=args.agent, ready=ready)


def cmd_mcp(command: Command) -> int:
    from api.mcp import run_mcp

    args = command.args
    # Every agent is served, as by `serve`; --agent chooses the one a call without an `agent` argument is for.
    main_config = load_config(args.config, workspace=args.workspace)
    configs = every_agent(main_config)
    if args.agent not in configs:  # no file names it: --workspace's folder under that name, alone (as before)
        configs = {args.agent: command.config()}

    # over stdio, stdout carries the protocol: no addresses document there
    with nullcontext() if args.transport == "stdio" else command.addresses_as_json() as ready:
        return run_mcp(
            main_config,
            transport=args.transport,
            host=args.host,
            port=args.port,
            agent=args.agent,
            configs=configs,
            ready=ready,
        )


def cmd_ratelimit(command: Command) -> int:
    doc = _ratelimit(command.config())
    if command.args.json:
        command.print_json(doc)
    elif doc is None:
        print("no embedding rate limit (embedding.requestsPerMinute is not set)")
    else:
        print(f"{doc['name']}: limit {doc['limit']}, {doc['slotDecayPerSecond']:g} slots freed per second")
    return 0


def _ratelimit(config: Config) -> dict[str, Any] | None:
    """Create or update the shared embedding limit from `embedding.requestsPerMinute` on the server
    PREFECT_API_URL names; the limit as the server then has it (None: no limit)."""
    api_url = os.environ.get("PREFECT_API_URL")
    if not api_url:
        raise ConfigError("PREFECT_API_URL: not set; the limit lives on a Prefect server (`memsift up` creates it)")
    from api.prefect_server import EXTERNAL_SERVER_TIMEOUT, wait_healthy

    wait_healthy(api_url, EXTERNAL_SERVER_TIMEOUT)
    from flows.ratelimit import ensure_limit, limit_status  # Prefect, once the server answers

    if config.embedding.requestsPerMinute is not None:
        ensure_limit(config.embedding.requestsPerMinute)
    return limit_status()


def cmd_model(command: Command) -> int:
    from core.embedders.local import build_optimized_graph
    from core.embedders.model_graph import verification

    path = build_optimized_graph(rebuild=command.args.rebuild)
    doc = {"graph": str(path), **(verification(path) or {})}
    if command.args.json:
        command.print_json(doc)
    else:
        print(f"optimised graph: {path} (min cosine vs shipped {doc.get('minCosine', '?')})")
    return 0
