"""The documentation's content, read from its sources and from the built site.

* **The reference at numpydoc's standard**: every public name has a summary line, a
  ``Parameters`` section naming each of its parameters (where it takes any), ``Returns``
  (where it returns something), ``Examples``, and ``Attributes`` for the classes whose
  attributes users read; the Examples run (``doctest``: those that need no cluster in the
  default suite, those that start a LocalCluster too).
* **The user guide speaks to users**: no page outside the developer guide names a source
  path (``ppt_dask/...``, ``tests/...``), no code line is longer than 88 characters, no
  fenced block goes without a language (plain text is marked ``text``), no source paper is
  called by its file number.
* **One source for every figure**: the Benchmarks page writes no number of its own; each
  number it shows is read from ``graphs/out``.
* **The site** (``docs/_build/html`` as ``.ci/run`` builds it, or a build of its own into a
  temporary folder): under 8 MB, no "seed 00x", every paper named is a link to its source
  entry, BokehJS stored once.
"""

from __future__ import annotations

import doctest
import html
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ppt_dask
from ppt_dask import _EXPORTS

import system

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDE = sorted((DOCS / "guide").glob("*.md"))
DEV = sorted((DOCS / "dev").glob("*.md"))
BUILT = DOCS / "_build" / "html"
MAX_LINE = 88
MAX_SITE_BYTES = 8 * 1024 * 1024
_FENCE = re.compile(r"^(`{3,})([^\n`]*)\n(.*?)^\1\s*$", re.S | re.M)
_SOURCE_PATH = re.compile(r"\b(?:ppt_dask|tests)/[\w./-]*")
# a paper by its file number ("seed 001", "paper 002", "001's", "(004)") instead of its authors
_PAPER_NUMBER = re.compile(r"\b(?:seeds?|papers?) 00[0-4]\b|\b00[0-4]'s\b|\(00[0-4]\)", re.I)
# public classes whose attributes users read: their docstrings say what each one is
WITH_ATTRIBUTES = ("Result", "ShardSet", "Model", "PPTClassifier", "PPTRegressor", "TorchNet")
# made by ppt_dask, never by users (ppt.train, ppt.enter_data): their fields are Attributes,
# and the reference shows no constructor signature (docs/conf.py, ENGINE_MADE)
ENGINE_MADE = ("Result", "ShardSet")
# a strategy's fields that its check() fills from the data before a run (the shards' sizes,
# the run's seed): internal, hidden from the reference's signatures (docs/conf.py)
FILLED_BY_CHECK = ("shard_rows", "seed", "replicated")
STRATEGIES = ("Sync", "PPT", "Average", "LocalSGD", "Async")


def section(doc: str, name: str) -> str | None:
    """The body of a numpydoc section (None when there is none)."""
    match = re.search(rf"^{name}\n-{{{len(name)}}}\n(.*?)(?=^\w[\w ]*\n-{{3,}}\n|\Z)", doc, re.S | re.M)
    return match.group(1) if match else None


def documented_parameters(doc: str) -> set[str]:
    body = section(doc, "Parameters") or ""
    names: set[str] = set()
    for line in body.splitlines():
        if line and not line[0].isspace():  # "name : type", "a, b : type", "**kwargs"
            names |= {n.strip().lstrip("*") for n in line.split(" : ")[0].split(",")}
    return names


def signature_parameters(obj) -> list[str]:
    """The parameters a docstring must name (none for ``(*args, **kwargs)``: a protocol, a
    warning class)."""
    try:
        parameters = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return []
    if [p.kind for p in parameters] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        return []
    return [p.name for p in parameters if p.name != "self"]


def returns_something(obj) -> bool:
    if inspect.isclass(obj):
        return False
    annotation = inspect.signature(obj).return_annotation
    return annotation not in (None, "None", inspect.Signature.empty)


PUBLIC = sorted(_EXPORTS)


NO_TORCH = importlib.util.find_spec("torch") is None  # ppt.TorchNet cannot be read without it


