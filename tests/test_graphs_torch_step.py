"""graphs/torch_step.py --quick: one ppt_dask worker's epoch against a plain PyTorch loop, at 1
and 2 threads, written as a table with the ratios.

The quick mode runs each contender once for 0.1 epoch. The oracle beside the timings: ppt_dask
at one worker steps as the plain loop does (the same module, initial weights, rows and momentum
SGD), so both reach the same test accuracy to float rounding.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from system import needs_module

needs_module("torch", "pip install 'ppt_dask[torch]'")

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.graphs]  # a few minutes: CI's run, not the default suite


@pytest.mark.timeout(1200)
def test_quick_race_writes_epoch_and_step_ratios(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "graphs" / "torch_step.py"), "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=1100, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads((tmp_path / "torch_step.json").read_text())["runs"]
    assert set(runs) == {"plain-1", "ppt-1", "plain-2", "ppt-2"}
    for name, (run,) in runs.items():
        assert run["steps"] == 100 and run["epoch_seconds"] > 0 and run["step_ms"] > 0, (name, run)
    accuracies = [run["test_accuracy"] for (run,) in runs.values()]
    assert min(accuracies) > 0.8 and max(accuracies) - min(accuracies) < 0.005, accuracies
    table = (tmp_path / "torch_step.md").read_text()
    assert "| ppt_dask --workers 1, 2 thread(s) |" in table and "epoch x PyTorch" in table
