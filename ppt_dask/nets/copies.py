"""Each process's copies of a :class:`ppt_dask.TorchNet`'s module.

A network travels to the workers pickled without its trainable weights; the first task of a
network in a process unpickles it once (:func:`shared`), later tasks of the same network find
it by its token. Each thread computes on a working copy of its own (:class:`Work`), whose
trainable parameters are views of one flat tensor, so loading the engine's weights is one copy.
The process's torch settings (:func:`configure`) and the seeding of random passes
(:func:`forked`: torch has one generator per process, so seeded passes take turns) live here
too. Imports torch (only :mod:`ppt_dask.nets` does).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import math
import os
import threading
import warnings

import numpy as np
import torch
from torch import nn

from ppt_dask.nets import building

KEPT_NETWORKS = 16  # networks whose module copies a process keeps (least recently used go)


def threads_of(threads) -> int | None:
    """The torch threads a network of ``threads`` computes with in this process: ``"auto"``
    is the process's ``OMP_NUM_THREADS`` (what a Dask worker's nanny sets: ppt_dask's clusters
    to each worker's threads, Dask's own to 1), 1 where it is unset or not a count; an int is
    itself; None leaves torch's setting alone."""
    if threads != "auto":
        return threads
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def configure(threads, deterministic: bool) -> None:
    """The process's torch settings (:mod:`ppt_dask.nets.torchnet`, "Threads"), in the calling thread (each
    thread has its own OpenMP thread count): microseconds when already set.

    ``deterministic``: deterministic kernels where torch has them, a warning where it has
    none, through ``torch.set_deterministic_debug_mode("warn")``, the same switch as
    ``torch.use_deterministic_algorithms(True, warn_only=True)`` without the latter's import of
    torch's compiler settings (``torch._inductor.config``, 822 modules: 2.2-2.6 s on the first
    gradient call of a worker, inside the run's clock; graphs/README.md, "A module's step").
    """
    wanted = threads_of(threads)
    if wanted and torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    if deterministic and not torch.are_deterministic_algorithms_enabled():
        torch.set_deterministic_debug_mode("warn")


def tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor on ``a``'s memory; arrays from the network arrive read-only, and torch never
    writes to its inputs here (torch warns on non-writable arrays otherwise)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)


class Shared:
    """What every TorchNet made from the same module shares in a process: the template
    module, its builder, the summed loss, and one working copy per thread."""

    def __init__(self, template: nn.Module, builder, loss):
        self.template, self.builder, self.loss = template, builder, loss
        self.local = threading.local()


_PROCESS: collections.OrderedDict[str, Shared] = collections.OrderedDict()  # token -> shared
_LOCK = threading.Lock()


def shared(token: str, pickled: bytes, layout) -> Shared:
    """The network ``token``'s shared copy in this process: unpickled from ``pickled`` (its
    module without trainable weights, its builder, its loss) the first time, then kept (the
    ``KEPT_NETWORKS`` most recently used)."""
    with _LOCK:
        found = _PROCESS.get(token)
        if found is None:
            import cloudpickle  # a dependency of dask

            template, builder, loss = cloudpickle.loads(pickled)
            building.materialise(template, layout)
            found = _PROCESS[token] = Shared(template, builder, loss)
            while len(_PROCESS) > KEPT_NETWORKS:
                _PROCESS.popitem(last=False)
        _PROCESS.move_to_end(token)
    return found


class Work:
    """A working copy of the module whose trainable parameters are views of ``flat``."""

    def __init__(self, template: nn.Module, n_params: int, dtype):
        self.module = copy.deepcopy(template)
        self.trainable = [p for p in self.module.parameters() if p.requires_grad]
        self.flat = torch.zeros(n_params, dtype=dtype)
        start = 0
        for p, shape in zip(self.trainable, self._shapes(template)):
            n = math.prod(shape)
            p.data = self.flat[start:start + n].view(shape)
            start += n
        self.flat_np = self.flat.numpy()
        self.training = None

    @staticmethod
    def _shapes(template):
        return [tuple(p.shape) for p in template.parameters() if p.requires_grad]

    def load(self, params: np.ndarray) -> None:
        np.copyto(self.flat_np, params, casting="same_kind")

    def mode(self, training: bool) -> None:
        if self.training is not training:
            self.module.train(training)
            self.training = training


_RANDOM = threading.Lock()  # torch's generator is one per process: seeded passes take turns


@contextlib.contextmanager
def forked(seed: int):
    with _RANDOM, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
