"""The round kinds and the transports that carry them: which one a run uses (``choose``), the
streamed loops (``stream``, ``streamasync``) and their allreduce (``allreduce``), the per-round
task graphs (``graph``: the tree of map, reduce and update; ``onehop``; ``overlap``), and the
graphs' plumbing (``taskspec``, ``taskmeta``)."""
