"""The notebooks read on their own: stored with their outputs, from the code beside them.

``python notebooks/run.py`` runs every notebook of notebooks/ and writes its outputs in.
The default suite executes none of them (they take minutes): it checks what is stored.
Every code cell ran, in order, without an error; the first printed ``ppt.show_versions()``
with the digest of the package's source as it is now (a change of the code without
running run.py again fails here); each plot has BokehJS in the notebook; each cell that
trains with ``progress=True`` or ``verbose=True`` shows the progress widget. A notebook
written here is executed (nbclient, run.py's way) to see that widget, and its text
fallback without ipywidgets. ``-m slow`` runs run.py on each notebook as its usage prints
it; ``-m browser`` opens each stored notebook as a viewer does (nbconvert's HTML, no
kernel) in Chromium and counts the plots drawn.
"""

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from ppt_dask.versions import source_digest

import system
from test_dashboard import browser  # noqa: F401  (the Chromium fixture, for the viewer's test)

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
WIDGET = "application/vnd.jupyter.widget-view+json"
BOKEH_PLOT = "application/vnd.bokehjs_exec.v0+json"
BOKEH_LOAD = "application/vnd.bokehjs_load.v0+json"
REGENERATE = "run `python notebooks/run.py` and commit the notebooks"


def _run_py():
    """notebooks/run.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("notebooks_run", NOTEBOOK_DIR / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUN = _run_py()


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory):
    return RUN.kernel_specs(tmp_path_factory.mktemp("kernels"))


def _outputs(cell, kind=None):
    return [o for o in cell.get("outputs", []) if kind is None or kind in o.get("data", {})]


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS][:1] == ["01-quickstart.ipynb"]
    assert RUN.notebooks() == NOTEBOOKS  # run.py takes every notebook of the folder


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_with_outputs_of_the_current_code(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), \
        f"{path.name}: not every cell ran, in order: {REGENERATE}"
    errors = [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: a cell failed: {errors[0].get('ename')}"
    assert sum(len(cell.outputs) for cell in code) >= len(code) // 2  # it shows things
    assert "show_versions()" in code[0].source, f"{path.name}: the first code cell must call ppt.show_versions()"
    stamp = RUN.stamp_of(nb)
    assert stamp == source_digest(), (f"{path.name}: its outputs came from source {stamp}, the package is now "
                                      f"{source_digest()}: {REGENERATE}")


_RECORDS = re.compile(r"^\s*[\[(]?\s*\{\s*['\"]")  # "[{'phase': ...", "{'round': ..." as Python prints them


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_output_is_a_bare_repr_of_records(path):
    """Records (a list of dicts, a dict) show as a table or a drawing (ppt_dask/observe/display.py),
    or are printed in words: never 60 lines of a repr."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        for out in cell.outputs:
            if out.output_type in ("execute_result", "display_data") and set(out.data) == {"text/plain"}:
                text = out.data["text/plain"]
                assert not _RECORDS.match(text), f"{path.name}, code cell {i + 1} shows records: {text[:80]}"
            if out.output_type == "stream":
                lines = [line for line in out.text.splitlines() if _RECORDS.match(line)]
                assert not lines, f"{path.name}, code cell {i + 1} prints records: {lines[0][:80]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_plots_and_progress_are_stored_for_a_viewer(path):
    """A cell that shows a bokeh plot stored it, with BokehJS in the notebook (no network
    needed to draw it); a cell that trains with progress shows the widget, its last state
    kept in the notebook and a text copy for viewers without widgets."""
    nb = nbformat.read(path, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    plotted = [cell for cell in code if "show(plot)" in cell.source]
    assert all(_outputs(cell, BOKEH_PLOT) for cell in plotted), f"{path.name}: a plot is missing: {REGENERATE}"
    if plotted:
        loads = [o for cell in code for o in _outputs(cell, BOKEH_LOAD)]
        assert loads and all("cdn.bokeh.org" not in o["data"]["application/javascript"] for o in loads)
        assert all(len(o["data"]["application/javascript"]) > 500_000 for o in loads)  # BokehJS itself
    shown = [cell for cell in code if "progress=True" in cell.source or "verbose=True" in cell.source]
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for cell in shown:
        widgets = _outputs(cell, WIDGET)
        assert widgets, f"{path.name}: no progress widget in the cell that trains with it: {REGENERATE}"
        for output in widgets:
            assert output["data"][WIDGET]["model_id"] in state  # the widget's last state is stored
            assert output["data"]["text/plain"].startswith("epoch ")  # and its text


PROGRESS_NOTEBOOK = [
    "import ppt_dask as ppt\nppt.show_versions()\nclient = ppt.connect(n_workers=2, processes=False)",
    "data = ppt.datasets.parity(8)\nshards = ppt.enter_data(client, data.X, data.y, n_shards=2)\n"
    "result = ppt.train(ppt.MLP((8, 16, 1), hidden='tanh', output='sigmoid'), shards, ppt.Sync(lr=2.0),\n"
    "                   ppt.Stop(max_epochs=30), progress=True)\nppt.exit_data(shards)",
    "clf = ppt.PPTClassifier(hidden_layer_sizes=(8,), max_iter=5, verbose=True, random_state=0)\n"
    "clf.fit(data.X, data.y)\nclient.close()",
]


def _execute_here(tmp_path, cells, kernel_specs):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "progress.ipynb"
    nbformat.write(nb, path)
    executed, _ = RUN.execute(path, kernel_specs, cell_timeout=120)
    return executed


def test_a_notebook_shows_the_progress_widget_as_it_trains(tmp_path, kernel_specs):
    """nbclient runs a notebook as run.py does: the cell of ppt.train(progress=True) and the
    cell of PPTClassifier(verbose=True) each show a tqdm widget, its last state the run's
    end (the value at the epochs run, a bar that is not red) and scikit-learn's lines."""
    nb = _execute_here(tmp_path, PROGRESS_NOTEBOOK, kernel_specs)
    train, fit = nb.cells[1], nb.cells[2]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    for cell, epochs in ((train, 30), (fit, 5)):
        (widget,) = _outputs(cell, WIDGET)
        box = state[widget["data"][WIDGET]["model_id"]]["state"]
        children = [state[child.split("IPY_MODEL_")[1]] for child in box["children"]]
        bar = next(c["state"] for c in children if c["model_name"] == "FloatProgressModel")
        assert bar["max"] == epochs and 1 <= bar["value"] <= epochs and bar["bar_style"] == "success"
        text = widget["data"]["text/plain"]  # what a viewer without widgets shows: the end of the run
        ran, most = (float(x) for x in text.split()[1].split("/"))  # a round may end past the last epoch
        assert text.startswith("epoch ") and most == epochs and ran >= bar["value"] - 1e-9, text
        assert "max epochs" in text or "stopping rule" in text, text
        right = next(c["state"]["value"] for c in children[2:] if c["model_name"] == "HTMLModel")
        assert "loss" in right and "error" in right and "ms/round" in right, right
        if cell is train:  # full-batch rounds without a target: all 30 epochs ran
            assert bar["value"] == 30 and text.startswith("epoch 30.00/30 ")
    printed = "".join(o.get("text", "") for o in fit.outputs if o.output_type == "stream")
    assert "Iteration 1, loss = " in printed and "Iteration 5, loss = " in printed


def test_without_ipywidgets_a_notebook_gets_the_text_bar(tmp_path, kernel_specs):
    """ipywidgets is an extra: without it the same cell shows tqdm's text bar (carriage
    returns, which the notebook's output area redraws in place) and a note of what to install."""
    cells = ["import sys\nsys.modules['ipywidgets'] = None  # as if it were not installed\n" + PROGRESS_NOTEBOOK[0],
             PROGRESS_NOTEBOOK[1]]
    nb = _execute_here(tmp_path, cells, kernel_specs)
    train = nb.cells[1]
    assert not _outputs(train, WIDGET)
    text = "".join(o.get("text", "") for o in train.outputs if o.output_type == "stream")
    assert "\r" in text and "epoch 30.00/30 [" in text and "patterns/s" in text, text
    assert "pip install 'ppt_dask[notebook]'" in text


def test_run_py_refuses_a_notebook_that_does_not_name_its_code(tmp_path, kernel_specs):
    path = tmp_path / "05-new.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")]), path)
    with pytest.raises(ValueError, match="first code cell must call ppt.show_versions"):
        RUN.execute(path, kernel_specs)


