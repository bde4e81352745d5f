"""Configuration (SPEC section 2): defaults, where the TOML file is found, environment overrides, and that
every unknown key or bad value is a ConfigError naming the key before any work starts."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from core.config import ConfigError, every_agent, load_config
from core.config_schema import DEFAULT_EXCLUDE


@pytest.fixture
def ws(workspace) -> Path:
    return workspace({"MEMORY.md": "# memory\n"})


def _digest(workspace: Path) -> str:
    """The hash of a resolved workspace path that index file names carry."""
    return hashlib.sha256(str(workspace).encode()).hexdigest()[:12]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def in_file(ws: Path, message: str) -> str:
    """An error about a value of `ws`'s memsift.toml: it names the file, as a TOML syntax error does."""
    return f"{ws / 'memsift.toml'}: {message}"


# ---------------------------------------------------------------- defaults


def test_defaults_match_spec(ws: Path, memsift_home: Path) -> None:
    c = load_config(workspace=ws, env={"MEMSIFT_HOME": str(memsift_home)})
    assert c.source is None
    assert c.workspace == ws.resolve()
    assert c.agent == "main"
    assert c.home == memsift_home
    assert c.db_path == memsift_home / "memory" / f"main.ws-{_digest(c.workspace)}.sqlite"
    assert c.extra_paths == ()
    assert list(c.exclude) == [".git", "node_modules", ".venv", "venv", "__pycache__", ".tox"]
    assert DEFAULT_EXCLUDE == tuple(c.exclude)

    e = c.embedding
    assert e.provider == "auto"
    assert e.model is None  # the provider's default
    assert e.baseUrl is None and e.headers == {} and e.dimensions is None
    assert e.fallback == "none"
    assert (e.batchMaxBytes, e.batchMaxInputs) == (8000, 96)
    assert e.retries == 3
    assert e.requestsPerMinute is None and e.tokensPerMinute is None  # unset: no client-side rate limit

    assert (c.chunking.tokens, c.chunking.overlap) == (400, 80)

    s = c.search
    assert (s.maxResults, s.minScore) == (6, 0.35)
    assert s.mode == "hybrid"
    assert s.fusion == "minmax"  # documented extension, chosen on the benchmark
    assert s.rrfK == 60
    assert s.candidatePool == 40
    assert (s.decayEnabled, s.halfLifeDays) == (False, 30)
    assert (s.mmrEnabled, s.mmrLambda) == (False, 0.7)
    assert s.snippetChars == 700
    assert s.citations is True

    assert c.store.tokenizer == "unicode61"
    assert c.store.stemmer == "porter"  # extension
    assert c.agents == {}


def test_default_workspace_is_the_current_folder(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ws)
    assert load_config(env={}).workspace == ws.resolve()


def test_home_defaults_to_dot_memsift(ws: Path) -> None:
    assert load_config(workspace=ws, env={}).home == Path.home() / ".memsift"


def test_weighted_fusion_uses_openclaw_weights(ws: Path) -> None:
    s = load_config(workspace=ws, env={}, overrides={"search.fusion": "weighted"}).search
    assert (s.vectorWeight, s.textWeight) == (0.7, 0.3)
    s = load_config(workspace=ws, env={}, overrides={"search.fusion": "rrf", "search.textWeight": 0.5}).search
    assert s.fusion == "rrf" and s.textWeight == 0.5 and s.rrfK == 60


# ---------------------------------------------------------------- finding the file


def test_workspace_toml_is_found(ws: Path) -> None:
    toml = write(ws / "memsift.toml", '[search]\nmaxResults = 11\nmode = "keyword"\n')
    c = load_config(workspace=ws, env={})
    assert c.source == toml
    assert c.search.maxResults == 11
    assert c.search.mode == "keyword"


def test_workspace_toml_is_found_from_the_current_folder(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(ws / "memsift.toml", "[chunking]\ntokens = 200\noverlap = 20\n")
    monkeypatch.chdir(ws)
    c = load_config(env={})
    assert (c.chunking.tokens, c.chunking.overlap) == (200, 20)


def test_config_flag_beats_env_beats_workspace_file(ws: Path, tmp_path: Path) -> None:
    write(ws / "memsift.toml", "[search]\nmaxResults = 1\n")
    from_env = write(tmp_path / "env.toml", "[search]\nmaxResults = 2\n")
    from_flag = write(tmp_path / "flag.toml", "[search]\nmaxResults = 3\n")
    env = {"MEMSIFT_CONFIG": str(from_env)}

    assert load_config(workspace=ws, env={}).search.maxResults == 1
    c = load_config(workspace=ws, env=env)
    assert (c.source, c.search.maxResults) == (from_env, 2)
    c = load_config(from_flag, workspace=ws, env=env)
    assert (c.source, c.search.maxResults) == (from_flag, 3)


def test_memsift_config_from_the_process_environment(ws: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEMSIFT_CONFIG", str(write(tmp_path / "c.toml", "[search]\nminScore = 0.5\n")))
    assert load_config(workspace=ws).search.minScore == 0.5


@pytest.mark.parametrize("how", ["flag", "env"])
def test_missing_config_file_is_an_error(ws: Path, tmp_path: Path, how: str) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="--config" if how == "flag" else "MEMSIFT_CONFIG") as err:
        if how == "flag":
            load_config(missing, workspace=ws, env={})
        else:
            load_config(workspace=ws, env={"MEMSIFT_CONFIG": str(missing)})
    assert "nope.toml" in str(err.value)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_config_path_that_is_a_folder_says_so(ws: Path, how: str) -> None:
    """It said "--config: <folder> does not exist", of a folder that does."""
    with pytest.raises(ConfigError) as err:
        if how == "flag":
            load_config(ws, workspace=ws, env={})
        else:
            load_config(workspace=ws, env={"MEMSIFT_CONFIG": str(ws)})
    assert str(err.value) == f"{'--config' if how == 'flag' else 'MEMSIFT_CONFIG'}: {ws} is a folder, not a TOML file"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_config_path_that_is_a_pipe_or_a_device_says_so(ws: Path, tmp_path: Path, kind: str) -> None:
    """`--config <(printf ...)` and `--config /dev/null` said "does not exist" of a path that does. They are
    refused, not read: the file is read again later (an index run's flow, a server's reload), and a pipe
    read twice is empty the second time, the defaults taken in silence."""
    path = Path(os.devnull)
    if kind == "fifo":
        path = tmp_path / "config.fifo"
        os.mkfifo(path)
    with pytest.raises(ConfigError) as err:
        load_config(path, workspace=ws, env={})
    assert str(err.value) == f"--config: {path} is not a regular file (a pipe or a device); give a TOML file"


def test_relative_workspace_in_toml_is_relative_to_the_file(tmp_path: Path, workspace) -> None:
    ws = workspace({"MEMORY.md": "x\n"}, name="agent-ws")
    cfg = write(tmp_path / "conf" / "memsift.toml", 'workspace = "../agent-ws"\n')
    assert load_config(cfg, env={}).workspace == ws.resolve()


def test_workspace_flag_wins_over_toml_workspace(tmp_path: Path, workspace) -> None:
    a = workspace({"MEMORY.md": "a\n"}, name="a")
    b = workspace({"MEMORY.md": "b\n"}, name="b")
    cfg = write(tmp_path / "c.toml", f'workspace = "{a}"\n')
    assert load_config(cfg, env={}).workspace == a.resolve()
    assert load_config(cfg, workspace=b, env={}).workspace == b.resolve()


# ---------------------------------------------------------------- environment overrides


@pytest.mark.parametrize(
    "name", ["MEMSIFT_SEARCH_MAX_RESULTS", "MEMSIFT_SEARCH_MAXRESULTS", "MEMSIFT_search_maxResults"]
)
def test_env_overrides_a_single_key(ws: Path, name: str) -> None:
    write(ws / "memsift.toml", "[search]\nmaxResults = 3\nminScore = 0.2\n")
    c = load_config(workspace=ws, env={name: "9"})
    assert c.search.maxResults == 9
    assert c.search.minScore == 0.2  # other keys from the file are kept


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("MEMSIFT_SEARCH_MAXRESULTS", "MEMSIFT_SEARCH_MAX_RESULTS"),
        ("MEMSIFT_AGENTS_WORK_WORKSPACE", "MEMSIFT_AGENTS_work_WORKSPACE"),
    ],
)
def test_two_spellings_of_one_key_that_disagree_are_an_error(ws: Path, first: str, second: str) -> None:
    """Both set, the last in the environment's order won in silence: `MEMSIFT_SEARCH_MAXRESULTS=2` in a profile
    and `MEMSIFT_SEARCH_MAX_RESULTS=3` on the command line gave 3 or 2 as the shell happened to order them."""
    values = ("2", "3") if "MAX" in first else (str(ws), str(ws / "memory"))
    (ws / "memory").mkdir(exist_ok=True)
    for env in ({first: values[0], second: values[1]}, {second: values[1], first: values[0]}):
        with pytest.raises(ConfigError) as err:
            load_config(workspace=ws, env=env)
        assert str(err.value).startswith(f"{min(first, second)} and {max(first, second)} set ")
    assert load_config(workspace=ws, env={first: values[0], second: values[0]}) is not None  # agreeing: fine


