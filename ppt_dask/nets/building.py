"""Building the module of a :class:`ppt_dask.TorchNet`: import paths (``package.module:function``),
builders, and the layout of its trainable parameters. Imports torch (only :mod:`ppt_dask.nets`
does).
"""

from __future__ import annotations

import importlib

import torch
from torch import nn


def load_builder(path: str):
    """The object at ``"package.module:attribute"`` (the convention of uvicorn and gunicorn);
    a ValueError naming the path when it cannot be imported or has no such attribute."""
    module_name, sep, attribute = str(path).partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"a module path is 'package.module:function', got {path!r}")
    try:
        target = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} of {path!r} ({exc})") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{module_name!r} has no {attribute!r} ({path!r})")
        target = getattr(target, part)
    return target


def path_of(builder) -> str | None:
    """``"module:qualname"`` when importing it gives ``builder`` back, else None."""
    module, name = getattr(builder, "__module__", None), getattr(builder, "__qualname__", None)
    if not module or not name or module == "__main__" or "<" in name:
        return None
    try:
        return f"{module}:{name}" if load_builder(f"{module}:{name}") is builder else None
    except ValueError:
        return None


def built(builder) -> nn.Module:
    module = builder()
    if not isinstance(module, nn.Module):
        name = getattr(builder, "__qualname__", repr(builder))
        raise ValueError(f"{name}() must return a torch.nn.Module, got a {type(module).__name__}")
    return module


def uncovered(module: nn.Module):
    """Names of trainable parameters owned by a submodule without ``reset_parameters``."""
    for prefix, sub in module.named_modules():
        if callable(getattr(sub, "reset_parameters", None)):
            continue
        for name, p in sub.named_parameters(recurse=False):
            if p.requires_grad:
                yield f"{prefix}.{name}" if prefix else name


def materialise(module: nn.Module, layout) -> None:
    """Give trainable parameters sent without their values (empty) their shapes back."""
    shapes = dict(layout)
    for name, p in module.named_parameters():
        if p.requires_grad and tuple(p.shape) != shapes[name]:
            p.data = torch.zeros(shapes[name], dtype=p.dtype)


def shown(layout) -> str:
    text = ", ".join(f"{n} {list(s)}" for n, s in layout[:4])
    return text + (f", ... ({len(layout)} in all)" if len(layout) > 4 else "")
