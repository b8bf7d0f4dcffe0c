"""More workers, sooner? Time and epochs to 97% MNIST for p = 1, 2, 4, 8 workers, beside mpi4py.

Usage::

    python graphs/scaling.py                    # p = 1, 2, 4, 8; 3 repeats, interleaved
    python graphs/scaling.py --p-values 1,2,4,8,16 --repeats 1
    python graphs/scaling.py --quick            # p = 1, 2; a subset of MNIST to 88%

Each row is a command as a user types it, run in its own processes (its own LocalCluster):

* ``ppt-dask train mnist --workers P``: the preset, nothing tuned;
* ``ppt-dask train mnist --workers P --strategy block --block B --lr LR --momentum 0.9 --dtype
  float32``: seed 001's synchronous SGD by block, for block 1000 (lr 0.5) and 200 (lr 0.1);
* beside each block, a hand-written mpi4py program at ``mpiexec -n P`` with the same batch,
  learning rate and momentum (graphs/peers/mpi_allreduce.py: one ``Allreduce`` a step), where
  mpi4py and an MPI are installed.

Printed per p: the median seconds to the target (training only, start-up apart), the epochs,
the ratio to p = 1 and to mpi4py at the same np, and what each ppt_dask worker sent a round
against the weights' bytes (``--json``'s ``transfer_bytes_per_round``). A p above this
machine's cores says "oversubscribed": its loops time-slice the cores, so its time says how
the exchange holds up, not what p cores would give. Repeats run every contender once, in
turn; the ratios are taken repeat by repeat, then the median.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peers  # noqa: E402

import common  # noqa: E402

DEFAULTS = dict(REPEATS=3, P_VALUES=(1, 2, 4, 8), SETTINGS=("preset", "1000:0.5", "200:0.1"), N_TRAIN=60000,
                N_TEST=10000, TARGET=0.97, MAX_EPOCHS=40, MAX_SECONDS=300.0)
QUICK = dict(REPEATS=1, P_VALUES=(1, 2), SETTINGS=("preset", "1000:0.5"), N_TRAIN=6000, N_TEST=2000,
             TARGET=0.88, MAX_EPOCHS=10, MAX_SECONDS=60.0)


def contenders(setting: str, p: int) -> list[dict]:
    """The ppt_dask command of ``setting`` at ``p`` workers, and mpi4py's beside a block."""
    if setting == "preset":
        return [dict(name=f"preset-p{p}", setting=setting, p=p, label=f"ppt-dask train mnist --workers {p}",
                     script="ppt_dask_cli.py", threads=1, spec=dict(p=p))]
    block, lr = setting.split(":")
    cli = ["--strategy", "block", "--block", block, "--lr", lr, "--momentum", "0.9", "--dtype", "float32"]
    return [dict(name=f"block{block}-p{p}", setting=setting, p=p, threads=1, script="ppt_dask_cli.py",
                 label=f"ppt-dask train mnist --workers {p} " + " ".join(cli), spec=dict(p=p, args=cli)),
            dict(name=f"mpi4py-block{block}-np{p}", setting=setting, p=p, threads=1, script="mpi_allreduce.py",
                 label=f"mpiexec -n {p} mpi4py Allreduce, batch {block}, lr {lr}",
                 launcher=("mpiexec", "-n", str(p)), needs=("mpi4py",))]


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    cfg = dict(N_TRAIN=args.n_train, N_TEST=args.n_test, TARGET=args.target, MAX_EPOCHS=args.max_epochs,
               STARTUP_TIMEOUT=peers.STARTUP_TIMEOUT)
    cs = [c for s in args.settings for p in args.p_values for c in contenders(s, p)]
    skipped = {c["name"]: why for c in cs if (why := peers.missing(c))}
    cs = [c for c in cs if c["name"] not in skipped]
    runs: dict = {c["name"]: [] for c in cs}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        source = peers.prepare(cfg, work)
        for repeat in range(args.repeats):
            order = cs[repeat % len(cs):] + cs[:repeat % len(cs)]
            for c in order:
                lr, block = _lr_block(c["setting"])
                r = peers.race(c, lr, block, cfg, work, args.max_seconds, f"{c['name']}-{repeat}")
                runs[c["name"]].append(r)
                print(f"repeat {repeat + 1} {c['name']}: {peers.say(r)}", flush=True)
    rows = [row for s in args.settings for row in table_rows(s, args.p_values, runs)]
    notes = [f"Time to {args.target:.0%} MNIST test accuracy ({source}); {args.repeats} repeat(s), contenders "
             f"interleaved; {os.cpu_count()} cores: a p above them is oversubscribed.",
             *(f"{name}: not run ({why})" for name, why in skipped.items())]
    path = common.write_table(args.out, "scaling", rows, title="Scaling: time to target against workers",
                              notes=notes)
    print(path.read_text())


def _lr_block(setting: str) -> tuple[float | None, int | None]:
    if setting == "preset":
        return None, None
    block, lr = setting.split(":")
    return float(lr), int(block)


def _median(values):
    return statistics.median(values) if values else float("nan")


def table_rows(setting: str, p_values, runs: dict) -> list[dict]:
    """One row per p of ``setting``: ppt_dask's and mpi4py's medians, and the ratios."""
    cores = os.cpu_count() or 1
    base = f"preset-p{p_values[0]}" if setting == "preset" else f"block{setting.split(':')[0]}-p{p_values[0]}"
    out = []
    for p in p_values:
        mine, theirs = contenders(setting, p)[0], contenders(setting, p)[1:]
        ours = runs.get(mine["name"], [])
        mpi = runs.get(theirs[0]["name"], []) if theirs else []
        ok = [r for r in ours if r.get("reached")]
        first = runs.get(base, [])
        sent = [r["breakdown"].get("bytes_a_worker_per_weights") for r in ok if r.get("breakdown")]
        out.append({
            "command": mine["label"], "p": p, "oversubscribed": "yes" if p > cores else "",
            "seconds": _median([r["seconds"] for r in ok]), "epochs": _median([r["epochs"] for r in ok]),
            "reached": f"{len(ok)}/{len(ours)}",
            "x p1": _median([a["seconds"] / b["seconds"] for a, b in zip(ours, first)
                             if a.get("reached") and b.get("reached")]),
            "mpi4py s": _median([r["seconds"] for r in mpi if r.get("reached")]) if mpi else float("nan"),
            "x mpi4py": _median([a["seconds"] / b["seconds"] for a, b in zip(ours, mpi)
                                 if a.get("reached") and b.get("reached")]) if mpi else float("nan"),
            "sent a worker (x weights)": _median([s for s in sent if s is not None])})
    return out


if __name__ == "__main__":
    main()
