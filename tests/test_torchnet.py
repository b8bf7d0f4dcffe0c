"""ppt.TorchNet without a cluster: sums, gradients, what a module may hold, and why it may not.

The oracles: finite differences of the summed loss; PyTorch itself (a mean loss times the
rows); sums over two halves against the whole; the same pass twice. Every refusal is one
line, raised where the TorchNet is made or fixed to a row shape.
"""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from system import needs_module

needs_module("torch", "pip install 'ppt_dask[torch]'")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import ppt_dask as ppt  # noqa: E402
from ppt_dask.nets import torchnet  # noqa: E402


def conv(dtype=torch.float64):
    """A small convolutional network on 1x6x6 rows, 4 classes."""
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 4 * 4, 4)).to(dtype)


def rows(n=10, seed=0, dtype="float64"):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 1, 6, 6)).astype(dtype), rng.integers(0, 4, n)


def test_the_gradient_is_that_of_the_loss_summed_over_the_rows():
    net = ppt.TorchNet(conv, row_shape=(1, 6, 6))
    got = (net.n_params, net.n_outputs, net.task, net.dtype, net.random)
    assert got == (226, 4, "classification", "float64", False)
    X, y = rows()
    params = net.init_params(1)
    grad, stats = net.loss_grad_stats(params, X, y)
    eps, picked = 1e-6, np.arange(0, net.n_params, 5)
    for i in picked:  # finite differences of the summed loss
        step = np.zeros_like(params)
        step[i] = eps
        numeric = (net.stats(params + step, X, y)[0] - net.stats(params - step, X, y)[0]) / (2 * eps)
        assert abs(numeric - grad[i]) < 1e-7 * max(1.0, abs(grad[i])), i
    # PyTorch's own mean loss, times the rows, is the sum
    module = net.module_of(params)
    mean = nn.functional.cross_entropy(module(torch.from_numpy(X)), torch.from_numpy(y))
    mean.backward()
    torch_grad = torch.cat([p.grad.reshape(-1) for p in module.parameters()]).numpy() * len(X)
    np.testing.assert_allclose(grad, torch_grad, rtol=1e-12, atol=1e-12)
    assert stats[2] == len(X) and stats[0] == pytest.approx(float(mean.detach()) * len(X), rel=1e-12)
    # the sums of two halves add up to the whole (what the tree reduce relies on)
    g1, s1 = net.loss_grad_stats(params, X[:4], y[:4])
    g2, s2 = net.loss_grad_stats(params, X[4:], y[4:])
    np.testing.assert_allclose(g1 + g2, grad, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s1 + s2, stats)


def test_a_mean_loss_module_is_summed_and_a_loss_function_must_give_one_loss_per_row():
    X, y = rows()
    named = ppt.TorchNet(conv, row_shape=(1, 6, 6))
    params = named.init_params(0)
    grad, stats = named.loss_grad_stats(params, X, y)
    as_module = ppt.TorchNet(conv, loss=nn.CrossEntropyLoss(), row_shape=(1, 6, 6))  # reduction="mean"
    assert as_module.task == "classification"
    g, s = as_module.loss_grad_stats(params, X, y)
    np.testing.assert_array_equal(g, grad)
    np.testing.assert_array_equal(s, stats)
    per_row = ppt.TorchNet(conv, loss=lambda out, t: nn.functional.cross_entropy(out, t, reduction="none"),
                           task="classification", row_shape=(1, 6, 6))
    np.testing.assert_allclose(per_row.loss_grad_stats(params, X, y)[0], grad, rtol=1e-13)
    with pytest.raises(ValueError, match="returns \\(\\) for 2 rows; it must return one loss per row"):
        ppt.TorchNet(conv, loss=lambda out, t: nn.functional.cross_entropy(out, t), task="classification",
                     row_shape=(1, 6, 6))
    with pytest.raises(ValueError, match="a loss of your own needs task="):
        ppt.TorchNet(conv, loss=lambda out, t: out.sum(1))
    with pytest.raises(ValueError, match="the loss fails on the outputs \\(2, 4\\) of the module of conv\\(\\) "
                                         "\\(RuntimeError"):
        ppt.TorchNet(conv, loss=nn.L1Loss(), task="classification", row_shape=(1, 6, 6))
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        ppt.TorchNet(conv, loss="hinge")


