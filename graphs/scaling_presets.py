"""The presets as workers are added: epochs and time to the target at p = 1, 2, 4, 8.

    python graphs/scaling_presets.py            # 3 repeats of the MLP, interleaved; the CNN once
    python graphs/scaling_presets.py --quick    # one repeat at p = 1 and 8, no CNN

``ppt-dask train mnist --workers P`` as a user types it (784-64-64-10, to 97% test accuracy,
the preset's settings for P shards: ppt_dask/cli/presets.py, ``for_shards``), and
``ppt-dask train mnist --model graphs.small_cnn:small_cnn --workers P --epochs 1`` (a module of
one's own, its test accuracy after one epoch). Epochs to the target are the same on any machine
for a seed (the rounds are bitwise those of the serial path); the wall time (training, start-up
apart) is this machine's, so each repeat runs every P once, in turn, and the table shows
medians. The settings each P used come from the run's own summary (``--json``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402

DEFAULTS = dict(REPEATS=3, WORKERS=(1, 2, 4, 8), CNN=True, CNN_WORKERS=(1, 2, 4, 8))
QUICK = dict(REPEATS=1, WORKERS=(1, 8), CNN=False)
SETTINGS = ("block", "interval", "lr", "momentum", "pull", "compensate", "ema")


def train(folder: Path, *flags: str) -> dict:
    """One ``ppt-dask train mnist`` (from the repository's root, so ``graphs.small_cnn`` imports);
    its summary."""
    out = folder / "summary.json"
    proc = subprocess.run([sys.executable, "-m", "ppt_dask.cli", "train", "mnist", *flags, "--quiet",
                           "--json", str(out)], cwd=HERE.parent, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"ppt-dask train mnist {' '.join(flags)}: {proc.stderr.strip()[-400:]}")
    return json.loads(out.read_text())


def row(p: int, runs: list[dict], what: str) -> dict:
    first = runs[0]
    return {"network": what, "p": p, "epochs": statistics.median(r["epochs"] for r in runs),
            "rounds": first["rounds"], "seconds": statistics.median(r["wall_seconds"] for r in runs),
            "test accuracy": statistics.median(r["test_accuracy"] for r in runs), "repeats": len(runs),
            **{k: first.get(k) for k in SETTINGS}}


def main() -> None:
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    runs: dict = {p: [] for p in args.workers}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for p in args.workers:
                runs[p].append(train(Path(tmp), "--workers", str(p)))
                print(f"repeat {repeat} p={p}: {runs[p][-1]['epochs']:.3g} epochs, "
                      f"{runs[p][-1]['wall_seconds']:.2f} s", file=sys.stderr)
        rows = [row(p, runs[p], "784-64-64-10, to 97%") for p in args.workers]
        if args.cnn:
            for p in args.cnn_workers:
                rows.append(row(p, [train(Path(tmp), "--workers", str(p), "--model", "graphs.small_cnn:small_cnn",
                                          "--epochs", "1")], "small_cnn, 1 epoch"))
    base = {r["network"]: r for r in rows if r["p"] == 1}
    for r in rows:
        if r["network"] in base:
            r["epochs / p = 1's"] = r["epochs"] / base[r["network"]]["epochs"]
            r["time / p = 1's"] = r["seconds"] / base[r["network"]]["seconds"]
    common.write_table(args.out, "scaling_presets", rows, title="The presets at p = 1, 2, 4, 8 workers",
                       columns=["network", "p", "epochs", "epochs / p = 1's", "rounds", "seconds", "time / p = 1's",
                                "test accuracy", "repeats", *SETTINGS],
                       notes=["seconds: training (the command line's wall time, start-up apart), median of the "
                              "repeats; epochs and rounds are the same in every repeat (a seeded run)"])


if __name__ == "__main__":
    main()
