"""Where a cluster ppt_dask starts listens unless told otherwise, and the loopback names.

No dask import here: the command line's parser shows these defaults, and ``ppt-dask --help``
or ``--version`` should not load a scheduler's worth of modules to print them.
"""

DEFAULT_DASHBOARD_ADDRESS = "127.0.0.1:8787"  # loopback: a dashboard is not for the network by default
DEFAULT_SCHEDULER_PORT = 8786  # distributed's own default port
LOOPBACK = {"localhost", "127.0.0.1", "::1"}  # the names of this machine on the loopback interface
