"""The math modules import numpy only: no dask, no distributed."""

import subprocess
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "ppt_dask"

# Run in a fresh interpreter. A stand-in package object replaces ppt_dask so that
# ppt_dask/__init__.py (which may import the dask-using modules) is not executed:
# only the four math modules and what they import are loaded.
SCRIPT = f"""
import sys, types
package = types.ModuleType("ppt_dask")
package.__path__ = [{str(PACKAGE_DIR)!r}]
sys.modules["ppt_dask"] = package
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
