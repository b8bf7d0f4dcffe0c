"""graphs/peers.py --quick: the race runs end to end and writes numbers.

The quick mode races on a subset of MNIST to a lower target, one setting, one race each;
peers whose packages are absent (torch, mpi4py, dask-ml are benchmark-only) are skipped
with a reason, but ppt_dask and serial numpy must always run and reach the target.
"""

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "graphs" / "peers.py"


# a 30-second race of every contender: in CI's run (-m "slow or not slow"), not the default suite
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("peers")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


@pytest.mark.graphs
def test_quick_writes_table_csv_json_and_chart(quick):
    out, proc = quick
    for name in ("peers.md", "peers.csv", "peers.json", "peers.html"):
        assert (out / name).stat().st_size > 0, name
    table = (out / "peers.md").read_text()
    assert "| ppt_dask average, p = 2 |" in table and "| numpy serial, 1 thread |" in table
    assert "| ppt_dask `ppt-dask train mnist --workers 2` (preset) | its preset |" in table
    assert "Command: `python graphs/peers.py --quick" in table


@pytest.mark.graphs
def test_quick_ppt_dask_and_numpy_reach_the_target_with_numbers(quick):
    out, _ = quick
    data = json.loads((out / "peers.json").read_text())
    rows = {r["name"]: r for r in data["summary"]}
    assert data["reference"] == "ppt_dask-p2-cli"  # what users get: the command line's preset
    cli = rows["ppt_dask-p2-cli"]
    assert cli["reached"] == "1/1" and cli["ratio"] == 1.0 and cli["seconds"] > 0, cli
    assert data["runs"]["ppt_dask-p2-cli"][0]["command"].startswith("ppt-dask train mnist --workers 2 --quiet")
    assert data["runs"]["ppt_dask-p2-cli"][0]["phases"]  # the preset's per-round breakdown came back
    for name in ("ppt_dask-p2-average", "numpy-1thread", "numpy-2threads"):
        r = rows[name]
        assert r["reached"] == "1/1", r
        for key in ("seconds", "startup", "epochs", "samples_per_second", "rss_main", "ratio"):
            assert isinstance(r[key], float) and math.isfinite(r[key]) and r[key] > 0, (name, key, r[key])
    assert rows["ppt_dask-p2-average"]["rss_worker"] > 0
    race = data["runs"]["ppt_dask-p2-average"][0]
    assert race["phases"] and race["breakdown"]["rounds"] >= 1  # the per-round breakdown came back
    with open(out / "peers.csv") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert {r["contender"] for r in csv_rows} >= {"ppt_dask-p2-average", "numpy-1thread"}
    assert all(float(r["seconds"]) > 0 for r in csv_rows if r["reached"] == "True")


@pytest.mark.graphs
def test_quick_says_why_a_peer_was_skipped(quick):
    out, proc = quick
    data = json.loads((out / "peers.json").read_text())
    ran = set(data["runs"])
    for name in ("torch", "torch-ddp", "mpi4py", "dask-ml"):
        assert (name in ran) != (name in data["skipped"]), name  # raced, or skipped with a reason
        if name in data["skipped"]:
            assert f"skip {name}: " in proc.stderr
            assert data["skipped"][name] in (out / "peers.md").read_text()
        else:
            assert data["runs"][name][0]["reached"], data["runs"][name][0]
