"""Why `memsift up` starts a configuration change's rebuild itself rather than through a Prefect automation.

Times, on a fresh local Prefect server, an automation (a `memsift.config.applied` event whose trigger runs a
deployment) from the event's emission to the flow run's creation, against `run_deployment`'s own call, which
is what `up` does (flows/reload.py). A first round, not counted, lets the triggers service load the automation.

    .venv/bin/python bench/automation_latency.py --rounds 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
HOME = Path(tempfile.mkdtemp(prefix="memsift-automation-"))
os.environ.update(PREFECT_HOME=str(HOME / "client"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
os.environ.pop("PREFECT_API_URL", None)

from harness import environment, save_result  # noqa: E402

from api.prefect_server import PrefectServer, free_port  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    server = PrefectServer(HOME / "server", free_port(), env={**os.environ, "PREFECT_UI_ENABLED": "false"})
    try:
        server.wait_healthy(300)
        os.environ["PREFECT_API_URL"] = server.api_url  # before Prefect is imported: it reads settings once
        times = measure(args.rounds + 1)
    finally:
        server.stop()
    auto, direct = times["automation"][1:], times["run_deployment"][1:]
    print(f"automation: median {statistics.median(auto):.2f} s, max {max(auto):.2f} s")
    print(f"run_deployment: median {statistics.median(direct):.3f} s, max {max(direct):.3f} s")
    doc = {"args": vars(args), "seconds": times, "environment": environment()}
    print(f"wrote {save_result('automation-latency', doc)}")
    return 0


def measure(rounds: int) -> dict[str, list[float]]:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterDeploymentId
    from prefect.deployments import run_deployment
    from prefect.events import emit_event
    from prefect.events.actions import RunDeployment
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

    @flow(name="noop")
    def noop(reason: str = "") -> None:
        """Never run: only its runs' creation is timed."""

    deployment_id = noop.to_deployment(name="rebuild").apply()
    times: dict[str, list[float]] = {"automation": [], "run_deployment": []}
    with get_client(sync_client=True) as client:
        client.create_automation(
            AutomationCore(
                name="rebuild-on-config-change",
                trigger=EventTrigger(
                    expect={"memsift.config.applied"},
                    match={"prefect.resource.id": "memsift.config.*"},
                    posture=Posture.Reactive,
                    threshold=1,
                ),
                actions=[RunDeployment(source="selected", deployment_id=deployment_id)],
            )
        )
        runs = FlowRunFilter(deployment_id=FlowRunFilterDeploymentId(any_=[deployment_id]))
        for i in range(rounds):
            before = len(client.read_flow_runs(flow_run_filter=runs))
            start = time.monotonic()
            emit_event(event="memsift.config.applied", resource={"prefect.resource.id": f"memsift.config.{i}"})
            while len(client.read_flow_runs(flow_run_filter=runs)) == before:
                if time.monotonic() - start > 120:
                    raise SystemExit("the automation started no run within 120 s")
                time.sleep(0.05)
            times["automation"].append(time.monotonic() - start)
            start = time.monotonic()
            run_deployment(deployment_id, timeout=0, as_subflow=False)
            times["run_deployment"].append(time.monotonic() - start)
    return times


if __name__ == "__main__":
    sys.exit(main())
