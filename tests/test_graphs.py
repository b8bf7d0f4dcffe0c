"""The graphs/ scripts that reproduce the source papers' tables and figures, in --quick mode:
each runs in a subprocess (its own LocalCluster) and writes tables and figures that hold
numbers. The full runs are not part of the suite (graphs/README.md has their commands)."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

import system

pytestmark = pytest.mark.graphs

GRAPHS = Path(__file__).resolve().parent.parent / "graphs"
SCRIPTS = {  # script -> (tables, figures) it writes
    "paper000_parity.py": (("paper000_table1", "paper000_table2"), ("paper000_parity",)),
    "paper001_blocks.py": (("paper001_blocks", "paper001_table7", "paper001_smallest_block"), ("paper001_blocks",)),
    "paper001_convergence.py": (("paper001_convergence",), ("paper001_convergence",)),
    "paper002_softmax.py": (("paper002_softmax",), ("paper002_softmax",)),
    "paper004_digits.py": (("paper004_table1", "paper004_table2"), ("paper004_digits",)),
    "estimator_race.py": (("estimator_race",), ()),
    "table_memory.py": (("table_memory",), ()),
    "async_race.py": (("async_race",), ()),
    "scaling.py": (("scaling",), ()),
    "transports.py": (("transports",), ()),
    "own_cluster.py": (("own_cluster", "own_cluster_memory"), ()),
}
TIMEOUT = 240  # seconds; a --quick run takes well under a minute on an idle 2-core machine


def numbers(row: dict) -> list[float]:
    out = []
    for value in row.values():
        try:
            out.append(float(value))
        except (TypeError, ValueError):
            pass
    return [v for v in out if math.isfinite(v)]


@pytest.mark.slow  # 10-70 s each: the papers' scripts run in CI's full run, not the default suite
@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_quick_run_writes_tables_and_figures(script, tmp_path):
    run = subprocess.run([sys.executable, str(GRAPHS / script), "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=TIMEOUT, cwd=GRAPHS.parent)
    assert run.returncode == 0, run.stderr[-4000:]
    tables, figures = SCRIPTS[script]
    for name in tables:
        with open(tmp_path / f"{name}.csv") as fh:
            rows = list(csv.DictReader(fh))
        assert rows, f"{name}.csv has no rows"
        assert all(numbers(r) for r in rows), f"{name}.csv has a row without numbers"
        text = (tmp_path / f"{name}.md").read_text()
        assert "|---|" in text and "Machine:" in text and "--quick" in text
    for name in figures:
        html = (tmp_path / f"{name}.html").read_text()
        assert "Bokeh" in html and len(html) > 1000
    if script == "estimator_race.py":  # both estimators on both data sets, side by side
        with open(tmp_path / "estimator_race.csv") as fh:
            rows = list(csv.DictReader(fh))
        assert [(r["data"].split()[0], r["estimator"]) for r in rows] == [
            ("MNIST", "PPTClassifier()"), ("MNIST", "MLPClassifier()"),
            ("digits", "PPTClassifier()"), ("digits", "MLPClassifier()")]
        assert all(float(r["test accuracy %"]) > 85 and int(r["epochs"]) >= 1 for r in rows)
    if script == "table_memory.py":  # the head does not grow with the table (it never holds the rows)
        with open(tmp_path / "table_memory.csv") as fh:
            small, large = list(csv.DictReader(fh))
        assert int(large["rows"]) == 100 * int(small["rows"])
        grown = float(large["head peak RSS MiB"]) - float(small["head peak RSS MiB"])
        assert grown < 0.5 * float(large["file MiB"]), (small, large)
    if script == "own_cluster.py":  # on the plain cluster the loops raised the nanny's malloc thresholds
        with open(tmp_path / "own_cluster.csv") as fh:
            (race,) = list(csv.DictReader(fh))
        assert "MALLOC_TRIM_THRESHOLD_=65536" in race["plain worker settings"], race
        with open(tmp_path / "own_cluster_memory.csv") as fh:
            assert [int(r["rounds"]) for r in csv.DictReader(fh)] == [600, 600]
    if script == "async_race.py":  # from the command line: async, with a worker killed, and synchronous
        with open(tmp_path / "async_race.csv") as fh:
            rows = {r["contender"]: r for r in csv.DictReader(fh)}
        assert len(rows) == 4 and all(r["reached 97%"] == "1/1" for r in rows.values()), rows
        killed = [r for name, r in rows.items() if "SIGKILLed" in name]
        assert len(killed) == 1 and int(killed[0]["recoveries"]) == 1  # the run went on


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_usage_is_documented(script):
    """Each script has the mpi4py-demo shape: usage first, --quick among it, and --help."""
    text = (GRAPHS / script).read_text()
    assert text.startswith('"""') and "Usage::" in text and "--quick" in text
    run = subprocess.run([sys.executable, str(GRAPHS / script), "--help"], capture_output=True, text=True,
                         timeout=60, cwd=GRAPHS.parent)
    assert run.returncode == 0 and "--quick" in run.stdout


