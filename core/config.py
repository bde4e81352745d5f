"""Configuration: TOML file, then `MEMSIFT_<SECTION>_<KEY>` environment overrides, then validation.

Every key is declared once in core/config_schema.py with its default and its parser (core/config_values.py),
so an unknown key or a bad value is an error that names the key before any work starts (SPEC section 2).
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .config_env import env_overrides, loose_key
from .config_home import agent_id_problem, memsift_home
from .config_schema import SCHEMA
from .config_types import (
    ApiConfig,
    CacheConfig,
    ChunkingConfig,
    Config,
    EmbeddingConfig,
    RerankConfig,
    SearchConfig,
    SessionsConfig,
    StoreConfig,
    SyncConfig,
)
from .config_values import Text, text
from .errors import ConfigError, UnknownAgent
from .ranking import FUSIONS


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        # embedding.headers is a table-valued key; agents.<id>.workspace is dynamic.
        if isinstance(value, dict) and dotted not in SCHEMA:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _not_a_file(path: Path) -> str:
    """Why a configuration path is not read. A pipe (`--config <(...)`) or a device (/dev/null) exists but is
    refused: the file is read again later (an index run's flow, a server's reload), and a pipe is empty then."""
    if path.is_dir():
        return "is a folder, not a TOML file"
    return "is not a regular file (a pipe or a device); give a TOML file" if path.exists() else "does not exist"


def find_config_file(explicit: str | Path | None, workspace: Path, env: Mapping[str, str]) -> Path | None:
    for name, given in (("--config", explicit), ("MEMSIFT_CONFIG", env.get("MEMSIFT_CONFIG"))):
        if given:
            path = Path(given).expanduser()
            if not path.is_file():
                raise ConfigError(f"{name}: {path} {_not_a_file(path)}")
            return path
    candidate = workspace / "memsift.toml"
    return candidate if candidate.is_file() else None


def load_config(
    config_path: str | Path | None = None,
    *,
    workspace: str | Path | None = None,
    agent: str = "main",
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Read and validate the configuration for one agent.

    `workspace` (the `--workspace` flag) wins over the file's `workspace` key, which wins over the current
    folder. `overrides` are dotted keys set by code (tests, the eval command) after everything else.
    """
    env = os.environ if env is None else env
    # The folder whose memsift.toml is read: MEMSIFT_WORKSPACE's as --workspace's (it read the current folder's,
    # so `MEMSIFT_WORKSPACE=~/agent memsift index` from elsewhere dropped the workspace's extraPaths).
    given = workspace or env.get("MEMSIFT_WORKSPACE")
    start = Path(given).expanduser() if given else Path.cwd()
    source = find_config_file(config_path, start, env)
    raw: dict[str, Any] = {}
    if source is not None:
        try:
            raw = _flatten(tomllib.loads(source.read_text(encoding="utf-8-sig")))  # -sig: drops a BOM
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{source}: not valid UTF-8 (TOML files are UTF-8)") from None
        except OSError as exc:
            raise ConfigError(f"{source}: cannot be read: {exc.strerror or exc}") from None
    from_file = set(raw)
    from_env = env_overrides(env)
    # An agent the file names is overridden whatever the case of its id (MEMSIFT_AGENTS_WORK_WORKSPACE, [agents.Work]).
    spelled = {key.lower(): key for key in raw if key.startswith("agents.")}
    from_env = {spelled.get(key.lower(), key): given for key, given in from_env.items()}
    raw.update({key: Text(value) for key, (value, _) in from_env.items()})
    raw.update({key: Text(v) if isinstance(v, str) else v for key, v in (overrides or {}).items()})
    # A value from the environment is validated under its variable's name: "MEMSIFT_SEARCH_MAXRESULTS
    # (search.maxResults): expected an integer, got 'abc'".
    labels = {key: f"{name} ({key})" for key, (_, name) in from_env.items() if key not in (overrides or {})}
    # A value from the file is named with the file, as its TOML errors are: the file read may be one the user
    # never named (<workspace>/memsift.toml, $MEMSIFT_CONFIG), and "search.maxResults: ..." did not say which.
    in_file = from_file - set(labels) - set(overrides or {})

    def named(key: str) -> str:
        return labels.get(key) or (f"{source}: {key}" if key in in_file else key)

    agents: dict[str, Path] = {}
    values: dict[str, Any] = {k: default for k, (default, _) in SCHEMA.items()}
    for key, value in raw.items():
        if key.startswith("agents."):
            parts = key.split(".")
            agent_id = ".".join(parts[1:-1])  # `[agents."x.y"]` is flattened to agents.x.y.workspace
            if parts[-1] != "workspace" or len(parts) < 3:
                raise ConfigError(f"{named(key)}: {_not_an_agent_key(parts)}")
            if why := agent_id_problem(agent_id):  # else only `serve` refused it, blaming an `--agent` never given
                raise ConfigError(f"{named(key)}: {why}")
            if not text(named(key), value).strip():  # it named the config file's folder
                raise ConfigError(f"{named(key)}: must not be blank")
            agents[agent_id] = _resolve(None if key in labels else source, value)
            continue
        if key not in SCHEMA:
            raise ConfigError(f"{named(key)}: {_not_a_key(key)}")
        try:  # the parser names the key alone: its message may quote it (`write extraPaths = ["docs"]`)
            parsed = SCHEMA[key][1](labels.get(key, key), value)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}" if key in in_file else str(exc)) from None
        values[key] = str(parsed) if isinstance(parsed, Text) else parsed  # plain str on: msgspec encodes no subclass

    if values["rerank.rankerModel"]:  # a file, as `workspace` is: where the file that names it is, `~` the home
        model = _resolve(source if "rerank.rankerModel" in in_file else None, values["rerank.rankerModel"])
        values["rerank.rankerModel"] = str(model.absolute())  # read by servers' and flows' other processes too
        _readable_ranker(named("rerank.rankerModel"), values["rerank.rankerModel"])
    top_source = None if "workspace" in labels else source  # MEMSIFT_WORKSPACE: relative to the current folder
    # `[agents.main] workspace = ...` names the main agent's folder, as the `workspace` key does (it was ignored).
    if "main" in agents and values["workspace"]:
        top = _resolve(top_source, values["workspace"])
        # A variable (or an override) overrides the file's spelling of the same setting, as it overrides every
        # key: MEMSIFT_WORKSPACE over `[agents.main] workspace` was an error, "differs from workspace".
        later = set(labels) | set(overrides or {})
        top_later, main_later = "workspace" in later, "agents.main.workspace" in later
        if top.resolve() != agents["main"].resolve():
            if top_later == main_later:
                raise ConfigError(
                    f"{named('agents.main.workspace')}: {agents['main']} differs from workspace: {top}; set one"
                )
            if top_later:
                agents["main"] = top
            else:
                values["workspace"] = None
    if why := agent_id_problem(agent):
        raise ConfigError(f"--agent: {why}")
    named_by = "workspace"  # the setting an error names: the key (or variable) that chose the folder
    # `--workspace` stands for the `workspace` key (SPEC: the main agent's) and says where memsift.toml is: a
    # configured agent keeps its own folder, as `serve` and `up` serve it (`--workspace ~/agent --agent work
    # search` searched ~/agent under work's name). An agent the file does not name takes `--workspace`'s.
    if agent != "main" and agent in agents:
        ws, named_by = agents[agent], named(f"agents.{agent}.workspace")
    elif workspace:
        ws = Path(workspace).expanduser()
    elif agent != "main":
        raise UnknownAgent(f"--agent: unknown agent {agent!r} (configure agents.{agent}.workspace)")
    elif values["workspace"]:
        ws, named_by = _resolve(top_source, values["workspace"]), named("workspace")
    elif "main" in agents:
        ws, named_by = agents["main"], named("agents.main.workspace")
    else:
        ws = Path.cwd()
    ws = ws.resolve()
    if not ws.is_dir():
        raise ConfigError(f"{named_by}: {ws} is not a folder")

    if values["chunking.overlap"] >= values["chunking.tokens"]:
        raise ConfigError(f"{named('chunking.overlap')}: must be smaller than chunking.tokens")
    fusion = values["search.fusion"]
    vw, tw = FUSIONS[fusion].weights
    vw = values["search.vectorWeight"] if values["search.vectorWeight"] is not None else vw
    tw = values["search.textWeight"] if values["search.textWeight"] is not None else tw

    def section(name: str) -> dict[str, Any]:
        return {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith(name + ".")}

    return Config(
        workspace=ws,
        agent=agent,
        home=memsift_home(env),
        extra_paths=values["extraPaths"],
        exclude=values["exclude"],
        embedding=EmbeddingConfig(**section("embedding")),
        chunking=ChunkingConfig(values["chunking.tokens"], values["chunking.overlap"]),
        search=SearchConfig(
            maxResults=values["search.maxResults"],
            minScore=values["search.minScore"],
            calibrate=values["search.calibrate"],
            mode=values["search.mode"],
            fusion=fusion,
            vectorWeight=vw,
            textWeight=tw,
            rrfK=values["search.rrfK"],
            candidatePool=values["search.candidatePool"],
            candidateMultiplier=values["search.candidateMultiplier"],
            decayEnabled=values["search.temporalDecay.enabled"],
            halfLifeDays=values["search.temporalDecay.halfLifeDays"],
            mmrEnabled=values["search.mmr.enabled"],
            mmrLambda=values["search.mmr.lambda"],
            snippetChars=values["search.snippetChars"],
            citations=values["search.citations"] == "on",
        ),
        store=StoreConfig(values["store.fts.tokenizer"], values["store.fts.stemmer"]),
        rerank=RerankConfig(**section("rerank")),
        sync=SyncConfig(**section("sync")),
        cache=CacheConfig(**section("cache")),
        api=ApiConfig(**section("api")),
        agents=agents,
        source=source,
        sources=values["sources"],
        sessions=_sessions(values, ws, agent, env) if "sessions" in values["sources"] else None,
    )


