"""The Dask internals ppt_dask leans on: each behind one module, still applying, and the
package's version bounds agreeing with the range those modules were tested with."""

import re
import tomllib
from pathlib import Path

import pytest
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

import ppt_dask
from ppt_dask.engine.rounds import taskspec

from test_layers import imports_of

PACKAGE = Path(ppt_dask.__file__).resolve().parent
PYPROJECT = PACKAGE.parent / "pyproject.toml"


def _importers(module: str) -> list[str]:
    """The package's files that import ``module`` (or a module inside it)."""
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                  if any(n == module or n.startswith(module + ".") for n in imports_of(path)))


def test_dask_task_spec_is_imported_in_one_module():
    assert _importers("dask._task_spec") == ["engine/rounds/taskspec.py"]


def test_the_task_spec_still_builds_and_runs_a_graph(threads_client):
    """Task, TaskRef, DataNode and parse_input as the round graphs use them, on a real cluster."""
    layers = {
        "a": MaterializedLayer({"a": taskspec.Task("a", sum, taskspec.DataNode(None, [1, 2, 3]))}),
        "b": MaterializedLayer({"b": taskspec.Task("b", lambda x, ys: x + sum(ys), taskspec.TaskRef("a"),
                                                   taskspec.parse_input([taskspec.TaskRef("a")] * 2))}),
    }
    graph = HighLevelGraph(layers, {"a": set(), "b": set()})
    (future,) = threads_client.get(graph, ["b"], sync=False)
    assert future.result(timeout=30) == 6 + 12


def test_the_tested_range_is_the_requirement():
    """pyproject.toml's bounds for dask and distributed are taskspec.TESTED (moved together)."""
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    low, high = taskspec.TESTED
    for name in ("dask[distributed]", "distributed"):
        (spec,) = [d for d in deps if d.startswith(name + ">")]
        match = re.fullmatch(re.escape(name) + r">=([\d.]+),<([\d.]+)", spec)
        assert match, spec
        lo, hi = match.groups()
        assert taskspec._version(lo) == taskspec._version(low) and taskspec._version(hi) == taskspec._version(high)


def test_a_version_outside_the_range_is_named():
    assert taskspec.outside_tested() is None  # the installed one was tested
    assert "older than 2026.3.0" in taskspec.outside_tested("2025.1.0")
    assert "newer than" in taskspec.outside_tested("2026.9.0")
    assert taskspec.outside_tested("2026.8.0") is None


def test_distributed_scheduler_is_imported_in_one_module():
    assert _importers("distributed.scheduler") == ["engine/roundloop.py"]


def test_a_task_no_worker_may_run_fails_with_the_error_the_head_recovers_from():
    """The head takes distributed's NoValidWorkerError of a pinned task (its slot's worker did
    not come back within no-workers-timeout) as a lost worker: the name still imports, and a
    real scheduler still raises it to the client for a task whose resource no worker has."""
    import dask
    import distributed.scheduler

    from ppt_dask.engine import roundloop

    assert roundloop.NoValidWorkerError is distributed.scheduler.NoValidWorkerError
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.no-workers-timeout": "1s"}), \
            LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
        future = client.submit(sum, [1, 2], resources={"ppt-slot-nobody": 1})
        with pytest.raises(roundloop.NoValidWorkerError):
            future.result(timeout=60)