@pytest.mark.parametrize("script", sorted(p.name for p in GRAPHS.glob("*.py") if "__main__" in p.read_text()))
def test_every_script_answers_help(script):
    """Every benchmark script prints its usage (argparse formats help strings with %, so a
    help text with a bare percent sign fails only when someone asks for --help)."""
    run = subprocess.run([sys.executable, str(GRAPHS / script), "--help"], capture_output=True, text=True,
                         timeout=60, cwd=GRAPHS.parent)
    assert run.returncode == 0 and run.stdout.startswith("usage:"), run.stderr[-2000:]


def _quick_in_namespaces(script: str, tmp_path, timeout: float) -> None:
    """``script --quick`` into ``tmp_path``; skipped (failed with CI set) with the script's reason
    where network namespaces or rate limits cannot be made here."""
    run = subprocess.run([sys.executable, str(GRAPHS / script), "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=timeout, cwd=GRAPHS.parent)
    assert run.returncode == 0, run.stderr[-3000:]
    if run.stdout.startswith("skipped:"):
        system.missing(run.stdout.strip())


@pytest.mark.slow  # 80-90 s: in CI's run, not the default suite
@pytest.mark.timeout(400)
@pytest.mark.xfail(reason="the run-time model's exchange terms predate the loops' shared-memory flags and the "
                          "head that reads by time (rounds now come faster than predicted: 33.6 ms measured, 45.0 "
                          "predicted at 100mbit, block 1000); perf/ is to be re-fitted (issue 60 left open)",
                   strict=False)
def test_model_under_slower_links_quick(tmp_path):
    """validate_links.py: workers in network namespaces behind rate-limited veth pairs.

    Skips, with the script's reason, where namespaces or tc qdiscs are not allowed (not
    root, no iproute2, no tbf in the kernel). Checks the prediction against the rounds and
    the fitted bandwidth term against the link's floor, and that nothing is left behind."""
    _quick_in_namespaces("validate_links.py", tmp_path, timeout=360)
    with open(tmp_path / "validate_links.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["link"] for r in rows} == {"100mbit"} and len(rows) == 2
    for r in rows:
        measured, predicted = float(r["measured_ms"]), float(r["predicted_ms"])
        assert abs(predicted / measured - 1) < 0.25, r  # the model holds on a slow link
        # one tree level moves 55050 float64 weights twice at 100 Mbit/s: at least 1.28 us
        # per weight, and not wildly more
        assert 1.28 * 0.9 < float(r["Tw_us_per_weight"]) < 1.28 * 2, r
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "pptl-" not in left


@pytest.mark.hosts  # 3-4 minutes: test hosts, as tests/test_hosts.py's (in CI's run, not the default suite)
@pytest.mark.timeout(600)
def test_across_hosts_quick(tmp_path):
    """across_hosts.py: MNIST to 97% (the preset and --strategy block) over ``ppt-dask cluster
    ssh`` on three test hosts at 1 Gbit/s and 100 Mbit/s and on a LocalCluster (--quick: no
    calibration, so no model column; the full run has it).

    Skips with the script's reason where the hosts cannot be made. Each contender reached 97%,
    its exchange share is a share, and no host is left."""
    _quick_in_namespaces("across_hosts.py", tmp_path, timeout=540)
    with open(tmp_path / "across_hosts.csv") as fh:
        rows = {(r["cluster"], r["command"]): r for r in csv.DictReader(fh)}
    assert sorted(rows) == sorted((c, f"`ppt-dask train mnist{s}`") for c in ("3 hosts, 1 Gbit/s",
                                  "3 hosts, 100 Mbit/s", "LocalCluster, 3 workers") for s in ("", " --strategy block"))
    for r in rows.values():
        assert r["reached 97%"] == "1/1" and 0 <= float(r["exchange % (median)"]) <= 100, r
        assert float(r["seconds (median)"]) > 0 and float(r["round ms (median)"]) > 0, r
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    assert "ppth-" not in left, left

