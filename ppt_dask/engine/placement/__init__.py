"""Where a run's parts live: the cluster (``cluster``, ``addresses``, ``probe``, ``messages``),
the shards pinned on its workers (``enter``: enter_data and exit_data; ``shards``: the
ShardSet; ``labels``), and what the streamed loops talk through (``links``:
worker to worker, admitted by ``handshake``, over what ``schemes`` carries; ``sharedmem``:
one host's memory; ``mailbox``: a loop to the head)."""
