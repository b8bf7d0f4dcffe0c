"""Contender: a hand-written mpi4py program of seed 000's scheme.

Every rank holds its contiguous share of the training rows and a full copy of the
weights. Per block of ``batch`` rows (``batch / size`` on each rank, in order) each rank
computes the gradient *sum* over its rows, one ``Allreduce`` adds the sums (with the loss
and error counts piggybacked in the same buffer, as 000 piggybacks its error estimate),
and every rank applies the same momentum step, so the replicas stay identical (000 keeps
them identical with Allgather). The network math is written out here in numpy (nothing
from ppt_dask, so the processes do not import dask).

    mpiexec -n 2 python graphs/peers/mpi_allreduce.py SPEC.json RESULT.json

With ``"shards": S`` in the spec (graphs/block_race.py) it converges as ppt_dask's
``Sync(block=...)`` on S logical shards does, not only with the same math: each rank holds a
block of the S shards and takes, each step, its shards' next ``batch / S`` rows (walking each
shard in order, as ``ppt_dask.algorithms.strategies.block_rows``), and it stops by ppt_dask's
rule (``ppt.Stop``'s defaults, or ``window_epochs``, ``check_every`` in the spec): the error
estimate over the last window of patterns rides in the Allreduce, and once it is at or under
the target the weights a step began from are checked on the test set (each rank its part, the
counts summed), again every ``check_every`` epochs, instead of at every epoch's end.
"""

import time

import _common as c
import numpy as np
from mpi4py import MPI


def grad_sum(layers, grads, X, y):
    """Forward and backward over the rows of X; fills ``grads``; returns (loss_sum, n_wrong).

    tanh hidden layers, softmax output, cross-entropy summed over the rows.
    """
    acts = [X]
    for i, (W, b) in enumerate(layers):
        z = acts[-1] @ W
        z += b
        if i < len(layers) - 1:
            np.tanh(z, out=z)
        acts.append(z)
    p = acts[-1]
    p -= p.max(axis=1, keepdims=True)
    np.exp(p, out=p)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = -np.log(np.maximum(p[rows, y], np.finfo(p.dtype).tiny)).sum()
    wrong = np.count_nonzero(p.argmax(axis=1) != y)
    delta = p
    delta[rows, y] -= 1
    for i in range(len(layers) - 1, -1, -1):
        gW, gb = grads[i]
        np.matmul(acts[i].T, delta, out=gW)
        np.sum(delta, axis=0, out=gb)
        if i:
            delta = (delta @ layers[i][0].T) * (1 - acts[i] * acts[i])
    return float(loss), wrong


def n_wrong(layers, X, y):
    a = X
    for i, (W, b) in enumerate(layers):
        a = a @ W + b
        if i < len(layers) - 1:
            a = np.tanh(a)
    return np.count_nonzero(a.argmax(axis=1) != y)


