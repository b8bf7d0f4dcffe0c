"""What the commands print for a person: aligned result lines, progress, durations.

``--json`` keeps the full precision; these lines round to what a reader needs (``test
accuracy  95.3 %``, ``wall time  1.84 s``) and say in words why a run stopped.
"""

from __future__ import annotations

import math
import sys
import time


def duration(seconds: float) -> str:
    """``0.042 s``, ``1.84 s``, ``12.3 s``, ``3 min 05 s``, ``2 h 04 min``."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    if seconds < 1:
        return f"{seconds:.3f} s"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def stop_reason(stopped_because: str, learned: bool, target_error) -> str:
    """Why a run stopped, in words."""
    if stopped_because == "target_error":
        return "target reached"
    if stopped_because == "stopped":
        return "stopping rule"
    if stopped_because.startswith("diverged"):
        return stopped_because.replace("diverged", "diverged (loss not finite)", 1)
    if stopped_because == "max_epochs":
        return "max epochs" + ("" if target_error is None or learned else
                               f" (target of {100 * target_error:g} % error not reached)")
    return stopped_because.replace("_", " ")


def _network(shown) -> str:
    """An MLP's widths as ``784-64-64-10``; another network's name as it is."""
    return "-".join(map(str, shown)) if isinstance(shown, (list, tuple)) else str(shown)


def result_lines(summary: dict) -> str:
    """The result of ``ppt-dask train`` as aligned lines with units."""
    rows = [("stopped", stop_reason(summary["stopped_because"], summary["learned"], summary.get("target_error")))]
    if summary.get("test_accuracy") is not None:
        rows.append(("test accuracy", f"{100 * summary['test_accuracy']:.2f} %"))
    rows.append(("train error", f"{100 * summary['train_error_rate']:.2f} %"))
    rows.append(("train loss", f"{summary['train_loss']:.4g}"))
    rows.append(("epochs", f"{summary['epochs']:.4g} ({summary['rounds']} rounds)"))
    rows.append(("wall time", duration(summary["wall_seconds"])))
    if summary.get("median_round_seconds") is not None:
        seconds = summary["median_round_seconds"]
        shown = duration(seconds) if seconds >= 1 else f"{1e3 * seconds:.3g} ms"
        rows.append(("round time", f"{shown} (median)"))
    if summary.get("percent_not_gradient") is not None:
        rows.append(("not gradient", f"{summary['percent_not_gradient']:.1f} % of the workers' time"))
    head = (f"{summary['dataset']}: strategy {summary['strategy']}, {summary['workers']} "
            f"worker{'s' if summary['workers'] != 1 else ''}, network {_network(summary['network'])}")
    width = max(len(k) for k, _ in rows)
    return "\n".join([head, *(f"  {k:<{width}}  {v}" for k, v in rows)])


class Bar:
    """Progress of a known total: a bar on a terminal, a plain line every few seconds otherwise.

    Parameters
    ----------
    total : float
        The amount at the end (epochs, rounds).
    unit : str
        What is counted ("epoch", "round").
    every : float
        Seconds between two plain lines (a terminal's bar is redrawn every 0.2 s).
    stream : file
        Where to write (standard error).
    """

    WIDTH = 24

    def __init__(self, total: float, unit: str = "epoch", every: float = 2.0, stream=None):
        self.total, self.unit, self.stream = float(total), unit, stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = 0.2 if self.tty else every
        self.t0, self.last, self.drawn = time.perf_counter(), -math.inf, False

    def update(self, done: float, extra: str = "", force: bool = False, elapsed: float | None = None) -> None:
        """Show ``done`` of the total; ``elapsed``: the seconds the work itself has taken so far
        (default: since the bar was made), for the rate and the time left."""
        now = time.perf_counter()
        if not force and now - self.last < self.every:
            return
        self.last = now
        elapsed = now - self.t0 if elapsed is None else elapsed
        share = min(1.0, done / self.total) if self.total > 0 else 1.0
        rate = done / elapsed if elapsed > 0 else 0.0
        left = (self.total - done) / rate if rate > 0 else math.inf
        head = f"{self.unit} {done:.2f}/{self.total:g}" if self.unit == "epoch" else f"{self.unit} {done:g}/{self.total:g}"
        tail = f"{rate:.3g} {self.unit}s/s, {duration(max(0.0, left))} left" + (f"  {extra}" if extra else "")
        if self.tty:
            filled = int(round(share * self.WIDTH))
            self.stream.write(f"\r{head} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {100 * share:3.0f}%  {tail}\033[K")
            self.drawn = True
        else:
            self.stream.write(f"{head} ({100 * share:.0f} %)  {tail}\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line on a terminal."""
        if self.tty and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


class EpochProgress:
    """Epochs of the total, rate and time left: a bar on a terminal, plain lines otherwise."""

    def __init__(self, total_epochs: float, stream=None):
        self.bar = Bar(total_epochs, "epoch", stream=stream or sys.stderr)

    def __call__(self, record: dict) -> None:
        self.bar.update(record["epoch"], f"loss {record['loss']:.4g}  error {100 * record['error_rate']:.2f} %  "
                        f"{1e3 * record['wall_seconds']:.4g} ms/round", elapsed=record.get("elapsed_seconds"))

    def close(self) -> None:
        self.bar.close()
