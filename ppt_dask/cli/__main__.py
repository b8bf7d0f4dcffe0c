"""``python -m ppt_dask.cli ...`` is ``ppt-dask ...``."""

import sys

from ppt_dask.cli import main

sys.exit(main())