def test_env_overrides_from_the_process_environment(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSIFT_SEARCH_MAX_RESULTS", "9")
    monkeypatch.setenv("MEMSIFT_SEARCH_TEMPORAL_DECAY_ENABLED", "true")
    monkeypatch.setenv("MEMSIFT_STORE_FTS_TOKENIZER", "trigram")
    monkeypatch.setenv("MEMSIFT_EXCLUDE", "a, b")
    c = load_config(workspace=ws)
    assert c.search.maxResults == 9
    assert c.search.decayEnabled is True
    assert c.store.tokenizer == "trigram"
    assert c.exclude == ("a", "b")


def test_env_beats_the_file(ws: Path) -> None:
    write(ws / "memsift.toml", '[search]\nmode = "vector"\n')
    assert load_config(workspace=ws, env={"MEMSIFT_SEARCH_MODE": "keyword"}).search.mode == "keyword"


@pytest.mark.parametrize("value, expected", [("false", False), ("0", False), ("on", True), ("YES", True)])
def test_env_booleans(ws: Path, value: str, expected: bool) -> None:
    assert load_config(workspace=ws, env={"MEMSIFT_SEARCH_MMR_ENABLED": value}).search.mmrEnabled is expected


def test_an_empty_variable_is_unset(ws: Path, tmp_path: Path) -> None:
    """An empty MEMSIFT_CONFIG (and MEMSIFT_HOME, OPENAI_API_KEY) was unset, an empty key variable a value: the
    file's api.key dropped by `MEMSIFT_API_KEY=` (a server without a key), the file's workspace by
    `MEMSIFT_WORKSPACE=` (the current folder indexed instead), `MEMSIFT_SEARCH_MAX_RESULTS=` an error."""
    other = tmp_path / "other"
    other.mkdir()
    toml = f'workspace = "{other}"\n[api]\nkey = "s3cret"\n[embedding]\napiKey = "sk-file"\n[search]\nmaxResults = 3\n'
    config = write(tmp_path / "c.toml", toml)
    names = ("MEMSIFT_API_KEY", "MEMSIFT_EMBEDDING_API_KEY", "MEMSIFT_WORKSPACE", "MEMSIFT_SEARCH_MAX_RESULTS")
    c = load_config(
        env={"MEMSIFT_CONFIG": str(config), "MEMSIFT_AGENTS_WORK_WORKSPACE": "", **dict.fromkeys(names, "")}
    )
    assert (c.api.key, c.embedding.apiKey, c.workspace, c.search.maxResults) == (
        "s3cret",
        "sk-file",
        other.resolve(),
        3,
    )
    assert c.agents == {}  # an empty MEMSIFT_AGENTS_WORK_WORKSPACE was "must not be blank"
    assert load_config(workspace=ws, env={"MEMSIFT_CONFIG": ""}).source is None  # as it was
    with pytest.raises(ConfigError, match=r"^MEMSIFT_SEARCH_MAX_RESULTS \(search\.maxResults\):"):
        load_config(workspace=ws, env={"MEMSIFT_SEARCH_MAX_RESULTS": " "})  # a blank is a value, and a bad one


def test_non_config_memsift_variables_are_not_keys(ws: Path, tmp_path: Path) -> None:
    env = {"MEMSIFT_HOME": str(tmp_path / "h"), "MEMSIFT_API_KEY": "k"}
    assert load_config(workspace=ws, env=env).home == tmp_path / "h"


# ---------------------------------------------------------------- unknown keys and bad values


@pytest.mark.parametrize(
    "toml, key",
    [
        ("[search]\nbogus = 1\n", "search.bogus"),
        ("bogus = 1\n", "bogus"),
        ('[embeding]\nprovider = "local"\n', "embeding.provider"),
        ("[search.mmr]\nlamda = 0.5\n", "search.mmr.lamda"),
        ('[agents.work]\npath = "x"\n', "agents.work.path"),
    ],
)
def test_unknown_toml_key_is_named(ws: Path, toml: str, key: str) -> None:
    write(ws / "memsift.toml", toml)
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(err.value).startswith(in_file(ws, f"{key}:"))


@pytest.mark.parametrize(
    "toml, message",
    [
        ("[search]\nmax_results = 3\n", "search.max_results: no such configuration key; did you mean "
         "search.maxResults?"),
        ("[search]\nmaxresults = 3\n", "search.maxresults: no such configuration key; did you mean search.maxResults?"),
        ("[embedding]\nbatch_max_bytes = 9\n", "embedding.batch_max_bytes: no such configuration key; did you mean "
         "embedding.batchMaxBytes?"),
        ("maxResults = 3\n", "maxResults: no such configuration key; did you mean search.maxResults?"),
        # configuration.md's example, written at the top as a newcomer does: it got no suggestion
        ("max_results = 3\n", "max_results: no such configuration key; did you mean search.maxResults?"),
        ('[store]\ntokenizer = "trigram"\n', "store.tokenizer: no such configuration key; did you mean "
         "store.fts.tokenizer?"),
        ("[search.mmr]\nlamda = 0.5\n", "search.mmr.lamda: no such configuration key; did you mean search.mmr.lambda?"),
        ("[search]\nenabled = true\n", "search.enabled: no such configuration key"),  # which one: no guess
    ],
)  # fmt: skip
def test_an_unknown_key_near_a_real_one_names_it(ws: Path, toml: str, message: str) -> None:
    """The environment takes `MEMSIFT_SEARCH_MAX_RESULTS` in any case; the file's `max_results = 3` (TOML's
    usual spelling), a key outside its table or a typo got "no such configuration key", and a look at the docs."""
    write(ws / "memsift.toml", toml)
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(err.value) == in_file(ws, message)


@pytest.mark.parametrize(
    "toml, message",
    [
        ("[search]\ntemporalDecay = 5\n", "search.temporalDecay: expected a table of enabled, halfLifeDays"),
        ("search = 5\n", "search: expected a table of maxResults, minScore, calibrate, mode, ..."),
        ('[store]\nfts = "trigram"\n', "store.fts: expected a table of tokenizer, stemmer"),
        ('agents = "work"\n', "agents: expected a table of agents, [agents.<id>] with workspace = ..."),
    ],
)
def test_a_table_given_a_plain_value_says_so(ws: Path, toml: str, message: str) -> None:
    """It was "search.temporalDecay: no such configuration key", for a key the docs list."""
    write(ws / "memsift.toml", toml)
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(err.value) == in_file(ws, message)


@pytest.mark.parametrize("name", ["MEMSIFT_SEARCH_BOGUS", "MEMSIFT_EMBEDDING_PROVIDR", "MEMSIFT_CHUNKING_SIZE"])
def test_unknown_env_key_is_named(ws: Path, name: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={name: "1"})
    assert name in str(err.value)


@pytest.mark.parametrize(
    ("name", "listed"),
    [
        ("MEMSIFT_SEARCH_MMR", "MEMSIFT_SEARCH_MMR_ENABLED or MEMSIFT_SEARCH_MMR_LAMBDA"),
        (
            "MEMSIFT_SEARCH_TEMPORALDECAY",
            "MEMSIFT_SEARCH_TEMPORAL_DECAY_ENABLED or MEMSIFT_SEARCH_TEMPORAL_DECAY_HALF_LIFE_DAYS",
        ),
        ("MEMSIFT_STORE_FTS", "MEMSIFT_STORE_FTS_TOKENIZER or MEMSIFT_STORE_FTS_STEMMER"),
        ("MEMSIFT_CHUNKING", "MEMSIFT_CHUNKING_TOKENS or MEMSIFT_CHUNKING_OVERLAP"),
    ],
)
def test_a_variable_of_a_table_names_its_keys(ws: Path, name: str, listed: str) -> None:
    """`MEMSIFT_SEARCH_MMR=true` (MMR on, as a user writes it) was "no such configuration key" and nothing more,
    where the file's `mmr = true` says which keys the table has."""
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={name: "true"})
    assert str(err.value) == f"{name}: no such configuration key; it names a table: set {listed}"


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("MEMSIFT_EXTRAPATH", "MEMSIFT_EXTRA_PATHS"),  # no section: it was ignored, and docs/ never indexed
        ("MEMSIFT_EMBEDING_PROVIDER", "MEMSIFT_EMBEDDING_PROVIDER"),  # a section misspelt: ignored too
        ("MEMSIFT_SOURCE", "MEMSIFT_SOURCES"),
        ("MEMSIFT_SEARCH_MAXRESULT", "MEMSIFT_SEARCH_MAX_RESULTS"),
        ("MEMSIFT_SEARCH_TEMPORAL_DECAY_ENABLE", "MEMSIFT_SEARCH_TEMPORAL_DECAY_ENABLED"),
    ],
)
def test_a_variable_spelled_near_a_key_is_an_error_naming_it(ws: Path, name: str, meant: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={name: "docs"})
    assert str(err.value) == f"{name}: no such configuration key; did you mean {meant}?"
    others = ("MEMSIFT_MODEL_CACHE", "MEMSIFT_BLAS_THREADS", "MEMSIFT_ONNX_THREADS", "MEMSIFT_ONNX_QUERY_THREADS")
    load_config(workspace=ws, env=dict.fromkeys(others, "1"))  # memsift's other variables are no typo