def every_agent(main: Config) -> dict[str, Config]:
    """`main` (the main agent's configuration) and each of its `agents.<id>`, as `serve` and `up` serve them.
    The others are read from main's file or, with none, looked for where main's was (its workspace), as
    `memsift --agent ID` finds them: a memsift.toml of the current folder that main never read set theirs."""
    configs = {"main": main}
    for agent in sorted(main.agents):
        if agent != "main":
            configs[agent] = load_config(main.source, workspace=main.workspace, agent=agent)
    return configs


def _not_an_agent_key(parts: list[str]) -> str:
    """Why an `agents.` key is refused: `[agents] work = "~/w"` and `[agents.work] folder = ...` say what to write."""
    if len(parts) == 2:
        return f"expected a table, [agents.{'<id>' if parts[1] == 'workspace' else parts[1]}] with workspace = ..."
    return "no such configuration key; an agent has one key, workspace (agents.<id>.workspace)"


def _not_a_key(key: str) -> str:
    """Why `key` is refused: a table given a plain value (`temporalDecay = 5`) is told so, naming its keys."""
    inner = [k[len(key) + 1 :] for k in SCHEMA if k.startswith(key + ".")]
    if key == "agents":  # its keys are the agents' ids: none is in SCHEMA
        return "expected a table of agents, [agents.<id>] with workspace = ..."
    if not inner:
        meant = _meant(key)
        return "no such configuration key" + (f"; did you mean {meant}?" if meant else "")
    return f"expected a table of {', '.join(inner[:4])}{', ...' if len(inner) > 4 else ''}"


