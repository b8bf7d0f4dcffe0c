"""Contender: PyTorch DistributedDataParallel, gloo backend, 2 processes of 1 thread.

Started with ``torch.multiprocessing.spawn`` (no torchrun). Each rank holds its contiguous
half of the training rows (as ppt_dask's two shards) and takes ``batch / 2`` of them per
step, in order; DDP averages the gradients over the ranks during ``backward``, so a step
is the same mean-gradient step on ``batch`` rows as the other contenders. The test check
is split too: each rank counts its half of the test set, one ``all_reduce`` adds them.

    python graphs/peers/torch_ddp.py SPEC.json RESULT.json
"""

import json
import os
import socket

import _common as c
from torch_single import build

WORLD = 2


def rank_main(rank: int, spec: dict, port: int, out: str):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    a, b = c.split_rows(spec["n_train"], WORLD)[rank]
    X, y = (torch.from_numpy(v) for v in c.rows(spec, "train", a, b))
    ta, tb = c.split_rows(spec["n_test"], WORLD)[rank]
    X_test, y_test = (torch.from_numpy(v) for v in c.rows(spec, "test", ta, tb))
    model = DDP(build(spec, torch))
    opt = torch.optim.SGD(model.parameters(), lr=spec["lr"], momentum=spec["momentum"])
    local = spec["batch"] // WORLD
    steps = len(X) // local

    def train_epoch(e):
        model.train()
        total = torch.zeros(())
        for i in range(steps):
            loss = F.cross_entropy(model(X[i * local:(i + 1) * local]), y[i * local:(i + 1) * local])
            opt.zero_grad(set_to_none=True)
            loss.backward()  # the gradient all-reduce (mean over ranks) runs in here
            opt.step()
            total += loss.detach()
        return total.item() / steps

    def test_accuracy():
        model.eval()
        with torch.inference_mode():
            counts = torch.tensor([(model(X_test).argmax(1) == y_test).sum().item(), len(y_test)],
                                  dtype=torch.float64)
        dist.all_reduce(counts)
        return (counts[0] / counts[1]).item()

    def agree(flag: bool) -> bool:
        t = torch.tensor([float(flag)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    dist.barrier()
    run = c.race(spec, train_epoch, test_accuracy, agree)
    rss = [None] * WORLD
    dist.all_gather_object(rss, c.peak_rss_mib())
    if rank == 0:
        with open(out + ".rank0", "w") as fh:
            json.dump({"run": run, "rss": rss}, fh)
    dist.barrier()  # neither rank leaves while the other still talks to it
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    spec, out = c.load_spec()
    import torch.multiprocessing as mp

    mp.spawn(rank_main, args=(spec, free_port(), str(out)), nprocs=WORLD, join=True)
    part = json.loads(open(str(out) + ".rank0").read())
    os.remove(str(out) + ".rank0")
    c.write_result(out, spec, part["run"], c.peak_rss_mib(), part["rss"], processes=WORLD)


if __name__ == "__main__":
    main()
