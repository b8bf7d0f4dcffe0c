"""Every notebook in notebooks/ runs top to bottom without an error.

Each is executed with nbclient in a fresh kernel of *this* interpreter (a kernel spec
written to a temporary folder, so an installed "python3" spec pointing elsewhere cannot be
picked), from the notebooks folder, with a time limit per cell. The notebooks are kept
with their outputs stripped.
"""

import importlib.util
import json
import sys
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

import system

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 120  # seconds; a notebook as a whole should take under two minutes
KERNEL = "ppt-dask-tests"


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernels")
    (root / KERNEL).mkdir()
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "ppt_dask tests", "language": "python"}
    (root / KERNEL / "kernel.json").write_text(json.dumps(spec))
    return KernelSpecManager(kernel_dirs=[str(root)], ensure_native_kernel=False)


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS][:1] == ["01-quickstart.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stripped(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip the outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, kernel_specs):
    nb = nbformat.read(path, as_version=4)
    if any("import torch" in c.source for c in nb.cells) and importlib.util.find_spec("torch") is None:
        system.missing(f"{path.name} needs torch (pip install 'ppt_dask[torch]')")
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=kernel_specs)
    runner = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, allow_errors=False,
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    t0 = time.perf_counter()
    runner.execute()  # raises CellExecutionError on the first failing cell
    seconds = time.perf_counter() - t0
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    print(f"\n{path.name}: {seconds:.1f} s")