def shard_rows(spec: dict, rank: int, size: int):
    """This rank's block of the spec's logical shards: its rows, and per shard its
    (first row here, rows, rows a step)."""
    shards, n = spec["shards"], spec["n_train"]
    if shards % size:
        raise SystemExit(f"{shards} shards do not split over {size} ranks")
    bounds = c.split_rows(n, shards)
    mine = range(rank * shards // size, (rank + 1) * shards // size)
    a, b = bounds[mine[0]][0], bounds[mine[-1]][1]
    share = [(s + 1) * spec["batch"] // shards - s * spec["batch"] // shards for s in mine]
    return c.rows(spec, "train", a, b), [(bounds[s][0] - a, bounds[s][1] - bounds[s][0], k)
                                        for s, k in zip(mine, share)]


def same_rule(spec, comm, params, layers, grads, buf, velocity, test_accuracy, clock) -> dict:
    """Steps as ppt_dask's rounds on the spec's shards, stopped by its rule (module notes)."""
    (X, y), parts = shard_rows(spec, comm.Get_rank(), comm.Get_size())
    n, batch = spec["n_train"], spec["batch"]
    per_epoch = n / batch
    window, check_every = spec.get("window_epochs", 1.0) * n, spec.get("check_every", 1.0)
    seen, next_check, history = [], -float("inf"), []
    wrong_in = seen_in = 0.0
    lr, momentum = spec["lr"], spec["momentum"]
    t0 = time.perf_counter()
    reached, why, step = False, "max_epochs", -1
    for step in range(int(spec["max_epochs"] * per_epoch)):
        idx = np.concatenate([first + (step * k + np.arange(k)) % rows for first, rows, k in parts])
        t1 = time.perf_counter()
        buf[-3], buf[-2] = grad_sum(layers, grads, X[idx], y[idx])
        clock["gradient"] += time.perf_counter() - t1
        buf[-1] = len(idx)
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        clock["steps"] += time.perf_counter() - t1
        clock["n"] += 1
        if not np.isfinite(buf[-3]):
            why = "diverged"
            break
        seen.append((float(buf[-2]), float(buf[-1])))
        wrong_in, seen_in = wrong_in + seen[-1][0], seen_in + seen[-1][1]
        while len(seen) > 1 and seen_in - seen[0][1] >= window:
            w, k = seen.pop(0)
            wrong_in, seen_in = wrong_in - w, seen_in - k
        epoch = (step + 1) / per_epoch
        if seen_in >= window and wrong_in / seen_in <= 1 - spec["target"] and epoch >= next_check - 1e-9:
            next_check = epoch + check_every
            accuracy = test_accuracy()  # the weights this step began from
            history.append({"epoch": epoch, "seconds": time.perf_counter() - t0, "test_accuracy": accuracy})
            if accuracy >= spec["target"]:
                reached, why = True, "target"
                break
        velocity[:] = momentum * velocity - (lr / buf[-1]) * buf[:-3]
        params[:] += velocity
    return {"reached": reached, "seconds": time.perf_counter() - t0, "epochs": (step + 1) / per_epoch,
            "stopped_because": why, "history": history, "t_ready": time.time() - (time.perf_counter() - t0)}


def main():
    spec, out = c.load_spec()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    a, b = c.split_rows(spec["n_train"], size)[rank]
    X, y = c.rows(spec, "train", a, b)
    ta, tb = c.split_rows(spec["n_test"], size)[rank]
    X_test, y_test = c.rows(spec, "test", ta, tb)
    sizes, dtype = spec["sizes"], spec["dtype"]
    params = c.init_params(spec)
    layers = c.layers(params, sizes)
    buf = np.zeros(len(params) + 3, dtype=dtype)  # [grad_sum, loss_sum, n_wrong, n]
    grads = c.layers(buf[:len(params)], sizes)
    velocity = np.zeros_like(params)
    lr, momentum = spec["lr"], spec["momentum"]
    local = spec["batch"] // size
    steps = len(X) // local
    clock = {"gradient": 0.0, "steps": 0.0, "n": 0}  # seconds in grad_sum, in whole steps; steps taken

    def train_epoch(e):
        loss = 0.0
        t0 = time.perf_counter()
        for i in range(steps):
            rows = slice(i * local, (i + 1) * local)
            t1 = time.perf_counter()
            buf[-3], buf[-2] = grad_sum(layers, grads, X[rows], y[rows])
            clock["gradient"] += time.perf_counter() - t1
            buf[-1] = local
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            velocity[:] = momentum * velocity - (lr / buf[-1]) * buf[:-3]
            params[:] += velocity  # in place: the views in `layers` follow
            loss += buf[-3]
        clock["steps"] += time.perf_counter() - t0
        clock["n"] += steps
        return loss / (steps * spec["batch"])

    def test_accuracy():
        if not spec.get("checks", True):  # graphs/round_cpu.py: the steps' CPU alone
            return 0.0
        counts = np.array([n_wrong(layers, X_test, y_test), len(y_test)], dtype=np.float64)
        comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
        return 1.0 - counts[0] / counts[1]

    def agree(flag: bool) -> bool:
        return bool(comm.allreduce(bool(flag), op=MPI.LOR))

    comm.Barrier()
    if spec.get("shards"):
        run = same_rule(spec, comm, params, layers, grads, buf, velocity, test_accuracy, clock)
    else:
        run = c.race(spec, train_epoch, test_accuracy, agree)
    rss = comm.gather(c.peak_rss_mib())
    cpu = comm.gather(time.process_time())  # each rank's CPU seconds (graphs/round_cpu.py)
    if rank == 0:
        c.write_result(out, spec, run, None, rss, processes=size, mpi=MPI.Get_library_version().split("\n")[0],
                       step_ms=1e3 * clock["steps"] / max(clock["n"], 1),
                       gradient_ms=1e3 * clock["gradient"] / max(clock["n"], 1),
                       cpu_seconds=cpu, steps=clock["n"])


if __name__ == "__main__":
    main()