@pytest.mark.parametrize("name", PUBLIC)
def test_each_public_name_has_numpydocs_sections(name):
    if name == "TorchNet" and NO_TORCH:
        system.missing("ppt.TorchNet's docstring is read with the [torch] extra")
    obj = getattr(ppt_dask, name)
    doc = inspect.getdoc(obj) or ""
    assert doc and doc.splitlines()[0].strip(), f"ppt.{name} has no summary line"
    wanted = [] if name in ENGINE_MADE else signature_parameters(obj)
    if name in STRATEGIES:
        wanted = [p for p in wanted if p not in FILLED_BY_CHECK]
    if wanted:
        assert section(doc, "Parameters") is not None, f"ppt.{name}'s docstring has no Parameters section"
        missing = [p for p in wanted if p not in documented_parameters(doc)]
        assert not missing, f"ppt.{name}'s Parameters section does not name {missing}"
    if returns_something(obj):
        assert section(doc, "Returns") is not None, f"ppt.{name} returns a value but its docstring has no Returns"
    assert section(doc, "Examples") is not None, f"ppt.{name}'s docstring has no Examples section"
    if name in WITH_ATTRIBUTES:
        assert section(doc, "Attributes") is not None, f"ppt.{name}'s docstring has no Attributes section"


def test_the_test_hook_is_not_public_but_importable_from_testing():
    assert "Slowed" not in ppt_dask.__all__ and not hasattr(ppt_dask, "Slowed")
    from ppt_dask.testing import Slowed  # noqa: F401


def _examples(obj) -> doctest.DocTest:
    doc = inspect.getdoc(obj) or ""
    return doctest.DocTestParser().get_doctest(section(doc, "Examples") or "", {"ppt": ppt_dask, "np": np},
                                               getattr(obj, "__qualname__", str(obj)), None, 0)


def _needs_a_cluster(obj) -> bool:
    return "ppt.connect(" in (section(inspect.getdoc(obj) or "", "Examples") or "")


def _run(test: doctest.DocTest) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0 and test.examples, "".join(out) or f"{test.name} has no example to run"


@pytest.mark.parametrize("name", [n for n in PUBLIC if (n == "TorchNet" and NO_TORCH)
                                  or not _needs_a_cluster(getattr(ppt_dask, n))])
def test_examples_run_without_a_cluster(name):
    if name == "TorchNet" and NO_TORCH:
        system.missing("ppt.TorchNet's example needs the [torch] extra")
    _run(_examples(getattr(ppt_dask, name)))


@pytest.mark.slow  # each starts a LocalCluster of two worker processes: about a minute in all
@pytest.mark.parametrize("name", [n for n in PUBLIC if not (n == "TorchNet" and NO_TORCH)
                                  and _needs_a_cluster(getattr(ppt_dask, n))])
def test_examples_run_on_a_local_cluster(name):
    """The examples that start their own LocalCluster (``ppt.connect``) and close it."""
    _run(_examples(getattr(ppt_dask, name)))


def test_the_package_docstring_describes_the_streamed_rounds():
    """What ``help(ppt_dask)`` shows: one loop per worker, no task per round."""
    doc = inspect.getdoc(ppt_dask)
    assert "one long task per worker" in doc and "No task is scheduled per round" in doc
    assert "tree-reduce task" not in doc and "gradient task per worker" not in doc


@pytest.mark.slow  # a LocalCluster of two worker processes
def test_the_package_docstrings_example_runs():
    _run(doctest.DocTestParser().get_doctest(section(inspect.getdoc(ppt_dask), "Examples"), {}, "ppt_dask", None, 0))


# ---- the guide's sources -----------------------------------------------------------------


def prose(text: str) -> str:
    """A page without its fenced blocks and directive options (what reads as text)."""
    text = _FENCE.sub("", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith(":"))


@pytest.mark.parametrize("page", GUIDE, ids=lambda p: p.name)
def test_a_user_guide_page_names_no_source_path(page):
    found = _SOURCE_PATH.findall(prose(page.read_text()))
    assert not found, f"{page.name} names source paths {found}: they belong in the developer guide (docs/dev/)"


@pytest.mark.parametrize("page", [*GUIDE, *DEV, DOCS / "index.md", ROOT / "README.md"], ids=lambda p: p.name)
def test_code_lines_fit_in_88_characters_and_blocks_say_their_language(page):
    """Code (``bash``, ``python``) in 88 columns, comments included; what a program prints
    (``text``) is shown as it prints it, and the site wraps its long lines (docs/_static/ppt.css)."""
    for _fence, language, body in _FENCE.findall(page.read_text()):
        assert language.strip(), f"{page.name}: a fenced block without a language (plain text: ```text)"
        if language.strip().startswith("{") or language.strip() == "text":  # a directive; output
            continue
        long = [line for line in body.splitlines() if len(line) > MAX_LINE]
        assert not long, f"{page.name}: code lines over {MAX_LINE} characters: {long}"