def _meant(key: str) -> str | None:
    """The key an unknown one likely means: spelled as the environment may (`max_results`), the only key of
    that name in another table (`maxResults` or `max_results` at the top, `store.tokenizer`), or a near spelling in its
    table (`lamda`) or of the whole key (`embeding.provider`). None when it could be several (`search.enabled`)."""
    if meant := loose_key(key):
        return meant
    table, _, name = key.rpartition(".")
    same_name = [k for k in SCHEMA if k.rpartition(".")[2].lower() == name.replace("_", "").lower()]
    if len(same_name) == 1:
        return same_name[0]
    names = {k.rpartition(".")[2]: k for k in SCHEMA if k.rpartition(".")[0] == table}
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    if close:
        return names[close[0]]
    close = difflib.get_close_matches(key, SCHEMA, n=1, cutoff=0.9)
    return close[0] if close else None


def _readable_ranker(name: str, path: str) -> None:
    """A ranker model file that cannot be read is a bad value: found by the first search, it let `memsift serve`
    start, say it was ready and answer every search 500. Loaded here, once per version of the file (model_for)."""
    from .learned import RankerModelError, model_for  # numpy and the ranker's features: only when a file is named

    try:
        model_for(path)
    except RankerModelError as exc:
        raise ConfigError(f"{name}: {str(exc).removeprefix('rerank.rankerModel: ')}") from None


def _sessions(values: dict[str, Any], ws: Path, agent: str, env: Mapping[str, str]) -> SessionsConfig:
    """A relative `sessions.dir` is relative to the workspace."""
    folder = Path(values["sessions.dir"]).expanduser() if values["sessions.dir"] else None
    if folder is None:
        folder = memsift_home(env) / "sessions" / agent
    elif not folder.is_absolute():
        folder = ws / folder
    return SessionsConfig(folder, values["sessions.deltaBytes"], values["sessions.deltaMessages"])


def _resolve(source: Path | None, value: str) -> Path:
    """A folder the file names is relative to the file; one an environment variable names (source None), as
    a shell user means it, to the current folder."""
    path = Path(value).expanduser()
    if not path.is_absolute() and source is not None:
        path = source.parent / path
    return path
