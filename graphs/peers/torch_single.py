"""Contender: PyTorch on the CPU, one process, two intra-op threads.

The same network (``nn.Linear`` layers, tanh, softmax inside ``cross_entropy``), the same
initial weights (our W is (in, out): PyTorch's weight is its transpose), ``torch.optim.SGD``
with classical momentum (PyTorch's ``v = m v + g; p -= lr v`` is ours, ``v = m v - lr g;
p += v``, rescaled) and mean loss per mini-batch, the batches taken in order as every other
contender takes them. The fast path for data that fits in memory: whole tensors, one slice
per mini-batch (a ``DataLoader`` over a ``TensorDataset`` would index and collate sample
by sample in Python).

    python graphs/peers/torch_single.py SPEC.json RESULT.json
"""

import _common as c


def build(spec, torch):
    """The network with the shared initial weights."""
    from torch import nn

    sizes = spec["sizes"]
    mods = []
    for i, (W, b) in enumerate(c.layers(c.init_params(spec), sizes)):
        lin = nn.Linear(W.shape[0], W.shape[1], dtype=getattr(torch, spec["dtype"]))
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(W.T.copy()))
            lin.bias.copy_(torch.from_numpy(b.copy()))
        mods.append(lin)
        if i < len(sizes) - 2:
            mods.append(nn.Tanh())
    return nn.Sequential(*mods)


def main():
    spec, out = c.load_spec()
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(spec.get("threads", 2))
    X, y = (torch.from_numpy(a) for a in c.rows(spec, "train", 0, spec["n_train"]))
    X_test, y_test = (torch.from_numpy(a) for a in c.rows(spec, "test", 0, spec["n_test"]))
    model = build(spec, torch)
    opt = torch.optim.SGD(model.parameters(), lr=spec["lr"], momentum=spec["momentum"])
    b = spec["batch"]
    steps = len(X) // b

    def train_epoch(e):
        model.train()
        total = torch.zeros(())
        for i in range(steps):
            loss = F.cross_entropy(model(X[i * b:(i + 1) * b]), y[i * b:(i + 1) * b])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach()
        return total.item() / steps

    def test_accuracy():
        model.eval()
        with torch.inference_mode():
            return (model(X_test).argmax(1) == y_test).double().mean().item()

    run = c.race(spec, train_epoch, test_accuracy)
    c.write_result(out, spec, run, c.peak_rss_mib(), torch_threads=torch.get_num_threads())


if __name__ == "__main__":
    main()
