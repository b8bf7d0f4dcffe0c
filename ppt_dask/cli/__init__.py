"""The ``ppt-dask`` command line: train, cluster, model, predict."""


def main(argv=None) -> int:
    """``ppt-dask ARGS``: the commands (:mod:`ppt_dask.cli.commands`), loaded when called."""
    from ppt_dask.cli.commands import main as run

    return run(argv)
