"""Pinning by resource labels: a worker slot's label, given to a worker, and the shards sent
to it.

A shard and every task that reads it carry the slot's label as a resource (``{label: 1}``),
and only the worker that holds the label (``1e9`` of it) may run them. Giving a label is
public (``Worker.set_resources`` through ``Client.run``). The scheduler looks at the tasks
waiting for a resource again when a worker joins, not when a worker's resources change, so a
label is never moved to another worker while tasks wait for it: a repaired slot takes a new
label, and its shards are placed anew under new keys (:meth:`ppt_dask.engine.placement.shards.ShardSet.repair`).
"""

from __future__ import annotations

import numpy as np

from ppt_dask.core import keys


async def label_worker(labels: dict, dask_worker=None):
    """On a worker (``Client.run``): set its resource labels (``{label: amount}``)."""
    await dask_worker.set_resources(**labels)


def settle(shard):
    """The worker's own, aligned copy of a scattered shard.

    Scattered arrays are deserialized in place from the message's buffer and may start at
    any byte (seen here: 4 bytes past a 64-byte boundary); numpy's matmul on unaligned
    data ran 1.5x slower in every round. One copy at entry fixes it for the whole run.
    """
    return tuple(a if a.flags.aligned else np.array(a, order="C") for a in shard)


def scatter_pinned(client, shard: tuple, address: str, label: str):
    """Send a shard to ``address``; keep the worker's aligned copy of it, pinned to ``label``."""
    sent = client.scatter([shard], workers=[address], hash=False)[0]
    return client.submit(settle, sent, resources={label: 1}, key=keys.name(keys.SHARD, sent.key))
