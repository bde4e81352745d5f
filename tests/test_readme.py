"""The README's commands (issue 14, point 8): every `memsift` command in its shell blocks parses with the
CLI's own parser, names only files a fresh clone has, and `make run`'s last words are the README's line."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from api import arguments

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"


def shell_lines() -> list[list[str]]:
    """The commands of the README's ```sh blocks as words (comments dropped), `a && b` as two."""
    commands = []
    for block in re.findall(r"^```(?:sh|bash|shell)\n(.*?)^```", README.read_text(), re.M | re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                commands.append(words[:cut])
                words = words[cut + 1 :]
    return [c for c in commands if c]


def memsift_commands() -> list[list[str]]:
    found = []
    for words in shell_lines():
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value memsift ...
            words = words[1:]
        if words and words[0] == "memsift":
            found.append(words[1:])
    return found


def test_the_readme_has_memsift_commands() -> None:
    commands = memsift_commands()
    assert len(commands) >= 8
    assert ["--workspace", "examples/workspace", "index"] in commands


@pytest.mark.parametrize("argv", memsift_commands(), ids=" ".join)
def test_each_memsift_command_parses(argv: list[str]) -> None:
    args = arguments.parser().parse_args(argv)  # a usage error would exit 2
    if args.workspace:  # the README's commands run in a fresh clone: the folders they name are in it
        assert (ROOT / args.workspace).is_dir(), args.workspace
    if getattr(args, "path", None):
        assert (ROOT / args.workspace / args.path).is_file(), args.path


def test_make_run_prints_the_readme_line(tmp_path: Path) -> None:
    """`make run` ends with the line that puts memsift on PATH with make's MEMSIFT_HOME; the README shows it."""
    readme = [line for line in README.read_text().splitlines() if line.startswith(". .venv/bin/activate")]
    readme = [line.split("   #")[0] for line in readme]
    assert readme == [". .venv/bin/activate && export MEMSIFT_HOME=$PWD/.memsift-home"]
    dry = subprocess.run(
        ["make", "-n", "run", f"MEMSIFT_HOME={ROOT}/.memsift-home"], cwd=ROOT, capture_output=True, text=True
    )
    printed = readme[0].replace("$PWD", str(ROOT))
    assert f'echo "  {printed}"' in dry.stdout, dry.stdout
    assert "export PREFECT_HOME" not in dry.stdout  # the Makefile exports it to every recipe
    # what a recipe's shell sees: Prefect's files inside make's home, so `make clean` removes them
    shown = subprocess.run(
        ["make", "-s", "--eval", "show-env: ; @echo $$MEMSIFT_HOME $$PREFECT_HOME", "show-env"],
        cwd=ROOT, capture_output=True, text=True, env={k: v for k, v in os.environ.items() if "_HOME" not in k},
    ).stdout  # fmt: skip
    assert shown.split() == [f"{ROOT}/.memsift-home", f"{ROOT}/.memsift-home/prefect"]
    clean = subprocess.run(["make", "-n", "clean"], cwd=ROOT, capture_output=True, text=True).stdout
    assert ".memsift-home" in clean and ".venv" in clean


def test_the_human_output_example_is_a_hit_of_the_example_workspace() -> None:
    """The README's sample hit names a note of examples/workspace with the range a search gives it: each note
    there is one chunk, its lines 1 to the last (it showed 1-14 of an 11-line note)."""
    block = re.search(r"^```\n(\d\.\d{3} (\S+):(\d+)-(\d+)\n(.*?)\n)```", README.read_text(), re.M | re.S)
    assert block, "the README shows no human search output"
    path, start, end = block[2], int(block[3]), int(block[4])
    lines = (ROOT / "examples" / "workspace" / path).read_text(encoding="utf-8").splitlines()
    assert (start, end) == (1, len(lines))
    assert block[5].splitlines()[0] == lines[0]
    assert block[5].splitlines()[-1] == f"Source: {path}#L{start}-L{end}"