@pytest.mark.parametrize(
    "toml, key",
    [
        ('[search]\nmaxResults = "x"\n', "search.maxResults"),
        ("[search]\nmaxResults = 0\n", "search.maxResults"),
        ("[search]\nmaxResults = 2.5\n", "search.maxResults"),
        ("[search]\nminScore = 2\n", "search.minScore"),
        ("[search]\nminScore = true\n", "search.minScore"),
        ('[search]\nmode = "fuzzy"\n', "search.mode"),
        ('[search]\nfusion = "max"\n', "search.fusion"),
        ('[search.mmr]\nenabled = "maybe"\n', "search.mmr.enabled"),
        ("[search.temporalDecay]\nenabled = 1\n", "search.temporalDecay.enabled"),
        ('[embedding]\nprovider = "gpt"\n', "embedding.provider"),
        ("[embedding]\nretries = -1\n", "embedding.retries"),
        ('[store.fts]\ntokenizer = "icu"\n', "store.fts.tokenizer"),
        ("extraPaths = [1, 2]\n", "extraPaths"),
        ("workspace = 5\n", "workspace"),
        ("[agents.work]\nworkspace = 5\n", "agents.work.workspace"),
        ('extraPaths = ["docs", ""]\n', "extraPaths"),  # "" added every .md of the workspace (README.md...)
        ('exclude = [" "]\n', "exclude"),
        ('[agents.work]\nworkspace = ""\n', "agents.work.workspace"),  # it named the config file's folder
        # only `serve` refused it, as "--agent: 'Bad Agent' is not a valid agent id", an --agent never given
        ('[agents."Bad Agent"]\nworkspace = "."\n', "agents.Bad Agent.workspace"),
    ],
)
def test_bad_toml_value_is_named(ws: Path, toml: str, key: str) -> None:
    write(ws / "memsift.toml", toml)
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(err.value).startswith(in_file(ws, f"{key}:"))