def test_other_tasks_count_their_errors_and_predict():
    X, _ = rows(8)
    reg = ppt.TorchNet(lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 2)).double(), loss="mse", row_shape=(1, 6, 6))
    params = reg.init_params(0)
    targets = reg.forward(params, X) + np.array([[0.05, 0.0]] * 4 + [[0.5, 0.0]] * 4)
    grad, stats = reg.loss_grad_stats(params, X, targets)
    assert stats[1] == 4 and stats[0] == pytest.approx(0.5 * 4 * (0.05 ** 2 + 0.5 ** 2))  # half the squares
    assert reg.task == "regression" and reg.predict(params, X).shape == (8, 2)
    binary = ppt.TorchNet(lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 1)).double(), loss="bce",
                          row_shape=(1, 6, 6))
    p = binary.init_params(0)
    assert binary.task == "binary" and binary.predict(p, X).shape == (8,)
    assert set(binary.predict(p, X)) <= {0, 1} and binary.predict_proba(p, X).shape == (8, 1)
    labels = binary.predict(p, X)
    assert binary.stats(p, X, labels)[1] == 0 and binary.stats(p, X, 1 - labels)[1] == 8
    multi = ppt.TorchNet(lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 3)).double(), loss="bce",
                         row_shape=(1, 6, 6))
    assert multi.task == "multilabel"


def test_initial_weights_are_seeded_and_a_module_given_as_an_object_is_reset():
    net = ppt.TorchNet(conv, row_shape=(1, 6, 6))
    a, b, c = net.init_params(3), net.init_params(3), net.init_params(4)
    assert a.tobytes() == b.tobytes() and a.tobytes() != c.tobytes()
    torch.manual_seed(3)
    np.testing.assert_array_equal(a, net.params_of(conv()))  # the builder under torch.manual_seed(seed)
    given = conv()
    from_object = ppt.TorchNet(given, row_shape=(1, 6, 6))
    assert from_object.init_params(3).tobytes() != from_object.params_of(given).tobytes()  # reset_parameters
    assert from_object.init_params(3).tobytes() == from_object.init_params(3).tobytes()
    restored = from_object.module_of(from_object.params_of(given))
    X, _ = rows()
    np.testing.assert_array_equal(restored(torch.from_numpy(X)).detach().numpy(),
                                  given(torch.from_numpy(X)).detach().numpy())


def test_frozen_parameters_are_constants_and_not_in_the_vector():
    def partly_frozen():
        m = conv()
        for p in m[0].parameters():
            p.requires_grad_(False)
        return m
    net = ppt.TorchNet(partly_frozen, row_shape=(1, 6, 6))
    assert net.n_params == 4 * 48 + 4  # the linear layer only
    X, y = rows()
    params = net.init_params(0)
    grad, _ = net.loss_grad_stats(params, X, y)
    assert grad.shape == (net.n_params,)
    again = pickle.loads(pickle.dumps(net))  # the frozen values travel with the module
    np.testing.assert_array_equal(again.loss_grad_stats(params, X, y)[0], grad)
    np.testing.assert_array_equal(net.weight_mask(), np.r_[np.ones(192), np.zeros(4)])


