"""A strategy by the name users type (``--strategy``, ``PPTClassifier(strategy=...)``)."""

from __future__ import annotations

from ppt_dask.algorithms.asynchronous import Async
from ppt_dask.algorithms.average import Average
from ppt_dask.algorithms.localsgd import LocalSGD
from ppt_dask.algorithms.strategies import PPT, Sync, _Base

STRATEGIES: dict[str, type[_Base]] = {"epoch": Sync, "block": Sync, "ppt": PPT, "average": Average}


def make(name: str, **params):
    """A strategy by the name users type (``--strategy``); None values take defaults."""
    if name == "async":
        return Async(**{k: v for k, v in params.items() if v is not None})
    if name == "local":
        return LocalSGD(**{k: v for k, v in params.items() if v is not None and k in LocalSGD.__dataclass_fields__})
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {sorted([*STRATEGIES, 'async', 'local'])}")
    cls = STRATEGIES[name]
    params = {k: v for k, v in params.items() if v is not None and k in cls.__dataclass_fields__}
    if name == "epoch":
        params.pop("block", None)
    elif name == "block" and params.get("block") is None:
        raise ValueError("strategy 'block' needs a block size (--block N)")
    return cls(**params)
