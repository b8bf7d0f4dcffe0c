"""Run the notebooks top to bottom and keep their outputs, so they read on their own.

Usage::

    python notebooks/run.py                        # every notebook of this folder, in place
    python notebooks/run.py 02-where-the-time-goes.ipynb
    python notebooks/run.py --out DIR              # the executed copies go to DIR instead

Each notebook runs in a fresh kernel of this interpreter, from this folder, each cell
within ``--cell-timeout`` seconds, and is written back with what it showed: text, tables,
the bokeh plots (BokehJS inside the notebook, so a viewer without network shows them),
the progress widgets and their state. Every ``*.ipynb`` here is taken, new ones included.
The first code cell must print ``ppt.show_versions()``: its source digest is what
tests/test_notebooks.py compares with the package, so outputs of older code fail the
tests until this command has run again. CI runs it (tests/test_notebooks.py, ``-m slow``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CELL_TIMEOUT = 180  # seconds; a whole notebook should take well under three minutes on two cores
KERNEL = "ppt-dask-notebooks"
STAMP = re.compile(r"^ppt_dask \S+, source ([0-9a-f]{12})$", re.M)  # ppt.show_versions()'s first line


def notebooks(names=()) -> list[Path]:
    """The notebooks to run: the ones named, else every ``*.ipynb`` of this folder."""
    if not names:
        return sorted(HERE.glob("*.ipynb"))
    found = [Path(n) if Path(n).is_file() else HERE / n for n in names]
    missing = [str(p) for p in found if not p.is_file()]
    if missing:
        raise SystemExit(f"run.py: no notebook {', '.join(missing)}")
    return found


def first_code_cell(nb):
    return next(cell for cell in nb.cells if cell.cell_type == "code")


def stamp_of(nb) -> str | None:
    """The source digest the notebook's first code cell printed (None when it printed none)."""
    text = "".join(o.get("text", "") for o in first_code_cell(nb).get("outputs", []) if o.output_type == "stream")
    match = STAMP.search(text)
    return match.group(1) if match else None


def kernel_specs(folder: Path):
    """A kernel spec of this interpreter in ``folder`` (an installed "python3" spec could
    point at another one)."""
    from jupyter_client.kernelspec import KernelSpecManager

    (folder / KERNEL).mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                     "--IPKernelApp.log_level=ERROR"],  # not its warnings about a local TCP kernel
            "display_name": "ppt_dask notebooks", "language": "python"}
    (folder / KERNEL / "kernel.json").write_text(json.dumps(spec))
    return KernelSpecManager(kernel_dirs=[str(folder)], ensure_native_kernel=False)


def execute(path: Path, specs, cell_timeout: float = CELL_TIMEOUT):
    """Run the notebook at ``path``; the executed notebook and the seconds it took.

    Raises ``nbclient.exceptions.CellExecutionError`` at the first cell that fails, and
    ValueError when the first code cell does not call ``ppt.show_versions()``.
    """
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if "show_versions()" not in first_code_cell(nb).source:
        raise ValueError(f"{path.name}: its first code cell must call ppt.show_versions(): the tests read "
                         "the source digest it prints to tell stored outputs of older code")
    kernelspec = nb.metadata.get("kernelspec")
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
    client = NotebookClient(nb, km=km, timeout=cell_timeout, allow_errors=False, record_timing=False,
                            store_widget_state=True, resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - t0
    if kernelspec is not None:  # readers open it with their own Python kernel, not this one
        nb.metadata["kernelspec"] = kernelspec
    return nb, seconds


def main(argv=None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebooks to run (default: every *.ipynb here)")
    parser.add_argument("--out", default=None, help="write the executed notebooks here, not in place")
    parser.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT, help="seconds a cell may take")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ppt-kernels-") as folder:
        specs = kernel_specs(Path(folder))
        for path in notebooks(args.names):
            nb, seconds = execute(path, specs, args.cell_timeout)
            target = (out or path.parent) / path.name
            nbformat.write(nb, target)
            print(f"{path.name}: {seconds:.1f} s, source {stamp_of(nb)}, written to {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