@pytest.mark.parametrize(
    "name, value, key",
    [
        ("MEMSIFT_SEARCH_MAX_RESULTS", "x", "search.maxResults"),
        ("MEMSIFT_SEARCH_MIN_SCORE", "2", "search.minScore"),
        ("MEMSIFT_SEARCH_MODE", "fuzzy", "search.mode"),
        ("MEMSIFT_SEARCH_MMR_ENABLED", "maybe", "search.mmr.enabled"),
    ],
)
def test_bad_env_value_is_named(ws: Path, name: str, value: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={name: value})
    assert str(err.value).startswith(f"{name} ({key}):")  # the variable the user set, and the key it sets


def test_overrides_are_validated_too(ws: Path) -> None:
    with pytest.raises(ConfigError, match=r"^search\.snippetChars:"):
        load_config(workspace=ws, env={}, overrides={"search.snippetChars": "lots"})


@pytest.mark.parametrize(
    "toml",
    [
        "[chunking]\ntokens = 100\noverlap = 100\n",
        "[chunking]\ntokens = 100\noverlap = 150\n",
        "[chunking]\noverlap = 400\n",  # default tokens 400
    ],
)
def test_overlap_must_be_smaller_than_tokens(ws: Path, toml: str) -> None:
    write(ws / "memsift.toml", toml)
    with pytest.raises(ConfigError, match=f"^{re.escape(in_file(ws, 'chunking.overlap:'))}"):
        load_config(workspace=ws, env={})


def test_overlap_below_tokens_is_fine(ws: Path) -> None:
    write(ws / "memsift.toml", "[chunking]\ntokens = 100\noverlap = 99\n")
    assert load_config(workspace=ws, env={}).chunking.overlap == 99


def test_overlap_check_sees_env_overrides(ws: Path) -> None:
    with pytest.raises(ConfigError, match=r"^MEMSIFT_CHUNKING_OVERLAP \(chunking\.overlap\): must be smaller"):
        load_config(workspace=ws, env={"MEMSIFT_CHUNKING_OVERLAP": "400"})


def test_invalid_toml_is_a_clear_error(ws: Path) -> None:
    toml = write(ws / "memsift.toml", "[search\nmaxResults = \n")
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    message = str(err.value)
    assert str(toml) in message and "not valid TOML" in message
    assert "\n" not in message  # one line for the CLI


def test_config_that_is_not_utf8_is_a_clear_error(ws: Path) -> None:
    toml = ws / "memsift.toml"
    toml.write_bytes(b'[search]\nmode = "hybrid" # caf\xe9\n')
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(toml) in str(err.value)


# ---------------------------------------------------------------- agents


def test_agents_workspace_selects_another_workspace(tmp_path: Path, workspace) -> None:
    main_ws = workspace({"MEMORY.md": "main\n"}, name="main-ws")
    work_ws = workspace({"MEMORY.md": "work\n"}, name="work-ws")
    cfg = write(main_ws / "memsift.toml", '[agents.work]\nworkspace = "../work-ws"\n')

    c = load_config(cfg, agent="work", env={"MEMSIFT_HOME": str(tmp_path / "h")})
    assert c.agent == "work"
    assert c.workspace == work_ws.resolve()
    assert c.db_path == tmp_path / "h" / "memory" / f"work.work-ws-{_digest(work_ws.resolve())}.sqlite"
    assert {k: v.resolve() for k, v in c.agents.items()} == {"work": work_ws.resolve()}

    main = load_config(cfg, env={"MEMSIFT_HOME": str(tmp_path / "h")}, workspace=main_ws)
    assert main.workspace == main_ws.resolve()
    assert main.db_path == tmp_path / "h" / "memory" / f"main.main-ws-{_digest(main_ws.resolve())}.sqlite"


def test_agents_main_workspace_is_the_main_workspace(tmp_path: Path, workspace) -> None:
    """`[agents.main] workspace = ...` was ignored: the main agent indexed the current folder instead."""
    main_ws = workspace({"MEMORY.md": "main\n"}, name="main-ws")
    cfg = write(tmp_path / "conf" / "memsift.toml", f'[agents.main]\nworkspace = "{main_ws}"\n')
    assert load_config(cfg, env={}).workspace == main_ws.resolve()
    assert load_config(cfg, agent="main", env={}).workspace == main_ws.resolve()
    assert load_config(cfg, workspace=tmp_path, env={}).workspace == tmp_path.resolve()  # --workspace wins

    write(cfg, f'workspace = "{main_ws}"\n[agents.main]\nworkspace = "{main_ws}"\n')
    assert load_config(cfg, env={}).workspace == main_ws.resolve()
    write(cfg, f'workspace = "{tmp_path}"\n[agents.main]\nworkspace = "{main_ws}"\n')
    with pytest.raises(ConfigError, match=f"^{re.escape(str(cfg))}: agents\\.main\\.workspace: .* differs from "):
        load_config(cfg, env={})


def test_a_variable_overrides_the_files_other_spelling_of_the_main_workspace(tmp_path: Path, workspace) -> None:
    """MEMSIFT_WORKSPACE over a file's `[agents.main] workspace` (or MEMSIFT_AGENTS_MAIN_WORKSPACE over its
    `workspace`) was "differs from workspace; set one": a variable overrides a key of the file, whichever
    spelling the file chose. Two spellings in one layer that disagree are still an error."""
    main_ws = workspace({"MEMORY.md": "main\n"}, name="main-ws")
    other = workspace({"MEMORY.md": "other\n"}, name="other-ws")
    cfg = write(tmp_path / "conf" / "memsift.toml", f'[agents.main]\nworkspace = "{main_ws}"\n')
    c = load_config(cfg, env={"MEMSIFT_WORKSPACE": str(other)})
    assert c.workspace == other.resolve() and c.agents["main"] == other
    write(cfg, f'workspace = "{main_ws}"\n')
    assert load_config(cfg, env={"MEMSIFT_AGENTS_MAIN_WORKSPACE": str(other)}).workspace == other.resolve()
    env = {"MEMSIFT_AGENTS_MAIN_WORKSPACE": str(other), "MEMSIFT_WORKSPACE": str(main_ws)}
    with pytest.raises(ConfigError, match=r"^MEMSIFT_AGENTS_MAIN_WORKSPACE \(agents\.main\.workspace\): .* differs"):
        load_config(cfg, env=env)


