"""Contender: ppt_dask as a user runs it, the command line's preset, nothing tuned.

    python graphs/peers/ppt_dask_cli.py SPEC.json RESULT.json

runs ``ppt-dask train mnist --workers P --quiet --json PATH`` as printed in the README
(``python -m ppt_dask.cli``, the same code; the spec's ``args`` after it, when it has some,
as graphs/sync_race.py gives them): the preset's strategy, block, interval,
learning rate and dtype, its own LocalCluster, the data set from ``PPT_DASK_DATA``, and its
stopping rule (a test-set check when the error estimate over the last epoch is at or below
3%; the check's time counts). The race's clock is the run's ``wall_seconds`` (training,
from the first round to the passing check); start-up and shut-down are reported apart.
The race's own (lr, batch) grid does not apply: the preset is what users get. In the
quick mode the race's smaller target and epoch limit are passed on (the data set stays
the whole MNIST).
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import _common as c

PRESET_TARGET = 0.97  # the mnist preset's --target-error 0.03


def _sent(s: dict):
    """What one worker sent a round (median), in the weights' bytes; None where not recorded."""
    sent, weights = s.get("transfer_bytes_per_round"), s.get("weights_bytes")
    return sent / s["workers"] / weights if sent is not None and weights else None


def main():
    spec, out = c.load_spec()
    summary_path = Path(out).with_suffix(".cli.json")
    args = ["train", "mnist", "--workers", str(spec["p"]), "--quiet", *spec.get("args", ())]
    if abs(spec["target"] - PRESET_TARGET) > 1e-9:  # the quick race
        args += ["--target-error", str(round(1 - spec["target"], 12)), "--epochs", str(spec["max_epochs"])]
    cmd = [sys.executable, "-m", "ppt_dask.cli", *args, "--json", str(summary_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=spec["max_seconds"] + 300)
    if proc.returncode:
        sys.exit(f"ppt-dask exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    s = json.loads(summary_path.read_text())
    run = {"reached": bool(s["learned"]) and s["test_accuracy"] >= spec["target"] - 1e-12,
           "seconds": s["wall_seconds"], "epochs": float(s["epochs"]),
           "stopped_because": s.get("stopped_because"), "test_accuracy": s["test_accuracy"],
           "rounds": s["rounds"], "command": " ".join(["ppt-dask", *args]),
           "breakdown": {"percent_not_gradient": s.get("percent_not_gradient"),
                         "median_round_ms": 1e3 * s["median_round_seconds"],
                         "bytes_a_worker_per_weights": _sent(s)},
           "phases": s.get("phases"), "settings": {k: s.get(k) for k in ("strategy", "lr", "momentum", "block")},
           "history": [], "t_ready": time.time() - s["wall_seconds"]}
    c.write_result(out, spec, run, None, [], processes=spec["p"])


if __name__ == "__main__":
    main()
