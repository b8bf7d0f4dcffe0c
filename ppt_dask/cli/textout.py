"""What the commands print for a person: aligned result lines, durations, why a run stopped.

``--json`` keeps the full precision; these lines round to what a reader needs (``test
accuracy  95.3 %``, ``wall time  1.84 s``) and say in words why a run stopped. The progress
while a run goes is :mod:`ppt_dask.progress`'s, the same in a notebook and in Python.
"""

from __future__ import annotations

from ppt_dask.progress import duration, stop_reason

__all__ = ["duration", "result_lines", "stop_reason"]


def _network(shown) -> str:
    """An MLP's widths as ``784-64-64-10``; another network's name as it is."""
    return "-".join(map(str, shown)) if isinstance(shown, (list, tuple)) else str(shown)


def _promise(reproducible: str | None, workers: int) -> str:
    """What the run repeats bit for bit, for the head line (nothing for an asynchronous run)."""
    if reproducible == "same-p":
        return f", the same bits on {workers} worker{'s' if workers != 1 else ''} (--reproducible same-p)"
    if reproducible == "any-p":
        return ", the same bits on any number of workers (--reproducible any-p)"
    return ""


def result_lines(summary: dict) -> str:
    """The result of ``ppt-dask train`` as aligned lines with units."""
    rows = [("stopped", stop_reason(summary["stopped_because"], summary["learned"], summary.get("target_error")))]
    if summary.get("test_accuracy") is not None:
        rows.append(("test accuracy", f"{100 * summary['test_accuracy']:.2f} %"))
    if summary.get("test_r2") is not None:  # a regression on a table of one's own
        rows.append(("test R^2", f"{summary['test_r2']:.4f}"))
    rows.append(("train error", f"{100 * summary['train_error_rate']:.2f} %"))
    rows.append(("train loss", f"{summary['train_loss']:.4g}"))
    rows.append(("epochs", f"{summary['epochs']:.4g} ({summary['rounds']} rounds)"))
    rows.append(("wall time", duration(summary["wall_seconds"])))
    if summary.get("median_round_seconds") is not None:
        seconds = summary["median_round_seconds"]
        shown = duration(seconds) if seconds >= 1 else f"{1e3 * seconds:.3g} ms"
        rows.append(("round time", f"{shown} (median)"))
    if summary.get("dropped_shares") is not None:  # asynchronous: gradients too stale to send
        shares = [f"{100 * share:.1f} % of {'worker slot' if i == 0 else 'slot'} {i}'s"
                  for i, share in enumerate(summary["dropped_shares"])]
        rows.append(("dropped", f"{', '.join(shares)} gradients (too stale)"))
    sent, workers = summary.get("transfer_bytes_per_round"), summary.get("workers") or 1
    if sent and summary.get("weights_bytes"):  # what one worker sent of a round, against the weights
        rows.append(("sent a round", f"{sent / workers / 1e3:.4g} kB a worker "
                                     f"({sent / workers / summary['weights_bytes']:.2f}x the weights)"))
    if summary.get("percent_not_gradient") is not None:
        rows.append(("not gradient", f"{summary['percent_not_gradient']:.1f} % of the workers' time"))
    if summary.get("worker_settings") not in (None, "as found"):  # what the loops set in the workers
        rows.append(("worker settings", summary["worker_settings"]))
    head = (f"{summary['dataset']}: strategy {summary['strategy']}, {summary['workers']} "
            f"worker{'s' if summary['workers'] != 1 else ''}, network {_network(summary['network'])}"
            f"{_promise(summary.get('reproducible'), summary['workers'])}")
    width = max(len(k) for k, _ in rows)
    return "\n".join([head, *(f"  {k:<{width}}  {v}" for k, v in rows)])
