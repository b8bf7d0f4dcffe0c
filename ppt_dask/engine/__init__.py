"""The engine: the cluster and the shards placed on it (``placement/``), how the loops talk
(``wire/``: links, shared memory, the mailbox), the round kinds that use it (``rounds/``), the
head's round loop (``trainer``, ``roundloop``), the result, checkpoints and model files
(``saving/``), and recovery.

Each round kind has one worker-side step (:mod:`ppt_dask.engine.rounds.steps`), which every
transport calls; the transports differ only in how the partial sums travel:

* synchronous (Sync, PPT, Average): ``steps.sync_partial`` then ``steps.sync_update``, in
  the streamed loops (``rounds/streamloops``, the default), the one-hop graph
  (``rounds/onehop``) and the tree graph (``rounds/graph``);
* local SGD (LocalSGD): ``steps.local_start``, ``steps.local_round`` and
  ``steps.local_state``, in the streamed loops and the per-round graph (``rounds/overlap``);
* asynchronous (Async): ``ppt_dask.algorithms.asynchronous.step_gradient``, in its streamed
  loops alone (``rounds/streamasync``).
"""
