"""What a PyTorch module may hold and do to train as a :class:`ppt_dask.TorchNet`: each rule is a
refusal in one line, raised where the TorchNet is made or fixed to a row shape, before any
cluster work.

The engine's whole state is the flat parameter vector (and the optimizer's state of the same
shape): it is what the tree reduce adds, what the head keeps and rolls back to after a lost
worker, what a checkpoint and a model file hold. Every task runs on a copy of the module
made on its worker. So:

* **trainable parameters** (``requires_grad=True``) travel as the flat vector: they must be
  real floats of one dtype (float32 or float64, the engine's), on the CPU, and initialised
  (not a lazy module's placeholders);
* **frozen parameters** (``requires_grad=False``) and **buffers** travel with the module, as
  constants: a forward pass may read them but not change them. A buffer a worker changed
  (BatchNorm's running statistics) would not be added over the shards, kept by the head,
  checkpointed or rolled back, and would differ by worker;
* **hooks** (forward, backward, on a tensor, or registered globally) run on the workers'
  copies, where what they record is lost and what they change is not part of the sums;
  a global hook exists only in the process that registered it;
* **sparse gradients** (``nn.Embedding(sparse=True)``) cannot be added as dense vectors;
* a **random forward pass** (dropout) is kept reproducible by seeding torch's generator
  for each pass from the pass's own inputs (:mod:`ppt_dask.nets.torchnet`); randomness torch
  does not draw (numpy, Python's ``random``) is refused, as it could not be replayed.

Imports torch: only :mod:`ppt_dask.nets.torchnet` imports this module.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn

HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                "_global_backward_pre_hooks", "_global_forward_hooks_with_kwargs")
NORMS = "BatchNorm(track_running_stats=False), GroupNorm or LayerNorm"


def _hooks_still_where_we_look() -> list[str]:
    """The hook registries read here are torch internals (no public way to list a module's
    hooks): the names of those this torch no longer has, to warn about once."""
    import torch.nn.modules.module as registry

    gone = [name for name in HOOKS if not hasattr(nn.Module(), name)]
    gone += [name for name in GLOBAL_HOOKS if not hasattr(registry, name)]
    gone += [name for name in ("_backward_hooks", "_post_accumulate_grad_hooks") if not hasattr(torch.zeros(1), name)]
    return gone


if _hooks_still_where_we_look():
    warnings.warn(f"torch {torch.__version__} has no {', '.join(_hooks_still_where_we_look())}: ppt_dask.TorchNet "
                  "cannot see hooks registered there (ppt_dask/nets/torchcheck.py)", RuntimeWarning, stacklevel=2)


def _where(name: str) -> str:
    return f"submodule {name!r}" if name else "the module"


def check_module(module: nn.Module, what: str) -> None:
    """Refuse what cannot train on a copy per worker (see the module docstring)."""
    if not isinstance(module, nn.Module):
        raise ValueError(f"{what} must be a torch.nn.Module (or a function that returns one), "
                         f"got a {type(module).__name__}")
    import torch.nn.modules.module as registry  # the global hooks live there, private by name

    for name in GLOBAL_HOOKS:
        if getattr(registry, name, None):
            raise ValueError(f"{what}: a global module hook is registered ({name[1:]}); it exists only in "
                             "this process, not on the workers: remove it before training")
    for name, p in module.named_parameters():
        if isinstance(p, nn.parameter.UninitializedParameter):
            raise ValueError(f"{what}: parameter {name!r} is not initialised (a lazy module): run one "
                             "forward pass on a batch before making the TorchNet")
        if p.device.type != "cpu":
            raise ValueError(f"{what}: parameter {name!r} is on {p.device}; the workers compute on the "
                             "CPU: move the module there (module.cpu())")
        if getattr(p, "_backward_hooks", None) or getattr(p, "_post_accumulate_grad_hooks", None):
            raise ValueError(f"{what}: parameter {name!r} has a tensor hook; hooks run on the workers' "
                             "copies, where their changes are not summed: remove it")
        if p.requires_grad and p.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{what}: parameter {name!r} is {p.dtype}; trainable parameters must be "
                             "float32 or float64 (module.float() or module.double())")
    for name, sub in module.named_modules():
        for hooks in HOOKS:
            if getattr(sub, hooks, None):
                raise ValueError(f"{what}: {_where(name)} has {hooks.strip('_').replace('_', ' ')} "
                                 f"({type(sub).__name__}); hooks run on the workers' copies, where what "
                                 "they record is lost and what they change is not summed: remove them "
                                 "(torch.nn.utils.parametrize works without hooks)")
    dtypes = {p.dtype for p in module.parameters() if p.requires_grad}
    if not dtypes:
        raise ValueError(f"{what} has no trainable parameter (every one has requires_grad=False)")
    if len(dtypes) > 1:
        raise ValueError(f"{what} mixes trainable parameters of {sorted(map(str, dtypes))}; they travel as one "
                         "flat vector of one dtype: module.float() or module.double()")


def probe(module: nn.Module, x: torch.Tensor, loss_sum, make_target, what: str) -> dict:
    """Run ``module`` on the probe rows ``x`` (train mode, then eval mode) and refuse what
    cannot train: an output that is not ``(rows, outputs)``, a loss that fails on it, sparse
    gradients, buffers or parameters the pass changes, randomness torch does not seed.

    ``loss_sum(out, target)`` is the TorchNet's summed loss and ``make_target(out)`` makes
    targets for ``out``. Returns ``{"n_outputs": k, "random": bool}``; leaves ``module`` as
    it found it.
    """
    shape = tuple(x.shape[1:])
    before = {n: b.detach().clone() for n, b in module.named_buffers()}
    weights = [p.detach().clone() for p in module.parameters()]
    trainable = [p for p in module.parameters() if p.requires_grad]
    module.train()
    with _said(f"{what} cannot take rows of shape {shape}"):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            out = module(x)
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"{what} returns a {type(out).__name__} for rows of shape {shape}; it must return "
                         "one tensor of shape (rows, outputs)")
    if out.ndim == 1:
        out = out.reshape(-1, 1)
    if out.ndim != 2 or out.shape[0] != len(x):
        raise ValueError(f"{what} returns shape {tuple(out.shape)} for {len(x)} rows of shape {shape}; "
                         f"ppt_dask needs (rows, outputs)")
    with _said(f"the loss fails on the outputs {tuple(out.shape)} of {what}"):
        loss = loss_sum(out, make_target(out))
    with _said(f"{what}: no gradient of the loss"):
        grads = torch.autograd.grad(loss, trainable, allow_unused=True)
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    for name, g in zip(names, grads):
        if g is not None and g.layout != torch.strided:
            raise ValueError(f"{what}: parameter {name!r} gets a sparse gradient (nn.Embedding(sparse=True)?); "
                             "the shards' gradients are added as dense vectors: use sparse=False")
    changed = [n for n, b in module.named_buffers() if not torch.equal(b, before[n])]
    if changed:
        raise ValueError(f"{what}: a training pass changes buffer(s) {', '.join(changed)}; ppt_dask trains "
                         f"the parameters only (a buffer changed on a worker is not summed over the shards, "
                         f"checkpointed or rolled back): use {NORMS}")
    if any(not torch.equal(p, w) for p, w in zip(module.parameters(), weights)):
        raise ValueError(f"{what}: a forward pass changes its parameters in place; the weights are the "
                         "engine's flat vector: compute from them, do not write to them")
    return {"n_outputs": int(out.shape[1]), "random": _random(module, x, what)}


@contextlib.contextmanager
def _said(words: str):
    """The user's module or loss failing: one line, ``words`` and the error (a ValueError of
    ours passes as it is)."""
    try:
        yield
    except ValueError:
        raise
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        raise ValueError(f"{words} ({type(exc).__name__}: {text})") from None


def _random(module: nn.Module, x: torch.Tensor, what: str) -> bool:
    """Whether the forward pass is random (train or eval mode); refused when torch's seed
    does not make it repeat."""
    random = False
    for train in (True, False):
        module.train(train)
        with torch.no_grad():
            runs = []
            for seed in (1, 2, 1):
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)
                    runs.append(module(x))
        if not torch.equal(runs[0], runs[2]):
            module.train()
            raise ValueError(f"{what}: its forward pass is random beyond torch's generator (numpy or Python's "
                             "random?); a run could not be replayed: draw from torch (torch.rand, nn.Dropout)")
        random = random or not torch.equal(runs[0], runs[1])
    module.train()
    return random