@pytest.mark.parametrize("page", [*GUIDE, *DEV, DOCS / "index.md", DOCS / "benchmarks.md", ROOT / "README.md"],
                         ids=lambda p: p.name)
def test_papers_are_cited_by_their_authors_not_their_file_numbers(page):
    found = _PAPER_NUMBER.findall(page.read_text())
    assert not found, f"{page.name} calls papers by number: {found} (cite the authors, as the Concepts page does)"


# ---- the Benchmarks page ----------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_INCLUDE = re.compile(r"^```\{include\} (\S+)\n", re.M)


def test_the_benchmarks_page_writes_no_number_of_its_own():
    """Its text, headings and commands apart, has no digit: every number comes from an
    included file of graphs/out."""
    text = (DOCS / "benchmarks.md").read_text()
    includes = _INCLUDE.findall(text)
    assert includes and all(Path(p).parts[:3] == ("..", "graphs", "out") for p in includes), includes
    body = _FENCE.sub("", text)
    body = re.sub(r"`[^`]*`", "", body)  # commands and names
    numbers = [line for line in body.splitlines()
               if _NUMBER.search(line) and not line.startswith((":", "#"))]  # headings are titles
    assert not numbers, f"the Benchmarks page writes numbers of its own: {numbers}"


@pytest.mark.slow  # the built site (10 s to build): in CI's full run, after .ci/run built it
def test_each_number_on_the_built_benchmarks_page_is_read_from_graphs_out(site):
    page = _main_text(site / "benchmarks.html")
    out = " ".join(p.read_text() for p in (ROOT / "graphs" / "out").rglob("*.md"))
    source_page = (DOCS / "benchmarks.md").read_text()
    commands = " ".join(body for _, _, body in _FENCE.findall(source_page))
    commands += " " + " ".join(re.findall(r"`([^`\n]+)`", _FENCE.sub("", source_page)))
    source = out + " " + commands
    known = set(_NUMBER.findall(source))
    foreign = sorted({n for n in _NUMBER.findall(page) if n not in known})
    assert not foreign, f"numbers on the Benchmarks page that no file of graphs/out holds: {foreign}"


