"""The documentation covers the whole surface, as datasette's documentation tests do: every configuration key
of `core/config.py`'s schema table, every CLI command and every REST route appears in docs/."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from api import arguments
from api.app import create_app
from core import load_config
from core.config_schema import SCHEMA

ROOT = Path(__file__).parent.parent
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
#: Litestar's own catch-all under the docs page: it serves nothing of memsift's (404 for any other path).
NOT_OURS = {"/schema/{path}"}


def _commands(parser: argparse.ArgumentParser, prefix: str = "memsift") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = _commands(sub, f"{prefix} {name}")
                found.extend(nested or [f"{prefix} {name}"])
    return found


def _routes(config) -> list[str]:
    paths = {re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path) for route in create_app(config).routes}
    return sorted(paths - NOT_OURS)


@pytest.mark.parametrize("key", sorted(SCHEMA))
def test_every_configuration_key_is_documented(key: str) -> None:
    assert f"`{key}`" in DOCS


@pytest.mark.parametrize("command", _commands(arguments.parser()))
def test_every_cli_command_is_documented(command: str) -> None:
    assert command in DOCS


def test_every_rest_route_is_documented(workspace, make_config) -> None:
    routes = _routes(make_config(workspace({"MEMORY.md": "x\n"})))
    assert {"/v1/search", "/v1/get", "/v1/index/{runId}", "/healthz", "/static/{file_path}"} <= set(routes)
    assert [route for route in routes if not re.search(rf"(?<![\w/]){re.escape(route)}(?![\w/{{])", DOCS)] == []


def _options(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Each command's options, nested commands' own included (`model build --rebuild`), by command name."""
    found: dict[str, set[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = {o for a in sub._actions for o in a.option_strings}
                for nested in _options(sub).values():
                    found[name] |= nested
    return found


def _command_spans() -> list[tuple[str, str]]:
    """`memsift ...` as the docs and READMEs write it, inline or on a line of a shell block (to a comment or `--`)."""
    pages = [
        ROOT / "README.md",
        ROOT / "infra" / "README.md",
        ROOT / "bench" / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
    spans = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        found = re.findall(r"`+(memsift [^`\n]+)`+", text)
        for block in re.findall(r"^```(?:sh|bash|shell)?\n(.*?)^```", text, re.M | re.S):
            found += [
                line[line.index("memsift ") :].split(" #")[0] for line in block.splitlines() if "memsift " in line
            ]
        spans += [(page.name, span.split(" -- ")[0]) for span in found]
    return spans


def test_every_option_the_docs_give_a_command_exists() -> None:
    """A flag the docs put after `memsift <command>` is one of that command's options (or a global one), so a
    copied command is not a usage error: README's commands are parsed whole (tests/test_readme.py), the docs'
    inline ones hold placeholders (`--workers N`), so their options are checked instead."""
    parser = arguments.parser()
    commands, everywhere = _options(parser), {o for a in parser._actions for o in a.option_strings}
    checked, unknown = 0, []
    for page, span in _command_spans():
        command = next((word for word in span.split()[1:] if word in commands), None)
        if command is None:
            continue
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", span):
            checked += 1
            if flag not in commands[command] | everywhere:
                unknown.append(f"{page}: {span} ({flag})")
    assert unknown == [] and checked > 50


def test_the_commands_and_routes_are_found():
    """The lists the tests walk are the real ones (a parser or app change cannot empty them silently)."""
    commands = _commands(arguments.parser())
    assert "memsift model build" in commands and "memsift search" in commands and len(commands) == 11


def _layout_sections() -> dict[str, str]:
    """docs/architecture.md's "Module layout" by folder: the text of each `- `core/`:` bullet (a subpackage's
    nested bullet, `  - `embedders/`:`, as `core/embedders`)."""
    layout = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split("## Module layout", 1)[1]
    sections: dict[str, str] = {}
    for top in re.split(r"^- (?=`\w+/`)", layout, flags=re.M)[1:]:
        folder, text = re.match(r"`(\w+)/`(.*)", top, re.S).groups()
        parts = re.split(r"^  - `(\w+)/`", text, flags=re.M)
        sections[folder] = parts[0]
        sections.update({f"{folder}/{parts[i]}": parts[i + 1] for i in range(1, len(parts), 2)})
    return sections


@pytest.mark.parametrize(
    "module",
    sorted(
        str(p.relative_to(ROOT))
        for folder in ("core", "api", "flows")
        for p in (ROOT / folder).rglob("*.py")
        if p.name != "__init__.py"
    ),
)
def test_the_module_layout_names_every_module(module: str) -> None:
    """architecture.md calls its layout complete (README links it as such): it left out 12 modules."""
    folder, name = module.rsplit("/", 1)
    assert f"`{name}`" in _layout_sections().get(folder, ""), f"{module} is not in {folder}'s part of the layout"


def test_the_layout_counts_the_errors() -> None:
    """`errors.py`: "MemsiftError and the N errors under it", as core/errors.py has them (it said ten of 11)."""
    import core.errors

    under = [c for c in vars(core.errors).values() if isinstance(c, type) and issubclass(c, core.errors.MemsiftError)]
    words = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
    assert f"`MemsiftError` and the {words[len(under) - 2]} errors under it" in _layout_sections()["core"]


def test_a_module_s_length_the_docs_give_is_its_length() -> None:
    """architecture.md said "see `ollama.py`, 26 lines" (how small a hosted provider is) of 36: a length
    the docs quote (`x.py`, N lines) is the file's."""
    quoted = re.findall(r"`([\w/]+\.py)`, (\d+) lines", DOCS)
    assert quoted, "the docs quote no module length"
    for name, lines in quoted:
        found = [p for folder in ("core", "flows", "api", "bench", "infra") for p in (ROOT / folder).rglob(name)]
        assert len(found) == 1, name
        assert len(found[0].read_text(encoding="utf-8").splitlines()) == int(lines), name


def _toml_examples() -> list[tuple[str, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [
        (f"{page.name}#{n}", block)
        for page in pages
        for n, block in enumerate(re.findall(r"^```toml\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S))
    ]


@pytest.mark.parametrize(("where", "block"), _toml_examples(), ids=[where for where, _ in _toml_examples()])
def test_every_toml_example_is_a_valid_configuration(where: str, block: str, tmp_path: Path, memsift_home) -> None:
    """A user copies these: each loads with the real loader (a key renamed in the schema breaks it here)."""
    (tmp_path / "memsift.toml").write_text(block, encoding="utf-8")
    load_config(tmp_path / "memsift.toml", workspace=tmp_path, env={})


def test_the_key_table_is_the_schema() -> None:
    """configuration.md's "Every key" table holds the schema's keys and no other, each default as the schema
    has it where the table gives a value (a number, `true`/`false`, a backticked word) and the schema has one (None
    is resolved where the key is used: `embedding.concurrency` 4 is the hosted providers')."""
    table = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8").split("## Every key", 1)[1]
    rows = dict(re.findall(r"^\| `([^`]+)` \| ([^|]*) \|", table, re.M))
    assert sorted(set(rows) - {"agents.<id>.workspace"}) == sorted(SCHEMA)
    for key, shown in rows.items():
        shown = shown.strip()
        if key not in SCHEMA or SCHEMA[key][0] is None:
            continue
        if re.fullmatch(r"-?\d+(\.\d+)?", shown):
            assert float(shown) == SCHEMA[key][0], key
        elif shown in ("true", "false"):
            assert SCHEMA[key][0] is (shown == "true"), key
        elif re.fullmatch(r"`[\w.]+`", shown):
            assert str(SCHEMA[key][0]) == shown.strip("`"), key


def _range(parse) -> str:
    """A number key's accepted values as the table writes them (`integer 1-100`, `number ≥ 0.001`), read from its
    parser's bounds (core/config_values.number); "" for any other key."""
    kind, lo, hi = getattr(getattr(parse, "inner", parse), "bounds", (None, None, None))
    if kind is None:
        return ""
    shown = [str(int(x)) if float(x).is_integer() else repr(float(x)) for x in (lo, hi) if x is not None]
    word = "integer" if kind is int else "number"
    return f"{word} {shown[0]}-{shown[1]}" if hi is not None else f"{word} ≥ {shown[0]}"


def test_the_key_table_gives_each_number_its_range() -> None:
    """The "range" column is what the loader accepts: a number key's bounds, a user reading `timeoutSeconds` or
    `snippetChars` learns them here rather than from an error (only 4 of 34 number keys said any before)."""
    table = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8").split("## Every key", 1)[1]
    rows = dict(re.findall(r"^\| `([^`]+)` \| [^|]* \| ([^|]*) \|", table, re.M))
    shown = {key: rows[key].strip() for key in SCHEMA}
    assert shown == {key: _range(parse) for key, (_, parse) in SCHEMA.items()}
    assert shown["search.maxResults"] == "integer 1-100" and shown["embedding.requestsPerMinute"] == "number ≥ 0.001"