def test_an_agent_from_the_environment(ws: Path, workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """`agents.<id>.workspace` as MEMSIFT_AGENTS_<ID>_WORKSPACE, as every other key has its variable: the
    variable was ignored in silence (`--agent work`: "unknown agent"), and a mistyped one is named."""
    work = workspace({"MEMORY.md": "work\n"}, name="work-ws")
    monkeypatch.chdir(ws)  # the main agent's folder, whose memsift.toml is read
    c = load_config(agent="work", env={"MEMSIFT_AGENTS_WORK_WORKSPACE": str(work)})
    assert c.workspace == work.resolve() and set(c.agents) == {"work"}
    write(ws / "memsift.toml", '[agents.Research]\nworkspace = "elsewhere"\n')  # the file's agent, overridden
    env = {"MEMSIFT_AGENTS_RESEARCH_WORKSPACE": str(work), "MEMSIFT_AGENTS_MY_NOTES_WORKSPACE": str(work)}
    c = load_config(agent="Research", env=env)
    assert c.workspace == work.resolve() and set(c.agents) == {"Research", "my_notes"}
    with pytest.raises(ConfigError, match=r"^MEMSIFT_AGENTS_WORK_WORKSPACE \(agents\.work\.workspace\): .*gone"):
        load_config(agent="work", env={"MEMSIFT_AGENTS_WORK_WORKSPACE": str(ws / "gone")})
    for name in ("MEMSIFT_AGENTS_WORK", "MEMSIFT_AGENTS_WORK_FOLDER", "MEMSIFT_AGENTS__WORKSPACE", "MEMSIFT_AGENTS"):
        with pytest.raises(ConfigError, match=f"^{name}: no such configuration key"):
            load_config(workspace=ws, env={name: str(work)})


def test_the_agents_a_server_serves_read_the_file_the_main_agent_read(
    tmp_path: Path, workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memsift --workspace ~/agent serve` with MEMSIFT_AGENTS_WORK_WORKSPACE set and no ~/agent/memsift.toml:
    work was read with the current folder's memsift.toml (maxResults 1 here), which the main agent never read
    and `memsift --workspace ~/agent --agent work search` does not read either (6 hits)."""
    main_ws = workspace({"MEMORY.md": "main\n"}, name="main-ws")
    work = workspace({"MEMORY.md": "work\n"}, name="work-ws")
    elsewhere = write(tmp_path / "elsewhere" / "memsift.toml", "[search]\nmaxResults = 1\n").parent
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("MEMSIFT_AGENTS_WORK_WORKSPACE", str(work))
    configs = every_agent(load_config(workspace=main_ws))
    assert {a: (c.workspace, c.source, c.search.maxResults) for a, c in configs.items()} == {
        "main": (main_ws.resolve(), None, 6),
        "work": (work.resolve(), None, 6),
    }
    assert configs["work"] == load_config(workspace=main_ws, agent="work")  # as `--agent work` reads it
    write(main_ws / "memsift.toml", "[search]\nmaxResults = 3\n")  # main's file is theirs
    assert {c.search.maxResults for c in every_agent(load_config(workspace=main_ws)).values()} == {3}


def test_a_relative_folder_in_the_environment_is_the_current_folders(
    tmp_path: Path, workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cd ~/agent && MEMSIFT_WORKSPACE=. memsift --config ~/conf/memsift.toml ...` indexed ~/conf, the config
    file's folder, as the file's own `workspace = "."` means; a variable is read where the shell is."""
    here = workspace({"MEMORY.md": "here\n"}, name="here")
    cfg = write(tmp_path / "conf" / "memsift.toml", '[agents.work]\nworkspace = "."\n')
    monkeypatch.chdir(here)
    assert load_config(cfg, env={"MEMSIFT_WORKSPACE": "."}).workspace == here.resolve()
    assert load_config(cfg, agent="work", env={"MEMSIFT_AGENTS_WORK_WORKSPACE": "."}).workspace == here.resolve()
    assert load_config(cfg, agent="work", env={}).workspace == cfg.parent.resolve()  # the file's: its folder
    write(cfg, 'workspace = "."\n')
    assert load_config(cfg, env={}).workspace == cfg.parent.resolve()


def test_the_workspace_of_memsift_workspace_gives_the_config_file(
    tmp_path: Path, workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC's `<workspace>/memsift.toml` for a workspace the environment names, as for --workspace: the current
    folder's file was read, so `MEMSIFT_WORKSPACE=~/agent memsift index` run elsewhere rebuilt the index
    without the workspace's extraPaths."""
    agent = workspace({"MEMORY.md": "m\n", "docs/a.md": "a\n"}, name="agent")
    write(agent / "memsift.toml", 'extraPaths = ["docs"]\n')
    monkeypatch.chdir(tmp_path)
    c = load_config(env={"MEMSIFT_WORKSPACE": str(agent)})
    assert c.workspace == agent.resolve() and c.extra_paths == ("docs",)
    assert c.source == agent / "memsift.toml"


def test_agent_workspace_found_through_the_current_folder(workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    main_ws = workspace({"MEMORY.md": "main\n"}, name="main-ws")
    other = workspace({"memory/a.md": "x\n"}, name="other")
    write(main_ws / "memsift.toml", f'[agents.notes]\nworkspace = "{other}"\n')
    monkeypatch.chdir(main_ws)
    assert load_config(agent="notes", env={}).workspace == other.resolve()


def test_unknown_agent_is_an_error(ws: Path) -> None:
    write(ws / "memsift.toml", '[agents.work]\nworkspace = "."\n')
    with pytest.raises(ConfigError, match="unknown agent 'play'"):
        load_config(agent="play", env={}, config_path=ws / "memsift.toml")


@pytest.mark.parametrize("agent", ["", "../etc", "a b", "x" * 65, "ünï"])
def test_invalid_agent_id_is_an_error(ws: Path, agent: str) -> None:
    with pytest.raises(ConfigError, match="--agent"):
        load_config(workspace=ws, agent=agent, env={})


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[agents."x.y"]\nworkspace = "."\n', "agents.x.y.workspace: 'x.y' is not a valid agent id"),
        ('[agents.""]\nworkspace = "."\n', "agents..workspace: '' is not a valid agent id"),
        ('[agents]\nwork = "."\n', "agents.work: expected a table, [agents.work] with workspace = ..."),
        ('[agents]\nworkspace = "."\n', "agents.workspace: expected a table, [agents.<id>] with workspace = ..."),
        ('[agents.work]\nfolder = "."\n', "agents.work.folder: no such configuration key; an agent has one key, "),
    ],
)
def test_an_agents_key_that_cannot_be_says_what_to_write(ws: Path, toml: str, message: str) -> None:
    """`[agents."x.y"]` was "agents.x.y.workspace: no such configuration key", of a key written as the docs
    write it, and `[agents] work = "~/w"` the same, not saying that an agent is a table."""
    write(ws / "memsift.toml", toml)
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(err.value).startswith(in_file(ws, message))


def test_agent_workspace_that_is_not_a_folder_is_an_error(ws: Path) -> None:
    """The error names the key that set the folder: it said "workspace:", which the file did not set, and
    `memsift serve` (which loads every agent) failed with it, naming no agent."""
    write(ws / "memsift.toml", '[agents.work]\nworkspace = "missing"\n')
    with pytest.raises(ConfigError, match=f"^{re.escape(in_file(ws, 'agents.work.workspace:'))} .*missing.* is not a"):
        load_config(ws / "memsift.toml", agent="work", env={})
    write(ws / "memsift.toml", '[agents.main]\nworkspace = "gone"\n')
    with pytest.raises(ConfigError, match=f"^{re.escape(in_file(ws, 'agents.main.workspace:'))} .*gone.* is not a"):
        load_config(ws / "memsift.toml", env={})
    write(ws / "memsift.toml", "")
    with pytest.raises(ConfigError, match=r"^MEMSIFT_WORKSPACE \(workspace\): .*elsewhere.* is not a folder"):
        load_config(ws / "memsift.toml", env={"MEMSIFT_WORKSPACE": str(ws / "elsewhere")})


def test_workspace_that_is_not_a_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^workspace:"):
        load_config(workspace=tmp_path / "missing", env={})


# ---------------------------------------------------------------- gaps against the SPEC


@pytest.mark.parametrize(
    "toml",
    [
        '[api]\nhost = "127.0.0.1"\nport = 8000\n',
        "[sync]\nwatch = true\nwatchDebounceMs = 1500\nintervalMinutes = 0\n",
        '[rerank]\nprovider = "local"\ncandidates = 30\n',
    ],
    ids=["api", "sync", "rerank"],
)
def test_spec_keys_are_accepted(ws: Path, toml: str) -> None:
    write(ws / "memsift.toml", toml)
    load_config(workspace=ws, env={})


def test_bad_headers_error_does_not_print_the_secret(ws: Path) -> None:
    write(ws / "memsift.toml", '[embedding.headers]\nAuthorization = "Bearer sk-secret-123"\nX-Retries = 3\n')
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(err.value).startswith(in_file(ws, "embedding.headers"))
    assert "sk-secret-123" not in str(err.value)


@pytest.mark.parametrize(
    ("toml", "key", "kind"),
    [
        ('[api]\nkey = ["sk-live-1234"]\n', "api.key", "an array"),
        ('[embedding]\napiKey = { value = "sk-live-1234" }\n', "embedding.apiKey", "a table"),
        ("[embedding]\napiKey = 12345678\n", "embedding.apiKey", "an integer"),
    ],
)
def test_a_mistyped_secret_is_not_printed(ws: Path, toml: str, key: str, kind: str) -> None:
    """It was "api.key: expected a string, got ['sk-live-1234']": the key on the terminal."""
    write(ws / "memsift.toml", toml)
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(err.value) == in_file(ws, f"{key}: expected a string, got {kind} (not shown: the key is a secret)")


def test_candidate_pool_is_set_by_config_never_by_a_request(ws: Path) -> None:
    """SPEC's over-fetch (maxResults x candidateMultiplier) counts the configured maxResults, at least the pool."""
    assert load_config(workspace=ws, env={}).search.fetch == 40  # max(40, 6 x 4)
    write(ws / "memsift.toml", "[search]\ncandidateMultiplier = 10\nmaxResults = 8\n")
    assert load_config(workspace=ws, env={}).search.fetch == 80
    write(ws / "memsift.toml", "[search]\ncandidateMultiplier = 50\nmaxResults = 100\n")
    assert load_config(workspace=ws, env={}).search.fetch == 200
    # SPEC caps the candidates at 200, not the multiplier: 100 (or more) is the cap, as SPEC reads, where it
    # was "search.candidateMultiplier: 100 is out of range [1, 50]".
    write(ws / "memsift.toml", "[search]\ncandidateMultiplier = 100\n")
    assert load_config(workspace=ws, env={}).search.fetch == 200
    assert load_config(workspace=ws, env={"MEMSIFT_SEARCH_CANDIDATE_MULTIPLIER": "1000"}).search.fetch == 200
    write(ws / "memsift.toml", "[search]\ncandidatePool = 120\n")
    assert load_config(workspace=ws, env={}).search.candidatePool == 120
    with pytest.raises(ConfigError, match=r"^MEMSIFT_SEARCH_CANDIDATE_POOL \(search\.candidatePool\): 201 is out"):
        load_config(workspace=ws, env={"MEMSIFT_SEARCH_CANDIDATE_POOL": "201"})


@pytest.mark.parametrize(
    ("where", "value"),
    [("toml", "nan"), ("toml", "inf"), ("toml", "-inf"), ("env", "nan"), ("env", "NaN"), ("env", "inf")],
)
@pytest.mark.parametrize("key", ["search.minScore", "search.temporalDecay.halfLifeDays", "search.maxResults"])
def test_a_number_that_is_not_finite_is_refused(ws: Path, where: str, value: str, key: str) -> None:
    """TOML has nan and inf, and float() reads them from a variable: `minScore = nan` passed the range check
    (every comparison with NaN is false) and every search abstained, "under the floor minScore nan"."""
    section, _, name = key.rpartition(".")
    variable = "MEMSIFT_" + key.replace(".", "_").upper()
    if where == "toml":
        write(ws / "memsift.toml", f"[{section}]\n{name} = {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={variable: value} if where == "env" else {})
    assert str(err.value).startswith(in_file(ws, f"{key}:") if where == "toml" else f"{variable} ({key}):")
    assert "finite" in str(err.value) or "integer" in str(err.value)


@pytest.mark.parametrize(
    ("toml", "key", "message"),
    [
        ('[search]\nminScore = "0.3"\n', "search.minScore", "expected a number, got the string '0.3'"),
        ('[search]\ncandidateMultiplier = "4"\n', "search.candidateMultiplier", "expected an integer"),
        ('[api]\nport = "8080"\n', "api.port", "expected an integer, got the string '8080'"),
        ('[search.mmr]\nenabled = "true"\n', "search.mmr.enabled", "expected true or false, got the string"),
        ('[sync]\nwatch = "no"\n', "sync.watch", "expected true or false"),
        ('[rerank]\nenabled = "true"\n', "rerank.enabled", 'expected true, false or "auto", got the string'),
        ("[rerank]\nenabled = 1\n", "rerank.enabled", 'expected true, false or "auto", got 1'),
    ],
)
def test_a_string_in_the_file_where_a_number_or_boolean_is_due_is_refused(
    ws: Path, toml: str, key: str, message: str
) -> None:
    """A TOML file's values are typed: `minScore = "0.3"` was read as 0.3 and `enabled = "true"` as true, so a
    quoting mistake (or `enabled = "false "`...) went unnoticed; a REST body refuses the same (api/strict.py)."""
    write(ws / "memsift.toml", toml)
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(err.value).startswith(in_file(ws, f"{key}: {message}"))


def test_text_from_the_environment_and_overrides_is_still_parsed(ws: Path) -> None:
    env = {"MEMSIFT_SEARCH_MIN_SCORE": "0.3", "MEMSIFT_API_PORT": "8080", "MEMSIFT_SYNC_WATCH": "no"}
    c = load_config(workspace=ws, env=env, overrides={"rerank.weight": "1.0", "search.mode": "keyword"})
    assert (c.search.minScore, c.api.port, c.sync.watch, c.rerank.weight) == (0.3, 8080, False, 1.0)
    assert type(c.search.mode) is str  # not the marker subclass: msgspec encodes only plain str


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("true", True), ('"off"', False), ('"on"', True)])
def test_citations_take_a_boolean_as_on_and_off(ws: Path, value: str, expected: bool) -> None:
    """`citations = false` is how TOML says off; it was "search.citations: False is not one of on, off"."""
    write(ws / "memsift.toml", f"[search]\ncitations = {value}\n")
    assert load_config(workspace=ws, env={}).search.citations is expected
    assert load_config(workspace=ws, env={"MEMSIFT_SEARCH_CITATIONS": value.strip('"')}).search.citations is expected


