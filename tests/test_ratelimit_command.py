"""`memsift ratelimit`: the shared embedding limit, from the configuration, on the server PREFECT_API_URL names."""

from __future__ import annotations

import json

from api.cli import main


def test_ratelimit_creates_the_configured_limit(prefect_harness, workspace, capsys, monkeypatch) -> None:
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())
    ws = workspace({"MEMORY.md": "x\n", "memsift.toml": "[embedding]\nrequestsPerMinute = 180\n"})
    assert main(["--workspace", str(ws), "ratelimit", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"name": "memsift-embedding", "limit": 3, "slotDecayPerSecond": 3.0}
    monkeypatch.setenv("MEMSIFT_EMBEDDING_REQUESTS_PER_MINUTE", "30")
    assert main(["--workspace", str(ws), "ratelimit"]) == 0
    assert capsys.readouterr().out == "memsift-embedding: limit 1, 0.5 slots freed per second\n"


def test_ratelimit_needs_a_server(workspace, capsys, monkeypatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert main(["--workspace", str(workspace({"MEMORY.md": "x\n"})), "ratelimit"]) == 1
    assert capsys.readouterr().err == (
        "memsift: error: PREFECT_API_URL: not set; the limit lives on a Prefect server (`memsift up` creates it)\n"
    )
