"""The math modules import numpy only: no dask, no distributed."""

import subprocess
import sys

# Run in a fresh interpreter: the package's front imports nothing until a name is used,
# so only the four math modules and what they import are loaded.
SCRIPT = """
import sys
import ppt_dask.core.activations, ppt_dask.core.losses, ppt_dask.core.network, ppt_dask.core.optimizers
loaded = sorted(name for name in sys.modules
                if name.split(".")[0] in ("dask", "distributed", "bokeh"))
assert not loaded, loaded
print("ok")
"""


def test_math_modules_do_not_import_dask():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
