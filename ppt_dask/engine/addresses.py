"""Where a cluster ppt_dask starts listens unless told otherwise.

No dask import here: the command line's parser shows these defaults, and ``ppt-dask --help``
or ``--version`` should not load a scheduler's worth of modules to print them.
"""

DEFAULT_DASHBOARD_ADDRESS = "127.0.0.1:8787"  # loopback: a dashboard is not for the network by default
DEFAULT_SCHEDULER_PORT = 8786  # distributed's own default port