def test_dropout_is_seeded_by_each_pass_so_a_pass_repeats_and_eval_mode_has_none():
    net = ppt.TorchNet(lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 16), nn.Dropout(0.5),
                                             nn.Linear(16, 4)).double(), row_shape=(1, 6, 6))
    assert net.random
    X, y = rows()
    params = net.init_params(0)
    g1, s1 = net.loss_grad_stats(params, X, y)
    torch.manual_seed(123)  # the global generator does not matter
    g2, s2 = net.loss_grad_stats(params, X, y)
    assert g1.tobytes() == g2.tobytes() and s1.tobytes() == s2.tobytes()
    assert net.loss_grad_stats(params, X[::-1].copy(), y[::-1].copy())[0].tobytes() != g1.tobytes()
    module = net.module_of(params).eval()  # eval mode: no dropout, PyTorch's own outputs
    np.testing.assert_allclose(net.forward(params, X), module(torch.from_numpy(X)).detach().numpy(), rtol=1e-12)
    state = torch.random.get_rng_state()
    net.loss_grad_stats(params, X, y)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's generator is left as it was


class NumpyNoise(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(36, 4).double()

    def forward(self, x):
        return self.lin(x.flatten(1)) + torch.from_numpy(np.random.standard_normal((len(x), 4)))


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(36, 4).double()
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.seen += len(x)
        return self.lin(x.flatten(1))


def _hooked():
    m = conv()
    m[1].register_forward_hook(lambda module, args, out: None)
    return m


def _tensor_hooked():
    m = conv()
    m[3].weight.register_hook(lambda g: g.clamp(-1, 1))
    return m


@pytest.mark.parametrize("build, match", [
    (lambda: nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(32, 4)),
     "changes buffer\\(s\\) 1.running_mean, 1.running_var, 1.num_batches_tracked; ppt_dask trains the parameters "
     "only .*BatchNorm\\(track_running_stats=False\\), GroupNorm or LayerNorm"),
    (Counting, "changes buffer\\(s\\) seen"),
    (_hooked, "submodule '1' has forward hooks .*hooks run on the workers' copies"),
    (_tensor_hooked, "parameter '3.weight' has a tensor hook"),
    (lambda: nn.Sequential(nn.Flatten(), nn.LazyLinear(4)),
     "parameter '1.weight' is not initialised \\(a lazy module\\)"),
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 4, dtype=torch.complex64)), "is torch.complex64; trainable"),
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 4), nn.Linear(4, 4).double()), "mixes trainable parameters"),
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 4).requires_grad_(False)), "has no trainable parameter"),
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 1)), "1 output for classification; it needs one per class"),
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(35, 4)),
     "cannot take rows of shape \\(1, 6, 6\\) \\(RuntimeError: mat1"),
    (lambda: nn.Conv2d(1, 2, 3),
     "returns shape \\(2, 2, 4, 4\\) for 2 rows of shape \\(1, 6, 6\\); ppt_dask needs \\(rows, outputs\\)"),
    (NumpyNoise, "random beyond torch's generator"),
    (lambda: "not a module", "must return a torch.nn.Module, got a str"),
])
def test_what_cannot_train_is_refused_in_one_line(build, match):
    with pytest.raises(ValueError, match=match) as error:
        ppt.TorchNet(build, row_shape=(1, 6, 6))
    assert "\n" not in str(error.value)


def test_sparse_gradients_are_refused():
    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4, sparse=True)

        def forward(self, x):
            return self.emb(x.flatten(1)[:, :3].abs().long().clamp(max=9)).sum(1)
    with pytest.raises(ValueError, match="parameter 'emb.weight' gets a sparse gradient.*use sparse=False"):
        ppt.TorchNet(Bag, row_shape=(1, 6, 6))


def test_the_hook_registries_read_are_still_where_torch_keeps_them():
    from ppt_dask.nets import torchcheck

    assert torchcheck._hooks_still_where_we_look() == []


def test_a_global_hook_is_refused():
    handle = nn.modules.module.register_module_forward_hook(lambda m, a, o: None)
    try:
        with pytest.raises(ValueError, match="a global module hook is registered"):
            ppt.TorchNet(conv)
    finally:
        handle.remove()


