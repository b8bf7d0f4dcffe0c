"""The wire: how the loops talk. Worker to worker over links of our own (``links``: sockets,
and ssl for TLS) or distributed's comms (``commlinks``), both admitted by ``handshake`` and
listening on what ``schemes`` carries, their per-peer queues (``inboxes``); one host's memory
(``sharedmem``); a loop to the head (``mailbox``); and the scheduler's side of the talk
(``messages``: how often it sends; ``probe``: whether it answers).

It sits below ``rounds/`` (which sends a round's sums through it) and beside ``placement/``
(where data and workers are): it imports nothing of either (``tests/test_layers.py``)."""
