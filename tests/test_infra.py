"""infra/prefect.yaml: it is what `prefect deploy` reads, its entrypoints are memsift's flows, and its parameters
are the flows' own, so a deployment made from it runs the same code with the same arguments as `memsift up`."""

from __future__ import annotations

import importlib
import inspect
from datetime import timedelta
from pathlib import Path

import yaml
from prefect import Flow
from prefect.cli.deploy._models import PrefectYamlModel

PREFECT_YAML = Path(__file__).resolve().parent.parent / "infra" / "prefect.yaml"


def _flow(entrypoint: str) -> Flow:
    module, _, name = entrypoint.rpartition(".")
    flow = getattr(importlib.import_module(module), name)
    assert isinstance(flow, Flow), entrypoint
    return flow


def test_prefect_yaml_deploys_the_sync_and_rebuild_flows() -> None:
    document = yaml.safe_load(PREFECT_YAML.read_text())
    model = PrefectYamlModel.model_validate(document)  # the model `prefect deploy` validates the file with
    assert model.pull == []  # module-path entrypoints: memsift is installed where the worker runs, nothing to pull

    names = set()
    for deployment in model.deployments:
        flow = _flow(deployment.entrypoint)
        names.add(f"{flow.name}/{deployment.name}")
        signature = inspect.signature(flow.fn)
        assert set(deployment.parameters) <= set(signature.parameters), deployment.entrypoint
        required = {n for n, p in signature.parameters.items() if p.default is inspect.Parameter.empty}
        assert required <= set(deployment.parameters)
        assert deployment.parameters["agent"] == "main"
        assert deployment.work_pool is not None and deployment.work_pool.name == "memsift"
        assert "MEMSIFT_HOME" in deployment.work_pool.job_variables["env"]
        if flow.name == "memsift-sync":
            assert [s.interval for s in deployment.schedules] == [timedelta(minutes=30)]
        else:
            assert not deployment.schedules
    assert names == {"memsift-sync/main", "memsift-rebuild/main"}
