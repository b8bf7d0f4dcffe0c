"""A stranger that holds connections open and says almost nothing: it opens ``per``
connections to a listener and sends one byte on each every ``every`` seconds (a handshake
that never ends unless the listener bounds it as a whole). Reusable two ways:

- in a test's own process, on one address: ``with Dripper("127.0.0.1", port, per=40): ...``
  (threads; its sockets close when the block ends);
- as a process of its own that finds the new listening ports of given processes (a run's
  workers: its loops' listeners) and drips on each, as a local stranger would::

      python tests/dripper.py PIDS PER EVERY READY DONE OUT [LISTENERS] [SECONDS]

  PIDS comma-separated; READY is created once the listeners already there are known (start
  the run then); DONE once it holds PER connections on LISTENERS new listeners; OUT gets the
  connections it opened, as JSON (``[{"to", "from"}]``), when it is stopped (SIGTERM) or
  SECONDS passed.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time


class Dripper:
    """``per`` connections to ``(host, port)``, each sent one byte every ``every`` seconds
    until :meth:`close` (a daemon thread drips; a connection the listener shut is left)."""

    def __init__(self, host: str, port: int, per: int = 40, every: float = 5.0):
        self.socks = [socket.create_connection((host, port), timeout=10) for _ in range(per)]
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, daemon=True, name="dripper")
        self._thread.start()

    @property
    def names(self) -> set:
        """The local addresses the connections come from (``host:port``), as a listener names them."""
        return {"{}:{}".format(*s.getsockname()[:2]) for s in self.socks}

    def _drip(self) -> None:
        while not self._stop.wait(self.every):
            for sock in self.socks:
                try:
                    sock.send(b"\0")
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.socks:
            sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def listening(pids: list) -> set:
    """The (ip, port) that the processes ``pids`` listen on now (TCP)."""
    import psutil

    found = set()
    for pid in pids:
        try:
            for c in psutil.Process(pid).net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN:
                    found.add((c.laddr.ip, c.laddr.port))
        except psutil.Error:
            pass
    return found


def main(argv: list) -> int:
    pids = [int(p) for p in argv[0].split(",")]
    per, every, ready, done, out = int(argv[1]), float(argv[2]), argv[3], argv[4], argv[5]
    want = int(argv[6]) if len(argv) > 6 else len(pids)
    seconds = float(argv[7]) if len(argv) > 7 else 300.0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    known, drippers, hits = listening(pids), [], []
    open(ready, "w").close()
    ends = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < ends:
        for target in sorted(listening(pids) - known):
            known.add(target)
            try:
                dripper = Dripper(target[0], target[1], per, every)
            except OSError:  # the listener closed meanwhile
                continue
            drippers.append(dripper)
            hits += [{"to": "{}:{}".format(*target), "from": name} for name in dripper.names]
            if len(drippers) == want:
                open(done, "w").close()
        stop.wait(0.01)
    with open(out, "w") as f:
        json.dump(hits, f)
    for dripper in drippers:
        dripper.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
