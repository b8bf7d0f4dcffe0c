"""The one LocalCluster that fits without a client share, started on first use and closed at exit.

A thin layer over the public :func:`ppt_dask.connect`: whatever that starts (its settings,
its security) is what the fits get. One cluster per process and per ``n_workers``; a
second size closes the first (a search's fits all ask for the same one).
"""

from __future__ import annotations

import atexit
import threading

_LOCK = threading.Lock()
_SHARED: dict = {}  # {"client": Client, "n_workers": int or None}


def is_shared(client) -> bool:
    return getattr(client, "_ppt_shared", False)


def client(n_workers: int | None = None):
    """The shared cluster's client, started now when there is none of ``n_workers`` workers."""
    import ppt_dask as ppt

    with _LOCK:
        current = _SHARED.get("client")
        if current is not None and _SHARED.get("n_workers") == n_workers and current.status == "running":
            return current
        _close_locked()
        current = ppt.connect(n_workers=n_workers, dashboard_address=None)
        current._ppt_shared = True
        _SHARED.update(client=current, n_workers=n_workers)
        return current


def _close_locked() -> None:
    current = _SHARED.pop("client", None)
    if current is not None:
        from ppt_dask.engine.placement import cluster
        cluster.close(current)


def close() -> None:
    """Close the shared cluster (also done at exit)."""
    with _LOCK:
        _close_locked()


atexit.register(close)
