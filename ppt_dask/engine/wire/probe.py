"""Does an address answer like a Dask scheduler? Asked before a Client waits on it.

A Dask scheduler speaks first: on a new TCP connection it sends its handshake at once
(frames that begin with their count, a little-endian 64-bit integer). An HTTP server, the
dashboard's port 8787 for one, waits for a request instead, and a client waiting for the
handshake would wait in silence. So the probe reads for a moment; when nothing comes it
sends an HTTP request to name what listens there. Every step has a deadline.
"""

from __future__ import annotations

import socket
import struct
import time

QUIET_SECONDS = 3.0  # how long a scheduler may take to send its handshake on this probe


def check_scheduler(address: str, timeout: float = 10.0) -> None:
    """Raise OSError naming ``address`` and the likely mistake unless it answers like a
    Dask scheduler within ``timeout`` seconds. Only plain ``tcp://`` is probed (TLS and the
    other protocols start with their own handshakes)."""
    if not address.startswith("tcp://"):
        return
    host, _, port = address[len("tcp://"):].rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except (OSError, ValueError) as exc:
        raise OSError(f"cannot reach the Dask scheduler at {address!r} within {timeout:g} s: {exc}") from None
    with sock:
        first = _read(sock, min(QUIET_SECONDS, max(0.1, deadline - time.monotonic())))
        if first is None:  # silent: perhaps a server that waits for a request
            try:
                sock.sendall(b"GET / HTTP/1.0\r\nHost: " + host.encode() + b"\r\n\r\n")
            except OSError:
                pass
            reply = _read(sock, min(QUIET_SECONDS, max(0.1, deadline - time.monotonic())))
            if reply and reply.startswith(b"HTTP/"):
                raise OSError(f"{address!r} is an HTTP server, not a Dask scheduler: a dashboard port "
                              "(8787 by default) instead of the scheduler's (8786 by default)?")
            tls = "tls://" + address[len("tcp://"):]
            if reply and reply[:1] == b"\x15":  # a TLS alert record: the server speaks TLS
                raise OSError(f"{address!r} speaks TLS: connect to {tls!r} with the cluster's certificates")
            raise OSError(f"{address!r} accepts connections but does not answer like a Dask scheduler "
                          f"(no handshake within {QUIET_SECONDS:g} s): is it the scheduler's port, "
                          f"or a TLS scheduler ({tls!r} with its certificates)?")
        if first.startswith(b"SSH-"):
            raise OSError(f"{address!r} is an SSH server, not a Dask scheduler: is it the scheduler's port?")
        if first.startswith(b"HTTP/") or not _looks_like_frames(first):
            raise OSError(f"{address!r} does not answer like a Dask scheduler (it sent {first[:20]!r}): "
                          "is it the scheduler's port?")


def _read(sock: socket.socket, seconds: float) -> bytes | None:
    sock.settimeout(seconds)
    try:
        data = sock.recv(64)
    except TimeoutError:
        return None
    except OSError:
        return b""
    return data


def _looks_like_frames(data: bytes) -> bool:
    """Dask's wire format: a message starts with its number of frames (a small uint64)."""
    return len(data) >= 8 and 0 < struct.unpack("<Q", data[:8])[0] < 1000