def test_a_config_file_saved_with_a_byte_order_mark_is_read(ws: Path) -> None:
    """Windows editors save UTF-8 with a BOM: the file was "not valid TOML: Invalid statement (at line 1,
    column 1)", an error pointing at nothing the user can see (memory files with a BOM were read already)."""
    (ws / "memsift.toml").write_bytes(b"\xef\xbb\xbf[search]\nmaxResults = 3\n")
    assert load_config(workspace=ws, env={}).search.maxResults == 3


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("MEMSIFT_SEARCH_MAXRESULTS", "2_0", "MEMSIFT_SEARCH_MAXRESULTS (search.maxResults): expected an integer, "
         "got '2_0'"),
        ("MEMSIFT_SEARCH_MAXRESULTS", "٢", "MEMSIFT_SEARCH_MAXRESULTS (search.maxResults): expected an integer"),
        ("MEMSIFT_SEARCH_MINSCORE", "0_5", "MEMSIFT_SEARCH_MINSCORE (search.minScore): expected a number, got '0_5'"),
        ("MEMSIFT_CHUNKING_TOKENS", "6.5", "MEMSIFT_CHUNKING_TOKENS (chunking.tokens): expected an integer"),
    ],
)  # fmt: skip
def test_a_number_python_would_read_but_no_one_writes_is_refused(ws: Path, name: str, value: str, message: str):
    """Python's int("2_0") is 20 and int("٢") is 2: a mistyped variable set 20 results in silence."""
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={name: value})
    assert str(err.value).startswith(message), err.value


