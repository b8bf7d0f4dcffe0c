"""The engine: the cluster and the shards placed on it (``placement/``), the round kinds and
the transports that carry them (``rounds/``), the head's round loop (``trainer``), the result,
checkpoints and model files (``saving/``), and recovery."""