# ---- the built site -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built documentation (docs/_build/html, or built here as the README says)."""
    if (BUILT / "index.html").exists():
        return BUILT
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_nb") is None:
        system.missing("building the documentation needs the [docs] extra (pip install '.[docs]')")
    out = tmp_path_factory.mktemp("docs") / "html"
    command = [sys.executable, "-m", "sphinx", "-n", "-W", "-q", "-b", "html", str(DOCS), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def _main_text(page: Path) -> str:
    text = page.read_text()
    text = re.sub(r"<script.*?</script>", " ", text, flags=re.S)
    text = text.split('role="main">', 1)[-1].split('<div class="footer"', 1)[0]
    return html.unescape(re.sub(r"<[^>]+>", " ", text))


@pytest.mark.slow  # the built site (10 s to build): in CI's full run, after .ci/run built it
def test_the_site_is_small_and_calls_no_paper_by_its_file_number(site):
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    assert size < MAX_SITE_BYTES, f"the built site is {size / 2**20:.1f} MB"
    pages = list(site.rglob("*.html"))
    for page in pages:
        assert "seed 00" not in page.read_text(), f"{page.relative_to(site)} says 'seed 00x'"
    copies = [p for folder in ("_sources", "_modules") for p in (site / folder).rglob("*") if p.is_file()]
    assert not copies, f"the site copies page or module sources: {copies[:5]}"
    copies = [p for p in pages if "_bokeh_onload_callbacks" in p.read_text() and p.stat().st_size > 1_000_000]
    assert not copies, f"pages carrying their own BokehJS: {copies}"
    assert (site / "_static" / "bokeh.min.js").exists()


@pytest.mark.slow  # the built site (10 s to build): in CI's full run, after .ci/run built it
def test_every_paper_named_on_a_page_links_to_its_source_entry(site):
    from pptdocs import PAPERS  # docs/_ext, on the path of the built site's configuration

    for page in site.rglob("*.html"):
        text = page.read_text()
        text = re.sub(r"<(script|pre|code|title)\b.*?</\1>", " ", text, flags=re.S)
        text = re.sub(r"<h[1-6]\b.*?</h[1-6]>", " ", text, flags=re.S)  # headings are not linked
        text = re.sub(r"<img\b[^>]*>", " ", text)  # an image's alt text is no place for a link
        text = text.split('role="main">', 1)[-1].split('<div class="footer"', 1)[0]
        for name, label in PAPERS.items():
            for match in re.finditer(re.escape(html.escape(name, quote=False)), text):
                before = text[:match.start()]
                link = before.rfind("<a ")
                assert link > before.rfind("</a>") and f"#{label}" in before[link:], \
                    f"{page.relative_to(site)}: {name!r} is named without its link"


@pytest.mark.slow  # the built site (10 s to build): in CI's full run, after .ci/run built it
def test_smart_quotes_are_off(site):
    page = (site / "guide" / "cli.html").read_text()
    assert "--workers" in page and "\u2013workers" not in page


sys.path.insert(0, str(DOCS / "_ext"))


# ---- the developer guide's example strategy ----------------------------------------------


def test_the_developer_guides_example_strategy_is_sync_when_it_does_not_clip():
    """docs/dev/strategy.md's ``Clipped``, run in the serial reference: with a bound no
    gradient reaches it gives Sync's weights to the bit; with a small bound it moves the
    weights at most ``lr * clip`` a step (the rule it states; no momentum)."""
    from ppt_dask.algorithms.serial import train_serial

    code = re.search(r"```python\n(.*?)```", (DOCS / "dev" / "strategy.md").read_text(), re.S).group(1)
    namespace: dict = {"__name__": "strategy_page"}
    exec(compile(code, "docs/dev/strategy.md", "exec", dont_inherit=True), namespace)  # as a script runs it
    clipped = namespace["Clipped"]
    data = ppt_dask.datasets.parity(8)
    net = ppt_dask.MLP((8, 20, 1), hidden="tanh", output="sigmoid")
    rounds, lr, bound = 12, 0.5, 0.01
    same, _ = train_serial(net, data.X, data.y, clipped(lr=lr, block=64, clip=1e12), rounds, n_shards=4)
    sync, _ = train_serial(net, data.X, data.y, ppt_dask.Sync(lr=lr, block=64), rounds, n_shards=4)
    assert np.array_equal(same, sync)
    start = net.init_params(0)
    params = start
    for r in range(1, rounds + 1):  # each step moves the weights by at most lr * clip
        after, _ = train_serial(net, data.X, data.y, clipped(lr=lr, block=64, clip=bound), r, n_shards=4)
        assert np.linalg.norm(after - params) <= lr * bound * (1 + 1e-9)
        params = after
    assert not np.array_equal(params, start)


@pytest.mark.slow  # the built site (10 s to build): in CI's full run, after .ci/run built it
def test_reference_pages_show_what_users_pass_and_read(site):
    """A strategy's page shows its parameters, not the fields its check() fills; a class made
    by the engine shows no constructor; no page shows the engine's members."""
    for name in STRATEGIES:
        text = _main_text(site / "generated" / f"ppt_dask.{name}.html")
        signature = text[:text.index(")")]
        assert "lr" in signature and not any(field in signature for field in FILLED_BY_CHECK), signature
        assert "Bases:" not in text
    for name in ENGINE_MADE:
        text = _main_text(site / "generated" / f"ppt_dask.{name}.html")
        assert f"class ppt_dask. {name} (" not in text, f"ppt.{name}'s page shows a constructor"
    assert "repair" not in _main_text(site / "generated" / "ppt_dask.ShardSet.html")
    assert "local_round" not in _main_text(site / "generated" / "ppt_dask.LocalSGD.html")


# ---- the live page's words ----------------------------------------------------------------


def _phase_rows() -> list[list[str]]:
    """The rows of the phase table in time.md's "Reading the live page" (cells, code marks off)."""
    text = (DOCS / "guide" / "time.md").read_text()
    section = text[text.index("## Reading the live page"):]
    section = section[:section.index("\n## ", 10)]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip().strip("`") for cell in row.strip("|").split("|")] for row in rows]