@pytest.mark.slow  # 20-90 s each: CI runs them; the default suite checks what they stored
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    """``python notebooks/run.py NAME --out DIR``, as its usage prints it: the notebook runs
    top to bottom in a fresh kernel, each cell within run.py's limit, and comes out as the
    default suite wants it stored."""
    nb = nbformat.read(path, as_version=4)
    if any("import torch" in c.source for c in nb.cells) and importlib.util.find_spec("torch") is None:
        system.missing(f"{path.name} needs torch (pip install 'ppt_dask[torch]')")
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, str(NOTEBOOK_DIR / "run.py"), path.name, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=20 * 60)
    seconds = time.perf_counter() - t0
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.startswith(f"{path.name}: ") and f"source {source_digest()}" in run.stdout
    test_notebook_is_stored_with_outputs_of_the_current_code(tmp_path / path.name)
    test_plots_and_progress_are_stored_for_a_viewer(tmp_path / path.name)
    print(f"\n{path.name}: {seconds:.1f} s")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_viewer_draws_the_stored_plots(path, browser, tmp_path):  # noqa: F811 (a fixture)
    """nbconvert's HTML of the stored notebook (what nbviewer serves; no kernel, no network)
    opened in Chromium: every stored bokeh plot is drawn."""
    from nbconvert import HTMLExporter

    nb = nbformat.read(path, as_version=4)
    plots = sum(len(_outputs(cell, BOKEH_PLOT)) for cell in nb.cells if cell.cell_type == "code")
    html, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    page = tmp_path / f"{path.stem}.html"
    page.write_text(html)
    browser.get(page.as_uri())
    script = ("return (window.Bokeh && Bokeh.documents) ? Bokeh.documents.length : -1;")
    deadline = time.monotonic() + 60
    drawn = browser.execute_script(script)
    while plots and drawn < plots and time.monotonic() < deadline:  # a notebook without plots has none to wait for
        time.sleep(0.5)
        drawn = browser.execute_script(script)
    assert drawn == plots if plots else drawn in (-1, 0), (drawn, plots)
    views = browser.execute_script("return document.querySelectorAll('.bk-Figure, .bk-Canvas, canvas').length")
    assert views >= plots, (views, plots)


