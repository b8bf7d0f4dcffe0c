"""The engine: the cluster and the shards placed on it, the round graphs, the synchronous
and asynchronous loops, the result, checkpoints and recovery."""
