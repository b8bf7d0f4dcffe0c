"""The seeds' synchronous SGD by block from the command line against a plain MPI program.

    python graphs/sync_race.py            # 3 repeats of every contender, interleaved
    python graphs/sync_race.py --quick    # one repeat, a subset of MNIST to 90%

Seed 001's learning by block on MNIST (784-64-64-10, tanh, softmax, float32, momentum 0.9),
the same batch and learning rate on both sides, to 97% test accuracy, in the same run:

* a hand-written mpi4py program (graphs/peers/mpi_allreduce.py): 2 ranks, each computing the
  gradient sum over its half of the batch, one ``Allreduce``, the same momentum step;
* ``ppt-dask train mnist --workers P --strategy block --block B --lr LR --momentum 0.9 --dtype
  float32`` as a user types it (graphs/peers/ppt_dask_cli.py), on 2 and on 1 worker: its default
  exchange (streamed rounds), its stopping rule (the check's time counts).

Block 200 at lr 0.1 (the issue's race: 27x MPI's time on 2026-11-26 before streamed rounds) and
block 1000 at lr 0.5 (the ``--strategy block`` preset: is a second worker faster than one?). The
clock of each is its training time (start-up apart); each repeat runs every contender once,
in turn, and ratios are taken repeat by repeat, then the median. The contenders check at
different times (MPI after every epoch, ppt_dask by its stopping rule): the epochs are shown.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peers  # noqa: E402

import common  # noqa: E402

DEFAULTS = dict(REPEATS=3, SETTINGS=("200:0.1", "1000:0.5"), N_TRAIN=60000, N_TEST=10000, TARGET=0.97,
                MAX_EPOCHS=30, MAX_SECONDS=300.0)
QUICK = dict(REPEATS=1, SETTINGS=("200:0.1",), N_TRAIN=6000, N_TEST=2000, TARGET=0.88, MAX_EPOCHS=10,
             MAX_SECONDS=60.0)


def contenders(block: int, lr: float) -> list[dict]:
    cli = ["--strategy", "block", "--block", str(block), "--lr", str(lr), "--momentum", "0.9", "--dtype", "float32"]
    return [dict(name=f"mpi4py-b{block}", label=f"mpi4py Allreduce, 2 ranks, batch {block}, lr {lr}",
                 script="mpi_allreduce.py", threads=1, launcher=("mpiexec", "-n", "2"), needs=("mpi4py",)),
            *(dict(name=f"ppt_dask-p{p}-b{block}", threads=1,
                   label=f"ppt-dask train mnist --workers {p} " + " ".join(cli),
                   script="ppt_dask_cli.py", spec=dict(p=p, args=cli)) for p in (2, 1))]


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    cfg = dict(N_TRAIN=args.n_train, N_TEST=args.n_test, TARGET=args.target, MAX_EPOCHS=args.max_epochs,
               STARTUP_TIMEOUT=peers.STARTUP_TIMEOUT)
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        source = peers.prepare(cfg, work)
        for setting in args.settings:
            block, lr = int(setting.split(":")[0]), float(setting.split(":")[1])
            cs = [c for c in contenders(block, lr) if peers.missing(c) is None]
            runs: dict = {c["name"]: [] for c in cs}
            for repeat in range(args.repeats):
                order = cs[repeat % len(cs):] + cs[:repeat % len(cs)]
                for c in order:
                    r = peers.race(c, lr, block, cfg, work, args.max_seconds, f"{c['name']}-{repeat}")
                    runs[c["name"]].append(r)
                    print(f"repeat {repeat + 1} {c['name']}: {peers.say(r)}", flush=True)
            lines += table(cs, runs, block, lr)
    text = "\n".join([f"Time to {args.target:.0%} MNIST test accuracy ({source}); {args.repeats} repeat(s), "
                      f"contenders interleaved; {common.machine()}.", "", *lines])
    print(text)
    if not args.quick:
        (args.out / "sync_race.md").write_text(text + "\n")


def table(cs, runs, block: int, lr: float) -> list[str]:
    mpi = runs[cs[0]["name"]] if cs[0]["name"].startswith("mpi4py") else None
    out = ["", f"Block {block}, lr {lr}, momentum 0.9:", "",
           "| contender | median s | epochs | ratio to mpi4py (median of repeats) |", "|---|---|---|---|"]
    for c in cs:
        mine = runs[c["name"]]
        ok = [r["seconds"] for r in mine if r.get("reached")]
        epochs = [r["epochs"] for r in mine if r.get("reached")]
        ratios = [r["seconds"] / m["seconds"] for r, m in zip(mine, mpi or []) if r.get("reached") and m.get("reached")]
        out.append(f"| {c['label']} | {statistics.median(ok) if ok else float('nan'):.2f} | "
                   f"{statistics.median(epochs) if epochs else float('nan'):.3g} | "
                   f"{statistics.median(ratios) if ratios else float('nan'):.2f} |")
    two, one = (runs.get(f"ppt_dask-p{p}-b{block}", []) for p in (2, 1))
    pair = [a["seconds"] / b["seconds"] for a, b in zip(two, one) if a.get("reached") and b.get("reached")]
    if pair:
        out += ["", f"ppt_dask p = 2 over p = 1: {statistics.median(pair):.2f} (median of repeats)"]
    return out


if __name__ == "__main__":
    main()
