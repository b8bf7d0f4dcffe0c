"""The round kinds and how their sums travel (over ``ppt_dask.engine.wire``).

Which one a run uses: ``choose``. Each round kind's worker-side step, written once:
``steps``. The streamed rounds, the default: the head's side (``stream``), the loops
(``streamloops``), their allreduce (``allreduce``), the asynchronous loops
(``streamasync``). The per-round task graphs, kept to show what the head-worker arrangement
costs: ``graph`` (the tree of map, reduce and update), ``onehop``, ``overlap`` (local SGD),
and their plumbing (``taskspec``, ``taskmeta``).
"""
