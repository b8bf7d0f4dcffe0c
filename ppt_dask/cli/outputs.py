"""What ``ppt-dask train`` tells and writes once a run is done (or while it runs): the live
page's address and how to reach it, the recorder with the command's settings, the run's
summary (printed, and written by ``--json``) and the files of ``--report``, ``--trace``,
``--json`` and ``--save``. :mod:`ppt_dask.cli.commands` runs the command."""

from __future__ import annotations

import json

import numpy as np

LOCAL_KEYS = ("interval", "pull", "ema", "compensate")  # the local strategy's own, in the summary


def page_lines(url: str, timeout: float = 2.0) -> list[str]:
    """The live page's address, and how to reach it when it does not answer from here: the
    dashboard of a scheduler on another machine listens on that machine's 127.0.0.1 unless
    it was started with ``--dashboard-address :8787`` (deploy/README.md, section 7)."""
    import socket
    from urllib.parse import urlsplit

    from ppt_dask.engine.placement.addresses import LOOPBACK

    lines = [f"time breakdown, live: {url}"]
    parts = urlsplit(url)
    if parts.hostname in LOOPBACK or parts.port is None:
        return lines
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=timeout).close()
    except OSError:
        local = parts._replace(netloc=f"127.0.0.1:{parts.port}").geturl()
        lines.append(f"  it does not answer from here (the dashboard listens on {parts.hostname}'s 127.0.0.1?): "
                     f"ssh -L {parts.port}:127.0.0.1:{parts.port} {parts.hostname}, then {local}")
    return lines


def recorder_with(more: dict):
    """ppt.train's recorder with ``more`` in the run's settings (what the page and report show)."""
    from ppt_dask.api import RECORDER

    def recorder(client, run_id, settings):
        return RECORDER(client, run_id, {**settings, **more})
    return recorder


def run_summary(args, s: dict, net, result) -> dict:
    """The run's summary: what the command prints and --json writes."""
    from ppt_dask.core.model import describe
    from ppt_dask.observe.breakdown import phase_table

    summary = {"dataset": args.dataset or f"{args.x} and {args.y}", "network": describe(net)["network"],
               **result.summary(),
               "lr": s["lr"], "momentum": s["momentum"], "l2": s.get("l2", 0.0), "block": s.get("block"),
               **({k: getattr(result.strategy, k) for k in LOCAL_KEYS} if s["strategy"] == "local" else {}),
               "median_round_seconds": float(np.median([r["wall_seconds"] for r in result.history]))}
    times = result.diagnostics.summary() if result.diagnostics is not None else {}
    summary["percent_not_gradient"] = times.get("percent_not_gradient")
    rows = result.breakdown()  # where a round's time goes, per phase
    summary["phases"] = phase_table(rows) if rows else None
    summary["median_head_submit_ms"] = times.get("median_head_submit_ms")
    # what the exchange moved: all workers' bytes in a round (median), and the weights' bytes
    # to hold it against (a streamed allreduce sends at most about twice them a worker)
    summary["transfer_bytes_per_round"] = times.get("transfer_bytes_per_round")
    summary["weights_bytes"] = int(net.n_params) * np.dtype(net.dtype).itemsize
    if s.get("test_r2") is not None:  # a regression on a table: R^2, not the share within tolerance
        summary["test_r2"], summary["test_accuracy"] = s["test_r2"], None
    return summary


def write_outputs(args, result, summary: dict, data=None) -> None:
    """--report, --trace, --json and --save."""
    if args.report:  # the report names the data set too
        result.settings["dataset"] = summary["dataset"]
        result.report(args.report)
    if args.trace:
        result.trace(args.trace)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)
    if args.save:  # the dataset's name and the network go into the file's summary
        from ppt_dask.engine.saving.modelfile import save_result
        # a table's classes, columns and scaling go with the model (prediction applies them)
        saved = save_result(result, args.save, classes=getattr(data, "classes", None), summary=summary,
                            preprocessing=getattr(data, "preprocessing", None))
        print(f"saved the model to {saved}")
