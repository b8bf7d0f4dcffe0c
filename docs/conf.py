"""Sphinx configuration of the ppt_dask documentation: ``sphinx-build -n -W -b html docs docs/_build/html``.

The README's command, ``pip install ".[docs]" && sphinx-build -n -W -b html docs docs/_build/html``,
builds it in a fresh environment without PyTorch: autodoc imports ``ppt.TorchNet``'s module
with torch mocked (``autodoc_mock_imports``), as the reference needs its signature and
docstrings, never torch itself (its CPU wheel is about 200 MB, the default one on Linux
pulls CUDA, gigabytes).

Why Sphinx rather than MkDocs: the docstrings are numpydoc (``Parameters`` / ``Returns``
sections with shapes written out), which autodoc + napoleon render as dask's and
scikit-learn's references do, and autosummary builds one page per public name from
``ppt_dask.__all__`` instead of a hand-kept list; myst-nb renders the stored notebooks with
their outputs without running them again, with no pandoc (nbsphinx needs it). The build is
offline: no intersphinx, no theme or extension that fetches anything.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the package beside the docs, also when it is not installed
sys.path.insert(0, str(Path(__file__).parent / "_ext"))  # pptdocs: the site's own extension

import ppt_dask  # noqa: E402

project = "ppt_dask"
author = "the ppt_dask developers"
copyright = "2026, the ppt_dask developers"
release = version = ppt_dask.__version__

extensions = [
    "myst_nb",  # Markdown pages (MyST) and the notebooks with their stored outputs
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",  # numpydoc-style sections; ships with Sphinx, no extra package
    "pptdocs",  # docs/_ext: the papers linked where they are named, BokehJS once
]
# No viewcode: the pages link the repository, not highlighted copies of every module (they
# doubled the site and showed maintainers' comments as the reference).

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# the API reference: a page per public name, generated from the docstrings
autosummary_generate = True
autosummary_imported_members = True
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the docstrings give each parameter's type and shape, as numpydoc has it
autodoc_default_options: dict = {}  # no "Bases:" line: a key given here turns an option on, even as False
# torch is the [torch] extra, not the [docs] one: ppt_dask.nets imports a stand-in of it when
# autodoc reads ppt.TorchNet, so its page builds wherever the README's command runs
autodoc_mock_imports = ["torch"]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_param = False  # types as text (their words, n_features ..., are not cross-references)

# `sphinx-build -n` (nitpicky, .ci/run): every cross-reference resolves, or the build fails.
# A name of the package without a page of its own shows as code, a type's words as text
# (docs/_ext/pptdocs.py); these names of other packages cannot resolve in an offline build
# (no intersphinx), so they are shown as code without a link:
nitpick_ignore = [
    ("py:func", "asyncssh.connect"),  # asyncssh's documentation, not fetched offline
]

# the notebooks as they are stored (python notebooks/run.py keeps their outputs): never run here
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](#a-heading) links of the README's style keep working
# what is typed is what is shown: "--workers" must not become an en dash, nor quotes curly,
# or a command pasted from a page fails
smartquotes = False

# Theme: alabaster ships with Sphinx, so the [docs] extra needs no theme package and the
# pages need no network to build or to read.
html_theme = "alabaster"
html_title = f"ppt_dask {release}"
html_static_path = ["_static"]
html_css_files = ["ppt.css"]
html_theme_options = {
    "description": "Data-parallel training of neural networks on a Dask cluster",
    "fixed_sidebar": True,
    "page_width": "1160px",
    "sidebar_width": "240px",
    "show_relbars": True,  # previous / next above and below every page
}
# the site's table of contents, then this page's own sections
html_sidebars = {"**": ["about.html", "navigation.html", "localtoc.html", "relations.html", "searchbox.html"]}
html_copy_source = False  # the pages' Markdown lives in the repository; the site needs no copy
html_show_sourcelink = False

# bokeh's load and exec outputs come with a text/html twin that myst-nb shows; the widget
# views of the progress bars come with their text. Nothing else is left out.
suppress_warnings = ["mystnb.unknown_mime_type"]


# Members of public classes that the engine calls and users do not: left out of the
# reference (they keep their docstrings for the developer guide's readers of the source).
# "*": every member (a strategy is its parameters; its methods are the engine's protocol).
ENGINE_MEMBERS = {
    "Sync": "*", "PPT": "*", "Average": "*", "LocalSGD": "*", "Async": "*", "_Base": "*",
    "ShardSet": {"worker_blocks", "slot_workers", "colocated", "lost_workers", "repair", "can_grow",
                 "joined_workers", "rebalance", "who_has", "label"},
    "Result": {"left_out", "warn_left_out"},
    "MLP": {"describe", "unflatten", "weight_mask", "passes", "loss_and_grad"},
    "TorchNet": {"random", "module_path", "with_row_shape", "weight_mask", "describe",
                 "architecture", "rebuild", "forward"},
}
# made by ppt_dask, never by users: the reference shows no constructor signature (their
# fields are the docstring's Attributes)
ENGINE_MADE = ("ppt_dask.Result", "ppt_dask.ShardSet")
# a strategy's fields that its check() fills from the data before a run: not parameters
_FILLED_BY_CHECK = re.compile(r",\s*(?:shard_rows|seed|replicated)=(?:\(\)|[^,)]*)")


def _owner(obj) -> str:
    """The class a member is defined in, from its qualified name ("" when it has none)."""
    function = getattr(obj, "fget", None) or getattr(obj, "func", None) or obj
    return getattr(function, "__qualname__", "").rpartition(".")[0]


def _skip_member(app, what, name, obj, skip, options):
    """Leave out what a class inherits from another package (scikit-learn's
    ``set_*_request`` methods of the estimators: their docstrings point into scikit-learn's
    own documentation, which this offline build does not link) and the engine's members."""
    module = getattr(obj, "__module__", None) or ""
    if module.split(".")[0] not in ("ppt_dask", ""):
        return True
    owner = _owner(obj)
    hidden = ENGINE_MEMBERS.get(owner, ())
    if hidden == "*" or name in hidden or name in _in_attributes(owner):
        return True
    return skip


def _in_attributes(owner: str) -> set[str]:
    """The names the public class ``owner``'s Attributes section describes: napoleon writes
    them as attributes of the class, so autodoc leaves out the properties of those names
    (described twice otherwise)."""
    cls = getattr(ppt_dask, owner, None) if owner in ppt_dask.__all__ else None
    doc = inspect.getdoc(cls) or ""
    body = re.search(r"^Attributes\n-+\n(.*?)(?=^\w[\w ]*\n-{3,}\n|\Z)", doc, re.S | re.M)
    return {n.strip() for line in (body.group(1).splitlines() if body else ())
            if line and not line[0].isspace() for n in line.split(" : ")[0].split(",")}


def _signature(app, what, name, obj, options, signature, return_annotation):
    if name in ENGINE_MADE:
        return "", None
    if what == "class" and signature and getattr(obj, "__module__", "").startswith("ppt_dask.algorithms"):
        return _FILLED_BY_CHECK.sub("", signature), return_annotation
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-signature", _signature)
