"""What the loops' links carry for each scheme a worker may have, and the TLS they use.

The links (:mod:`ppt_dask.engine.wire.links`) are plain sockets or TLS sockets on the
worker's own host: TLS for a ``tls://`` or ``wss://`` worker, with the worker's own contexts
(a context that cannot be made is an error naming why, never plaintext links on a TLS
cluster), plaintext for ``tcp://`` or ``ws://``, the loopback for a threads cluster
(``inproc://``: one process). A scheme they cannot carry (``ucx://``) is refused in one line,
with the way out, before any round (:func:`check_scheme`, asked by the head).
"""

from __future__ import annotations

import ssl

from distributed.comm import get_address_host

# What the links carry for each scheme a worker may have: plaintext or TLS on the worker's host
CARRIED = {"tcp": "tcp", "ws": "tcp", "tls": "tls", "wss": "tls"}
LOOPBACK = ("inproc",)  # one process (a threads cluster): tcp on the loopback


def check_scheme(worker_address: str) -> str:
    """``worker_address``'s scheme if the links can carry it, else a ``ValueError`` in one
    line with the way out (the per-round graphs travel over Dask's own comms, any scheme)."""
    scheme = worker_address.partition("://")[0] if "://" in worker_address else "tcp"
    if scheme not in CARRIED and scheme not in LOOPBACK:
        raise ValueError(f"the streamed rounds' links cannot carry {scheme}:// (worker {worker_address}): "
                         f"use exchange='all' (--exchange all), whose rounds travel over Dask's own comms, "
                         "or a tcp:// or tls:// cluster")
    return scheme


def listen_host(worker_address: str) -> tuple[str, str]:
    """The scheme (tcp or tls) and host a loop's links listen on: TLS for a ``tls://`` or
    ``wss://`` worker, plaintext for ``tcp://`` or ``ws://``, on the worker's own host; tcp on
    the loopback for a worker of a threads cluster (``inproc://``: one process). A scheme the
    links cannot carry: :func:`check_scheme`'s error."""
    scheme = check_scheme(worker_address)
    if scheme in LOOPBACK:
        return "tcp", "127.0.0.1"
    return CARRIED[scheme], get_address_host(worker_address)


def tls_contexts(slot: int, worker_address: str, security) -> tuple:
    """The server- and client-side TLS contexts of a loop on a TLS worker: the worker's own
    (``security``: its ``distributed.security.Security``); a ``ValueError`` naming what is
    missing where they cannot be made (never plaintext links on a TLS cluster)."""
    where = f"worker slot {slot}: a TLS worker ({worker_address})"
    if security is None:
        raise ValueError(f"{where} without its security settings")
    try:
        server = security.get_listen_args("worker").get("ssl_context")
        client = security.get_connection_args("worker").get("ssl_context")
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise ValueError(f"{where}: its TLS context cannot be made: {exc!r}") from exc
    if server is None or client is None:
        raise ValueError(f"{where} whose security settings make no TLS context (no tls_ca_file and "
                         "tls_worker_cert): the links refuse to fall back to plaintext")
    return server, client