def test_reading_the_live_page_defines_each_phase_once_with_the_pages_legend():
    """Every phase of the breakdown is a row, once; its legend entries are the page's own
    (ppt_dask.observe.dashboard's labels of the stack that holds the phase)."""
    from ppt_dask.observe.breakdown import STACKS
    from ppt_dask.observe.dashboard import LABELS, PREDICTED_LABEL, STREAM_LABELS
    from ppt_dask.observe.phases import PHASES

    rows = _phase_rows()
    phases = [row[0] for row in rows]
    assert sorted(phases) == sorted(PHASES) and len(phases) == len(set(phases)), phases
    stack_of = {phase: stack for stack, members in STACKS for phase in members}
    for phase, streamed, graphs, what in rows:
        stack = stack_of[phase]
        assert streamed == (STREAM_LABELS[stack] or "(none)"), (phase, streamed, STREAM_LABELS[stack])
        assert graphs == LABELS[stack], (phase, graphs, LABELS[stack])
        assert what, phase
    text = (DOCS / "guide" / "time.md").read_text()
    assert f"`{PREDICTED_LABEL}`" in text
    for words in ("not computing gradients", "median round", "median head submit", "sent per round"):
        assert words in text, words  # the summary line's figures, each explained


def test_the_live_page_pictures_exist_and_are_shown_at_their_size():
    from PIL import Image

    text = (DOCS / "guide" / "time.md").read_text()
    for name, width in re.findall(r"```\{figure\} \.\./_static/(\S+)\n(?::alt:[^\n]*\n)?:width: (\S+)", text):
        picture = DOCS / "_static" / name
        assert picture.exists(), name
        if width.endswith("px"):
            assert Image.open(picture).size[0] == int(width[:-2]), (name, width)


# ---- the Benchmarks page's plots -------------------------------------------------------------

_IMAGE = re.compile(r"^```\{(?:image|figure)\} (\S+)\n", re.M)


def test_the_benchmarks_page_shows_at_least_four_plots_of_graphs_out_above_its_tables():
    text = (DOCS / "benchmarks.md").read_text()
    images = _IMAGE.findall(text)
    assert len(images) >= 4, images
    for image in images:
        assert Path(image).parts[:3] == ("..", "graphs", "out") and (DOCS / image).exists(), image
    first_table = min(text.index(f"```{{include}} {p}") for p in _INCLUDE.findall(text) if not p.endswith("summary.md"))
    assert all(text.index(image) < first_table for image in images)
    assert text.index("## Summary") < text.index(images[0])


def test_the_plots_and_the_summary_are_drawn_from_the_tables(tmp_path):
    """graphs/plots.py on a copy of graphs/out draws every plot the page shows and writes the
    summary the page includes, the same text as the one kept: nothing on them is typed by hand.
    A table that is missing is skipped, saying so; a CPU-per-round table, once there, is drawn."""
    if importlib.util.find_spec("matplotlib") is None:
        system.missing("graphs/plots.py needs matplotlib (the [bench] extra)")
    import shutil

    out = tmp_path / "out"
    shutil.copytree(ROOT / "graphs" / "out", out, ignore=shutil.ignore_patterns("*.png", "summary.md"))
    (out / "round_cpu.md").unlink(missing_ok=True)
    done = subprocess.run([sys.executable, str(ROOT / "graphs" / "plots.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "round_cpu.md: not in" in done.stderr and "skipped" in done.stderr
    assert (out / "summary.md").read_text() == (ROOT / "graphs" / "out" / "summary.md").read_text()
    assert not (out / "plot_round_cpu.png").exists()
    (out / "round_cpu.md").write_text("| p | head CPU ms | worker CPU ms |\n|---|---|---|\n| 1 | 0.1 | 2.0 |\n"
                                      "| 2 | 0.1 | 1.1 |\n")
    done = subprocess.run([sys.executable, str(ROOT / "graphs" / "plots.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and (out / "plot_round_cpu.png").exists(), done.stderr
    for image in _IMAGE.findall((DOCS / "benchmarks.md").read_text()):
        assert (out / Path(image).name).exists(), image
