"""The shape of the code, checked from its source: imports point down and never round in a cycle, no module
reaches into another's private names, `core`'s public surface is exactly its `__all__`, and every choice
list has one source of truth (docs/architecture.md)."""

from __future__ import annotations

import ast
import importlib
import types
import typing
from pathlib import Path

import pytest

import core
from api.schemas import SearchRequest
from core import ConfigError, config_schema, load_config, ranking
from core.embedders import EMBEDDERS, local
from core.rerankers import RERANKERS, cohere
from core.sources import SOURCES

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "flows", "api")


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


MODULES = {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run, at module level or in a function; `if TYPE_CHECKING:` blocks are
    left out (they never run: annotations only)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _imports(module: str) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for each runtime import of `module`."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    out = []
    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        else:
            out.append((_absolute(module, node), [alias.name for alias in node.names]))
    return out


def _graph() -> dict[str, set[str]]:
    """module -> the project modules its import statements run. `from pkg import sub` depends on `pkg.sub`,
    `from pkg import name` on `pkg`; importing `a.b.c` runs the packages `a` and `a.b` first, except those
    the importer is itself inside (they are already running)."""
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        targets: set[str] = set()
        for imported, names in _imports(module):
            named = [f"{imported}.{n}" for n in names if f"{imported}.{n}" in MODULES]
            targets.update(named)
            if len(named) < len(names) or not names:
                targets.add(imported)
            for target in list(targets):
                parts = target.split(".")
                targets.update(".".join(parts[:i]) for i in range(1, len(parts)))
        ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        graph[module] = {t for t in targets if t in MODULES and t != module and t not in ancestors}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_imports_that_matter():
    """The checker itself: a lazy import in a function counts, a TYPE_CHECKING one does not."""
    graph = _graph()
    assert "core.embedders.model_graph" in graph["core.embedders.local"]  # imported inside a function
    assert "core.config_types" not in graph["core.embedders"]  # only under TYPE_CHECKING
    assert {"core", "core.config_home"} <= graph["api.cli"]  # `from core import ...`, `from core.x import ...`
    assert "api.mcp" in graph["api.cli_servers"]  # a lazy import
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_core_never_imports_flows_or_api():
    upward = {
        (module, imported)
        for module in MODULES
        if module.split(".")[0] == "core"
        for imported, _ in _imports(module)
        if imported.split(".")[0] in ("flows", "api")
    }
    assert upward == set()


def test_no_module_imports_another_modules_private_names():
    """`from x import _y` across modules (core, flows, api and the bench scripts) means `_y` is not private."""
    files = {**MODULES, **{f"bench.{p.stem}": p for p in sorted((ROOT / "bench").glob("*.py"))}}
    taken = []
    for module, path in files.items():
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                taken += [f"{module}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert taken == []


def test_core_all_is_its_public_surface():
    """As httpx does: `core.__all__` lists exactly the public names `import core` gives, and each exists."""
    names = vars(core).items()
    public = sorted(name for name, v in names if not name.startswith("_") and not isinstance(v, types.ModuleType))
    assert sorted(core.__all__) == public


def test_registries_name_importable_kinds():
    """Every registry entry imports, and each family's `__all__` names something real."""
    from core.registry import load

    for family in ("core.embedders", "core.rerankers", "core.sources"):
        package = importlib.import_module(family)
        assert [name for name in package.__all__ if not hasattr(package, name)] == []
    for registry in (EMBEDDERS, RERANKERS, SOURCES):
        assert [target for target in registry.values() if not callable(load(target))] == []


def test_every_error_shares_the_base_and_keeps_its_standard_one():
    from core import errors

    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(classes) == 13 and all(issubclass(c, errors.MemsiftError) for c in classes)
    assert issubclass(errors.ConfigError, ValueError) and issubclass(errors.SearchError, ValueError)
    assert issubclass(errors.StoreError, RuntimeError) and issubclass(errors.EmbeddingError, RuntimeError)


def _choices(key: str) -> list[str]:
    """The values configuration key `key` accepts, read from the error a bad value gets."""
    with pytest.raises(ConfigError) as refused:
        load_config(workspace=ROOT / "examples" / "workspace", overrides={key: "no-such-choice"}, env={})
    return str(refused.value).split(" is not one of ", 1)[1].split(", ")


def test_choice_lists_have_one_source():
    """The configuration's choices are the registries' names; the copies that cannot import them agree."""
    assert _choices("embedding.provider") == _choices("embedding.fallback") == ["auto", *EMBEDDERS, "none"]
    assert _choices("rerank.provider") == list(RERANKERS)
    assert _choices("search.fusion") == list(ranking.FUSIONS)
    assert _choices("search.mode") == list(config_schema.MODES)
    assert _choices("rerank.dialect") == list(config_schema.DIALECTS)
    assert set(config_schema.DIALECTS) == set(cohere.DEFAULT_PATH)
    assert _choices("embedding.localGraph") == list(local.GRAPHS)
    with pytest.raises(ConfigError, match=f"is not one of {', '.join(SOURCES)}"):
        load_config(workspace=ROOT / "examples" / "workspace", overrides={"sources": ["memory", "x"]}, env={})
    mode = typing.get_type_hints(SearchRequest)["mode"]  # Literal[...] | None
    assert set(typing.get_args(typing.get_args(mode)[0])) == set(config_schema.MODES)
