"""Where a run's parts live: the cluster (``cluster``: connect; ``addresses``) and the shards
pinned on its workers (``enter``: enter_data and exit_data; ``shards``: the ShardSet;
``labels``). How the loops talk to each other is ``ppt_dask.engine.wire``."""
