"""A word typed in one Unicode normal form finds a note written in the other, over HTTP, under both tokenizers.

macOS input and files copied from a Mac give decomposed text (`u` + U+0308); Linux editors compose it. Before
the fix a decomposed `Zürich` was split at the combining mark into `zu` and `rich` (unicode61: no hit), and
under trigram a composed `Genève` never matched a decomposed note.
"""

from __future__ import annotations

import os
import subprocess
import unicodedata
from pathlib import Path

import httpx
import pytest
from conftest import stop_process
from test_api_server import MEMSIFT, wait_for

from api.prefect_server import free_port


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


@pytest.mark.parametrize("tokenizer", ["unicode61", "trigram"])
def test_a_word_in_either_normal_form_finds_the_note(workspace, memsift_home: Path, tokenizer: str) -> None:
    ws = workspace(
        {
            "memory/composed.md": nfc("# Trip\nThe meeting is in Zürich with Herr Müller.\n"),
            "memory/decomposed.md": nfd("# Dessert\nIn Genève we ate crème brûlée for Noël.\n"),
            "memsift.toml": f'[embedding]\nprovider = "none"\n[store.fts]\ntokenizer = "{tokenizer}"\n',
        }
    )
    port = free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ, MEMSIFT_HOME=str(memsift_home)),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(proc, f"{base}/readyz")
        for word, note in [
            (nfd("Zürich"), "memory/composed.md"),
            (nfd("Müller"), "memory/composed.md"),
            (nfc("Genève"), "memory/decomposed.md"),
            (nfc("brûlée"), "memory/decomposed.md"),
            (nfc("Noël"), "memory/decomposed.md"),
        ]:
            r = httpx.post(f"{base}/v1/search", json={"query": word, "minScore": 0}, timeout=60)
            assert r.status_code == 200, r.text
            assert [hit["path"] for hit in r.json()["results"]] == [note], (ascii(word), r.json())
    finally:
        stop_process(proc)
