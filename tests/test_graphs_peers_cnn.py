"""graphs/peers_cnn.py --quick: LeNet-5 raced one epoch by every contender, numbers written.

The quick mode races each contender once to 90% test accuracy (one epoch of LeNet-5 gets
there); the ratios and the per-round breakdown of the ppt_dask runs come back.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from system import needs_module

needs_module("torch", "pip install 'ppt_dask[torch]'")

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.graphs]  # a few minutes of LeNet-5: CI's run, not the default suite


@pytest.mark.timeout(1800)
def test_quick_races_every_contender_and_writes_ratios(tmp_path):
    text = (ROOT / "graphs" / "peers_cnn.py").read_text()
    assert text.startswith('"""') and "Usage::" in text and "--quick" in text
    proc = subprocess.run([sys.executable, str(ROOT / "graphs" / "peers_cnn.py"), "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=1700, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "peers_cnn.json").read_text())
    assert set(data["runs"]) == {"ppt_dask-p2", "ppt_dask-p1", "ppt_dask-p2-sync", "torch-ddp", "torch"}
    for name, runs in data["runs"].items():
        # one epoch: exactly one for the peers, whole rounds for ppt_dask (24 local-SGD rounds of 2,560 rows)
        assert runs[0]["reached"] and runs[0]["seconds"] > 0 and 1 <= runs[0]["epochs"] < 1.05, (name, runs[0])
    assert data["runs"]["ppt_dask-p2"][0]["phases"]  # the per-round breakdown came back
    table = (tmp_path / "peers_cnn.md").read_text()
    assert "| PyTorch DDP gloo, 2 processes x 1 thread |" in table and "median round" in table