@pytest.mark.parametrize("omp, threads, expected", [(None, "auto", 1), ("2", "auto", 2), ("2", 3, 3)])
def test_it_travels_without_its_weights_and_takes_the_workers_threads(omp, threads, expected):
    """A process that unpickles the network (a worker) computes with ``OMP_NUM_THREADS`` torch
    threads (what the nanny sets to the worker's threads; 1 where unset), or the count given; with
    torch's deterministic kernels, without loading torch's compiler (seconds, inside the run's
    clock)."""
    net = ppt.TorchNet(lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 512), nn.Linear(512, 4)).double(),
                       row_shape=(1, 6, 6), threads=threads)
    assert net.n_params * 8 > 150_000 and len(pickle.dumps(net)) < 20_000  # the weights are the engine's vector
    code = ("import pickle, sys, numpy as np, torch\n"
            "net = pickle.loads(sys.stdin.buffer.read())\n"
            "X = np.zeros((3, 1, 6, 6)); net.loss_grad_stats(net.init_params(0), X, np.zeros(3, dtype=int))\n"
            "print(torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),\n"
            "      torch.is_deterministic_algorithms_warn_only_enabled(),\n"
            "      'torch._inductor.config' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | ({"OMP_NUM_THREADS": omp} if omp else {})
    run = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(net), capture_output=True, timeout=120,
                         env=env)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert run.stdout.decode().split() == [str(expected), "True", "True", "False"]


@pytest.mark.parametrize("threads", [0, 2.0, "all", True])
def test_threads_are_auto_a_count_or_none(threads):
    with pytest.raises(ValueError, match=f"threads must be 'auto', an integer >= 1 or None, got {threads!r}"):
        ppt.TorchNet(conv, threads=threads)


def test_one_shard_of_local_sgd_steps_as_pytorchs_own_loop():
    """One worker's local SGD (one shard: its average is its own weights) is PyTorch's momentum
    SGD over the same rows: ``torch.optim.SGD`` on the mean loss, the rows the shuffled walk
    gives, a new order each pass (why it learns as a PyTorch loop does; in the files' order
    every pass MNIST learns less, graphs/README.md, "A module's step")."""
    from ppt_dask.algorithms import localsgd

    X, y = rows(48, seed=1)
    net = ppt.TorchNet(conv, row_shape=(1, 6, 6))
    strategy = ppt.LocalSGD(lr=0.1, momentum=0.9, block=8, interval=24, shuffle=True).check([48], seed=4)
    state, _ = localsgd.train_serial(net, [(X, y)], strategy, strategy.init(net.init_params(0)), rounds=5)
    torch.manual_seed(0)
    module = conv()
    opt = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    walk = strategy._walk(48, 0)
    for step in range(5 * strategy.steps()):  # 15 steps: 2.5 passes, each in a new order
        i = torch.from_numpy(np.asarray(walk(step)))
        loss = nn.functional.cross_entropy(module(torch.from_numpy(X)[i]), torch.from_numpy(y)[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
    np.testing.assert_allclose(state.params, net.params_of(module), rtol=1e-10, atol=1e-12)


def test_rows_of_another_shape_are_refused_and_an_unfixed_net_says_how_to_fix_it():
    net = ppt.TorchNet(conv)
    assert net.row_shape is None and net.with_row_shape((1, 6, 6)).row_shape == (1, 6, 6)
    X, y = rows()
    with pytest.raises(ValueError, match="takes rows of any shape: fix it first"):
        net.loss_grad_stats(net.init_params(0), X, y)
    with pytest.raises(ValueError, match="X must have rows of shape \\(1, 6, 6\\), got X of shape \\(10, 36\\)"):
        net.with_row_shape((1, 6, 6)).stats(net.init_params(0), X.reshape(10, 36), y)


def test_without_torch_the_error_says_how_to_install_it():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import ppt_dask as ppt\n"
            "try:\n    ppt.TorchNet\nexcept ImportError as e:\n    print(e)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "ppt.TorchNet needs PyTorch: pip install 'ppt_dask[torch]'" in run.stdout, run.stderr
    assert torchnet.INSTALL_HINT in run.stdout
