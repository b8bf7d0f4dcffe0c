"""Losses summed over rows, for :class:`ppt_dask.TorchNet`: the tree reduce adds the shards'
sums, so a loss must be a sum, never a mean.

A loss named by a string is applied with ``reduction="sum"``; a ``torch.nn`` loss module is
copied with its ``reduction`` set to ``"sum"`` (a mean over a shard's rows would weigh the
shards wrongly when the tree adds them); a plain function must return one loss per row,
which are summed. Imports torch (only :mod:`ppt_dask.nets` does).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


def cross_entropy(out, target):
    """Summed cross-entropy of logits and class labels (or class probabilities)."""
    return F.cross_entropy(out, target, reduction="sum")


def nll(out, target):
    """Summed negative log-likelihood of log-probabilities and class labels."""
    return F.nll_loss(out, target, reduction="sum")


def bce(out, target):
    """Summed binary cross-entropy of logits and 0/1 targets."""
    return F.binary_cross_entropy_with_logits(out, target, reduction="sum")


def mse(out, target):
    """Half the summed squared error (the MLP's and scikit-learn's MLPRegressor's)."""
    return 0.5 * F.mse_loss(out, target, reduction="sum")


# loss name -> (summed loss, task, what the module's outputs are)
LOSSES = {"cross_entropy": (cross_entropy, "classification", "logits"),
          "nll": (nll, "classification", "log_probs"),
          "bce": (bce, "binary", "logits"),
          "mse": (mse, "regression", "values")}
# torch.nn loss classes -> (task, outputs): their summed form is the module with reduction="sum"
LOSS_MODULES = {"CrossEntropyLoss": ("classification", "logits"), "NLLLoss": ("classification", "log_probs"),
                "BCEWithLogitsLoss": ("binary", "logits"), "BCELoss": ("binary", "probs"),
                "MSELoss": ("regression", "values"), "L1Loss": ("regression", "values"),
                "SmoothL1Loss": ("regression", "values"), "HuberLoss": ("regression", "values")}


def loss_spec(loss):
    """``(summed loss, name, task or None, outputs)`` of the ``loss`` argument."""
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}; named losses: {sorted(LOSSES)} (or a torch.nn loss "
                             "module, or a function returning per-row losses)")
        fn, task, outputs = LOSSES[loss]
        return fn, loss, task, outputs
    if isinstance(loss, nn.Module) and hasattr(loss, "reduction"):
        summed = copy.deepcopy(loss)
        summed.reduction = "sum"  # per-row sums: the shards' losses add up along the tree
        task, outputs = LOSS_MODULES.get(type(loss).__name__, (None, "values"))
        return summed, repr(loss), task, outputs
    if callable(loss):
        return _PerRow(loss), getattr(loss, "__qualname__", repr(loss)), None, "values"
    raise ValueError(f"loss must be a name, a torch.nn loss module or a function, got {loss!r}")


class _PerRow:
    """A loss function of the user's, summed: it must return one loss per row."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, out, target):
        losses = self.fn(out, target)
        if not isinstance(losses, torch.Tensor) or losses.ndim == 0 or losses.shape[0] != len(out):
            shape = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
            raise ValueError(f"the loss function returns {shape} for {len(out)} rows; it must return one loss "
                             "per row (reduction='none'), which are summed")
        return losses.sum()
