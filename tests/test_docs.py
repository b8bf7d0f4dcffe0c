"""The documentation: the API reference names every public name, the built pages show it.

The reference (docs/api.rst) lists names for autosummary, which generates a page per name
from its docstring; a public name added to ``ppt_dask.__all__`` without a line there fails
the first test. The others read the site as they build it, with warnings as errors, from a copy of the
sources in a temporary folder (about a minute; sphinx is the ``[docs]`` extra: without it
they skip, or fail under CI, tests/system.py).
"""

import html
import importlib.util
import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ppt_dask
from ppt_dask import _EXPORTS, _MODULES

import system
from test_dashboard import browser  # noqa: F401  (the fixture: Debian's chromium through selenium)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_PARAMETER = re.compile(r"^\*{0,2}\w+(?:, \*{0,2}\w+)*(?: : .*)?$")
_ENTRY = re.compile(r"^\s{3}(ppt_dask(?:\.\w+)+)\s*$", re.M)  # an autosummary entry line


def listed() -> set[str]:
    return set(_ENTRY.findall((DOCS / "api.rst").read_text()))


def test_the_api_reference_lists_every_public_name():
    entries, text = listed(), (DOCS / "api.rst").read_text()
    missing = [n for n in ppt_dask.__all__ if not (f"ppt_dask.{n}" in entries or _MODULES.get(n) in entries)]
    assert not missing, f"docs/api.rst lists no page for {missing}: add them to its autosummary lists"
    for name, module in _MODULES.items():  # a module is listed by its path, and its short name said
        assert f"``ppt.{name}``" in text and f":mod:`{module}`" in text
    assert len(entries) == len(ppt_dask.__all__)  # nothing listed that is not public


def _parameters(obj) -> list[str]:
    """The parameter names of a numpydoc ``Parameters`` section (``a, b : type`` gives both)."""
    doc = inspect.getdoc(obj) or ""
    match = re.search(r"^Parameters\n-+\n(.*?)(?:^\w[^\n]*\n-+\n|\Z)", doc, re.S | re.M)
    if not match:
        return []
    names = []
    for line in match.group(1).splitlines():  # "name : type", "a, b : type" or a bare "name"
        if _PARAMETER.match(line):
            names += [n.strip().lstrip("*") for n in line.split(" : ")[0].split(",")]
    return names


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The documentation built here, with warnings as errors, from a copy of the sources: the
    build writes its pages (``generated/``) beside the sources, and the tree the tests run from
    stays as it was; never a ``docs/_build`` an earlier build left (it may show older sources)."""
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_nb") is None:
        system.missing("building the documentation needs the [docs] extra (pip install '.[docs]')")
    root = tmp_path_factory.mktemp("docs")
    source = root / "tree"
    source.mkdir()
    for entry in ROOT.iterdir():  # the pages include ../graphs/out and the gallery links ../../notebooks
        if entry.name not in ("docs", ".git"):
            (source / entry.name).symlink_to(entry)
    shutil.copytree(DOCS, source / "docs", symlinks=True, ignore=shutil.ignore_patterns("_build", "generated"))
    out = root / "html"
    command = [sys.executable, "-m", "sphinx", "-n", "-W", "--keep-going", "-q", "-b", "html",
               str(source / "docs"), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text()))


@pytest.mark.slow
def test_each_public_name_has_a_page_with_its_docstrings_parameters(site):
    for name in sorted(_EXPORTS):
        page = site / "generated" / f"ppt_dask.{name}.html"
        assert page.exists(), f"no API page for ppt_dask.{name}"
        text = _text(page)
        for parameter in _parameters(getattr(ppt_dask, name)):
            assert re.search(rf"\b{re.escape(parameter)}\b", text), f"ppt_dask.{name}'s page lacks {parameter!r}"
    for module in _MODULES.values():
        assert (site / "generated" / f"{module}.html").exists()


def test_the_built_index_and_an_api_page_open_in_a_browser(site, browser):  # noqa: F811
    browser.get((site / "index.html").as_uri())
    assert browser.title.startswith("ppt_dask")
    body = browser.find_element("tag name", "body").text
    for words in ("User guide", "Your own network", "API reference", "Gallery", "Benchmarks"):
        assert words in body, f"the index does not show {words!r}"
    browser.get((site / "generated" / "ppt_dask.train.html").as_uri())
    body = browser.find_element("tag name", "body").text
    assert "ppt_dask.train" in body and "Parameters" in body
    for parameter in _parameters(ppt_dask.train):
        assert parameter in body, f"ppt_dask.train's page does not show its parameter {parameter!r}"
