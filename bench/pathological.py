"""Pathological notes for `memsift index`: generate them, and dump the chunk rows the indexer makes of them.

    python bench/pathological.py make DIR [CASE...]       one workspace per case under DIR/<case>/
    python bench/pathological.py rows OUT ROOT...          OUT/<root name>.jsonl: path, start, end, text, hash

`rows` chunks every `.md` under each root as a sync does (core.sources.base.read_memory_file, then
core.chunking.chunk_text at the default 400/80) and prints the seconds spent chunking: run it before and after
a change to the chunker and compare the files byte for byte (`cmp`). Wall time and peak RSS of the real
command: `/usr/bin/time -v memsift --workspace DIR/<case> index --no-prefect` (bench/README.md, "Pathological
inputs").
"""

from __future__ import annotations

import base64
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from core.chunking import chunk_text
from core.sources.base import read_memory_file

WORDS = "the deploy failed because the certificate expired and nobody renewed it before friday so dana rolled back"
CASES: dict[str, Callable[[Path, random.Random], None]] = {}


def case(fn: Callable[[Path, random.Random], None]) -> Callable[[Path, random.Random], None]:
    CASES[fn.__name__] = fn
    return fn


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS.split()) for _ in range(n))


def note(root: Path, text: str | bytes, name: str = "memory/notes.md") -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


@case
def longline(root: Path, rng: random.Random) -> None:  # one 2 MB line
    note(root, words(rng, 2_000_000 // 6)[:2_000_000] + "\n")


@case
def big20(root: Path, rng: random.Random) -> None:  # 20 MB of normal lines: over the 8 MiB limit, skipped
    note(root, "".join(f"{i}: {words(rng, 12)}\n" for i in range(300_000)))


@case
def big7(root: Path, rng: random.Random) -> None:  # 7.9 MB of normal lines: the biggest note that is indexed
    note(root, "".join(f"{i}: {words(rng, 12)}\n" for i in range(100_000)))


@case
def oneword(root: Path, rng: random.Random) -> None:
    note(root, "".join(rng.choice(WORDS.split()) + "\n" for _ in range(100_000)))


@case
def blank(root: Path, rng: random.Random) -> None:
    note(root, "\n" * 100_000)
    note(root, " \t \n" * 50_000, "memory/ws.md")


@case
def cjk(root: Path, rng: random.Random) -> None:  # one line of 200,000 CJK characters
    note(root, "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(200_000)) + "\n")


@case
def combining(root: Path, rng: random.Random) -> None:  # 200,000 letters with 1-3 combining marks, no space
    note(root, "".join("e" + "\u0301\u0308\u0323"[: rng.randrange(1, 4)] for _ in range(200_000)) + "\n")


@case
def marksonly(root: Path, rng: random.Random) -> None:
    note(root, "\u0301" * 200_000 + "\n")


@case
def emoji(root: Path, rng: random.Random) -> None:  # ZWJ sequences, skin tones, flags
    seq = (
        "\U0001f469\U0001f3fd\u200d\U0001f4bb\U0001f468\u200d\U0001f469\u200d\U0001f467\U0001f3f3\ufe0f\u200d\U0001f308"
    )
    note(
        root,
        " ".join([seq] * 20_000)
        + "\n"
        + "\U0001f469\u200d\u2764\ufe0f\u200d\U0001f48b\u200d\U0001f468" * 20_000
        + "\n",
    )


@case
def table(root: Path, rng: random.Random) -> None:
    rows = "".join(f"| {i} | {words(rng, 2)} | {i * 7} | {words(rng, 5)} |\n" for i in range(5000))
    note(root, "| id | name | value | note |\n|---|---|---|---|\n" + rows)


@case
def b64(root: Path, rng: random.Random) -> None:
    note(root, "# blob\n\n" + base64.b64encode(rng.randbytes(1_500_000)).decode() + "\n\nafter the blob\n")


@case
def headings(root: Path, rng: random.Random) -> None:
    note(root, "".join(f"## Heading {i} {words(rng, 3)}\n" for i in range(10_000)))


@case
def nul(root: Path, rng: random.Random) -> None:  # a stray NUL, invalid UTF-8, a binary file, a good note
    note(root, b"line one ok\n" * 500 + b"bad \x00 here\n" + b"more text\n" * 500)
    note(root, b"valid start\n\xff\xfe broken \xc3\x28 bytes\nend line\n", "memory/bad-utf8.md")
    note(root, b"\x00\x01\x02" * 10000, "memory/binary.md")
    note(root, "a good note about certificates\n", "memory/good.md")


@case
def deep(root: Path, rng: random.Random) -> None:  # 50,000 tiny files, 50 chains of folders down to 30 deep
    for i in range(50_000):
        folders = "".join(f"c{i % 50}l{k}/" for k in range(i % 30))
        note(root, f"tiny note {i} {words(rng, 4)}\n", f"memory/{folders}n{i}.md")


def rows(out: Path, roots: list[Path]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for root in roots:
        seconds, count = 0.0, 0
        with open(out / f"{root.name}.jsonl", "w", encoding="utf-8") as fh:
            for path in sorted(root.rglob("*.md")):
                rel = str(path.relative_to(root))
                _, text, problem = read_memory_file(path)
                if text is None:
                    fh.write(json.dumps({"path": rel, "skipped": problem}) + "\n")
                    continue
                started = time.perf_counter()
                chunks = chunk_text(text)
                seconds += time.perf_counter() - started
                for c in chunks:
                    fh.write(json.dumps([rel, c.start_line, c.end_line, c.text, c.hash], ensure_ascii=False) + "\n")
                count += len(chunks)
        print(f"{root.name}\t{count} chunks\t{seconds:.2f} s chunking", flush=True)


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "make":
        for name in argv[2:] or list(CASES):
            CASES[name](Path(argv[1]) / name, random.Random(40))
            print(name, flush=True)
    elif len(argv) >= 3 and argv[0] == "rows":
        rows(Path(argv[1]), [Path(p) for p in argv[2:]])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
