"""The embedding provider down for a whole sync (a real HTTP server on 127.0.0.1 answering 503).

With no fallback configured, an incremental sync still indexes the new text for keyword search, records that
its vectors are pending, and says so in its report and in `status`; searches answer from the keyword leg and
say why; once the provider is back, the next sync embeds exactly the text that waited. A provider that is
already down when a process starts (its start-up probe fails) gives the same keyword-only sync; a rebuild,
which needs the provider for every chunk, stops with the reason and leaves the index as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from index_checks import chunks_without_vectors, content

from api.cli import main
from core import MemoryIndex, load_config
from core.config import Config
from tests.fake_provider import FakeProvider

NOTES = {
    "MEMORY.md": "# Memory\n- Dana drinks a flat white every morning.\n",
    "memory/2026-11-24.md": "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL.\n",
}
NEW_NOTE = "# 2026-11-30\n- The zeppelin hangar lease was signed on Friday.\n"


class Switchable(FakeProvider):
    """The fake provider with an off switch: every request answers 503 while `down`."""

    down = False

    def __post_init__(self) -> None:
        self.fault = lambda n: "503" if self.down else None
        super().__post_init__()


@pytest.fixture
def provider() -> Iterator[Switchable]:
    server = Switchable()
    yield server
    server.close()


@pytest.fixture
def config(workspace, provider: Switchable) -> Config:
    (workspace(NOTES) / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 0\n'
    )
    return load_config(workspace=workspace(NOTES))


def test_a_sync_with_the_provider_down_indexes_keywords_and_the_next_one_completes_the_vectors(
    config: Config, provider: Switchable, open_index
) -> None:
    index = open_index(config)  # a long-lived process (the API server): its embedder started while up
    index.sync()
    (config.workspace / "memory" / "2026-11-30.md").write_text(NEW_NOTE)

    provider.down = True
    report = index.sync()
    assert report.vectorsPending and report.added == 1 and report.chunksWritten == 1
    assert any("503" in w and "keyword search only" in w for w in report.warnings)
    answer = index.search("zeppelin hangar lease")
    assert answer.mode == "keyword" and "503" in answer.degraded
    assert answer.results[0].path == "memory/2026-11-30.md"  # the new note, found while the provider is down
    status = index.status()
    assert "503" in status["vectorsPending"]["reason"] and status["dirty"] and "503" in status["dirtyReason"]
    assert chunks_without_vectors(config.db_path) == 1

    provider.down = False
    served = len(provider.embedded)
    report = index.sync()
    assert not report.vectorsPending and report.chunksEmbedded == 1
    assert provider.embedded[served:] == ["# 2026-11-30\n- The zeppelin hangar lease was signed on Friday."]
    assert chunks_without_vectors(config.db_path) == 0
    status = index.status()
    assert status["vectorsPending"] is None and not status["dirty"]
    answer = index.search("zeppelin hangar lease", mode="vector")
    assert answer.degraded is None and answer.results[0].path == "memory/2026-11-30.md"
    assert [path for path, _ in content(config.db_path)[1]] == sorted([*NOTES, "memory/2026-11-30.md"])


def test_a_provider_down_when_the_process_starts_gives_the_same_keyword_only_sync(
    config: Config, provider: Switchable, capsys
) -> None:
    """`memsift index` in a new process: the provider's start-up probe fails, the index it built goes on."""
    with MemoryIndex(config) as index:
        index.sync()
    before = content(config.db_path)
    (config.workspace / "memory" / "2026-11-30.md").write_text(NEW_NOTE)
    provider.down = True
    cli = ["--workspace", str(config.workspace)]

    capsys.readouterr()
    assert main([*cli, "index", "--no-prefect"]) == 0
    assert "503" in capsys.readouterr().err  # the warning names the reason
    assert main([*cli, "search", "zeppelin hangar", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["mode"] == "keyword" and "503" in answer["degraded"]
    assert answer["results"][0]["path"] == "memory/2026-11-30.md"
    assert main([*cli, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert "503" in status["embedderError"] and "503" in status["vectorsPending"]["reason"] and status["dirty"]
    assert main([*cli, "index", "--no-prefect", "--force"]) == 1  # a rebuild needs the provider: it stops
    assert "503" in capsys.readouterr().err
    assert len(content(config.db_path)[1]) == len(before[1]) + 1  # and the index stays as it was

    provider.down = False
    assert main([*cli, "index", "--no-prefect", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunksEmbedded"] == 1  # exactly the text that waited
    assert chunks_without_vectors(config.db_path) == 0
    assert main([*cli, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["vectorsPending"] is None and status["embedderError"] is None and not status["dirty"]