def test_a_list_key_given_a_string_in_the_file_is_refused_with_the_fix(ws: Path) -> None:
    """`extraPaths = "docs"` was split at commas ("a,b" two folders, a folder with a comma unreachable); the
    file's values are typed, as a string where a number is due is refused. The environment's comma-separated
    form stays, and an integral float (`maxResults = 6.0`) is its integer."""
    (ws / "docs").mkdir()
    for toml, message in [
        ('extraPaths = "docs"\n', "extraPaths: expected a list of strings, got the string 'docs'; "
         'write extraPaths = ["docs"]'),
        ('exclude = "a,b"\n', "exclude: expected a list of strings, got the string 'a,b'; write exclude = [\"a,b\"]"),
    ]:  # fmt: skip
        write(ws / "memsift.toml", toml)
        with pytest.raises(ConfigError) as err:
            load_config(workspace=ws, env={})
        assert str(err.value) == in_file(ws, message)
    write(ws / "memsift.toml", "[search]\nmaxResults = 6.0\n")
    config = load_config(workspace=ws, env={"MEMSIFT_EXTRAPATHS": "docs, notes"})
    assert config.search.maxResults == 6 and type(config.search.maxResults) is int
    assert config.extra_paths == ("docs", "notes")


def test_a_ranker_model_is_found_where_the_file_naming_it_is(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rankerModel = "ranker.json"` beside the config file was read from the current folder ("No such file or
    directory" from anywhere else, `memsift up` started elsewhere included), and `~/ranker.json` was not the
    home's; `workspace` in the same file was relative to the file already."""
    cfg = write(tmp_path / "conf" / "memsift.toml", '[rerank]\nrankerModel = "ranker.json"\n')
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    shipped = (Path(__file__).parents[1] / "core" / "ranker.json").read_text()
    for where in (cfg.parent / "ranker.json", tmp_path / "home" / "ranker.json", ws / "mine.json"):
        write(where, shipped)  # a model that cannot be read is refused
    monkeypatch.chdir(ws)
    assert load_config(cfg, workspace=ws, env={}).rerank.rankerModel == str(cfg.parent / "ranker.json")
    write(cfg, '[rerank]\nrankerModel = "~/ranker.json"\n')
    assert load_config(cfg, workspace=ws, env={}).rerank.rankerModel == str(tmp_path / "home" / "ranker.json")
    env = {"MEMSIFT_RERANK_RANKERMODEL": "mine.json"}  # a variable, as a shell user means it: the current folder
    assert load_config(cfg, workspace=ws, env=env).rerank.rankerModel == str(ws / "mine.json")


def test_headers_from_the_environment_are_a_json_object(ws: Path) -> None:
    """MEMSIFT_EMBEDDING_HEADERS could never be valid: "expected a table of strings", which a variable cannot
    hold. A JSON object is read; anything else is refused without its value (a header is often a secret)."""
    env = {"MEMSIFT_EMBEDDING_HEADERS": '{"X-Org": "acme"}', "MEMSIFT_RERANK_HEADERS": "{}"}
    config = load_config(workspace=ws, env=env)
    assert config.embedding.headers == {"X-Org": "acme"} and config.rerank.headers == {}
    for value in ("X-Org: sk-secret-1", '["sk-secret-1"]', '{"X-Org": 1}'):
        with pytest.raises(ConfigError) as err:
            load_config(workspace=ws, env={"MEMSIFT_EMBEDDING_HEADERS": value})
        assert str(err.value).startswith("MEMSIFT_EMBEDDING_HEADERS (embedding.headers)") and "sk-" not in str(
            err.value
        )
    with pytest.raises(ConfigError, match=r"^MEMSIFT_RERANK_HEADERS \(rerank\.headers\): header 'X-Org': expected a"):
        load_config(workspace=ws, env={"MEMSIFT_RERANK_HEADERS": '{"X-Org": 1}'})


@pytest.mark.parametrize("url", ["localhost:8080/v1", "ftp://proxy/v1", "http://", "user:sk-pass@proxy/v1"])
def test_a_base_url_that_is_no_http_url_is_refused_before_any_request(ws: Path, url: str) -> None:
    """It was taken, and each request failed as "connection dropped (UnsupportedProtocol ...)", after 4 tries."""
    for key, section in (("embedding.baseUrl", "embedding"), ("rerank.baseUrl", "rerank")):
        write(ws / "memsift.toml", f'[{section}]\nbaseUrl = "{url}"\n')
        with pytest.raises(ConfigError) as err:
            load_config(workspace=ws, env={})
        assert str(err.value).startswith(in_file(ws, f"{key}: expected an http:// or https:// URL"))
        assert "sk-pass" not in str(err.value)
    write(ws / "memsift.toml", '[embedding]\nbaseUrl = "HTTPS://user:pw@proxy:8443/v1"\n')
    assert load_config(workspace=ws, env={}).embedding.baseUrl == "HTTPS://user:pw@proxy:8443/v1"


def test_every_section_default_is_the_schema_default() -> None:
    """A section built in code (bench/rerankers.py's RerankConfig) gets what a user's empty file gets:
    RerankConfig kept a 10 s timeout after the schema's became 3 s."""
    import dataclasses

    from core import config_types
    from core.config_schema import SCHEMA

    for name in ("embedding", "chunking", "search", "store", "rerank", "sync", "cache", "sessions", "api"):
        section = getattr(config_types, f"{name.capitalize()}Config")
        for f in dataclasses.fields(section):
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                continue
            assert SCHEMA[f"{name}.{f.name}"][0] == default, f"{name}.{f.name}"


@pytest.mark.parametrize(
    ("key", "variable", "largest"),
    [
        ("embedding.timeoutSeconds", "MEMSIFT_EMBEDDING_TIMEOUT_SECONDS", "86400"),
        ("rerank.timeoutSeconds", "MEMSIFT_RERANK_TIMEOUT_SECONDS", "86400"),
        ("sync.intervalMinutes", "MEMSIFT_SYNC_INTERVAL_MINUTES", "525600"),
    ],
)
def test_a_duration_no_clock_can_wait_is_refused(ws: Path, key: str, variable: str, largest: str) -> None:
    """`timeoutSeconds = 1e20` passed the check and the first request failed, "OverflowError: timestamp out of
    range for platform time_t" (a socket's timeout), as `intervalMinutes = 1e20` failed `memsift up` after it
    had started a Prefect server ("Python int too large to convert to C int", Prefect's schedule). A day's
    timeout and a year's interval are taken."""
    section, _, name = key.rpartition(".")
    for where in ("toml", "env"):
        (ws / "memsift.toml").unlink(missing_ok=True)
        if where == "toml":
            write(ws / "memsift.toml", f"[{section}]\n{name} = 1e20\n")
        with pytest.raises(ConfigError) as err:
            load_config(workspace=ws, env={variable: "1e20"} if where == "env" else {})
        named = in_file(ws, key) if where == "toml" else f"{variable} ({key})"
        assert str(err.value).startswith(f"{named}: 1e+20 is out of range"), err.value
    (ws / "memsift.toml").unlink(missing_ok=True)
    config = load_config(workspace=ws, env={variable: largest})
    assert getattr(getattr(config, section), name) == float(largest)


def test_a_ranker_model_that_cannot_be_read_is_a_bad_value(ws: Path, tmp_path: Path) -> None:
    """A missing or malformed `rerank.rankerModel` was found by the first search: `memsift serve` started,
    /readyz said ready, and every search answered 500 "internal error (RankerModelError)"; `memsift index`
    indexed. It is a bad value like any other, named with the file or the variable that set it."""
    write(ws / "memsift.toml", '[rerank]\nrankerModel = "missing.json"\n')
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    missing = ws / "missing.json"
    assert str(err.value) == in_file(ws, f"rerank.rankerModel: ranker model {missing}: No such file or directory")
    bad = write(tmp_path / "bad.json", '{"kind": "logistic"}')
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={"MEMSIFT_RERANK_RANKER_MODEL": str(bad)})
    assert str(err.value).startswith(f"MEMSIFT_RERANK_RANKER_MODEL (rerank.rankerModel): ranker model {bad}: ")


@pytest.mark.parametrize("host", ['""', '" "'])
def test_a_blank_api_host_is_a_bad_value(ws: Path, host: str) -> None:
    """`host = ""` bound every interface behind the user's back (Python's empty address) and printed its
    address as "http://:8000"; without a key it was refused as "api.host : refusing to serve beyond this machine"."""
    write(ws / "memsift.toml", f"[api]\nhost = {host}\n")
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws, env={})
    assert str(err.value) == in_file(ws, "api.host: must not be blank (0.0.0.0 for every IPv4 address)")
    with pytest.raises(ConfigError, match=r"^MEMSIFT_API_HOST \(api\.host\): must not be blank"):
        load_config(workspace=ws, env={"MEMSIFT_API_HOST": " "})
    assert load_config(workspace=ws, env={"MEMSIFT_API_HOST": "0.0.0.0"}).api.host == "0.0.0.0"


@pytest.mark.parametrize(("value", "expected"), [("0", False), ("1", True), ("No", False), ("ON", True)])
def test_citations_from_the_environment_take_what_any_boolean_variable_takes(
    ws: Path, value: str, expected: bool
) -> None:
    """MEMSIFT_SYNC_WATCH=0 is off, but MEMSIFT_SEARCH_CITATIONS=0 was "'0' is not one of on, off"."""
    assert load_config(workspace=ws, env={"MEMSIFT_SEARCH_CITATIONS": value}).search.citations is expected
