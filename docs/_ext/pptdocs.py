"""The site's own Sphinx extension: the papers linked wherever they are named, BokehJS once.

* **Papers.** The Concepts page's "Sources" section cites the five texts ppt_dask was built
  from, each under a label. Wherever a page, a docstring or a notebook names one the way
  that section does ("Dahl et al. (2008)", "Mörchen (2004)" ...), the words become a link
  to its entry: one list of the names here, so no page can cite a paper without its link.
* **Internal names as code.** A docstring may name a module or function of the package that
  the reference does not document (it documents ``ppt_dask.__all__``), for the source's
  readers: where that name exists in the package it shows as code, not as a link; a name
  that does not exist (a typo, a renamed function) stays a warning, an error under
  ``sphinx-build -n -W``.
* **Types as text.** The parameters' types are text (``napoleon_use_param = False`` in
  conf.py: their words, ``ndarray of shape (n, n_classes)``, are no cross-references); so are
  the words of an ``Attributes`` or ``Returns`` type that name nothing Sphinx knows (napoleon
  writes those types as typed fields, whose words Sphinx tries as class names). A type word
  that names a public class still links to its page.
* **BokehJS once.** A notebook that shows a bokeh plot stores the whole library (1.3 MB)
  in its first plot's output, and each gallery page would carry a copy. The build drops
  that output and links one copy of the installed bokeh's library (a core dependency, the
  version the notebooks ran with) from the pages that draw a plot.
"""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

from docutils import nodes

CONCEPTS = "guide/concepts"
# the words that name a paper -> its label on the Concepts page (docs/guide/concepts.md)
PAPERS = {
    "Dahl et al.": "src-dahl2008",
    "Mörchen": "src-moerchen2004",
    "Sobreira and Carneiro": "src-sobreira2024",
    "Stack Exchange thread": "src-stackexchange2015",
    "Alowaisheq and Dhami": "src-alowaisheq",
}
_NAMES = re.compile("|".join(re.escape(name) for name in PAPERS))
_NO_LINKS_IN = (nodes.reference, nodes.literal, nodes.literal_block, nodes.doctest_block, nodes.raw,
                nodes.title, nodes.target, nodes.math_block)


def _inside(node, kinds) -> bool:
    while node is not None:
        if isinstance(node, kinds) or type(node) is nodes.comment:  # autosummary's table is a comment's subclass
            return True
        node = node.parent
    return False


def link_papers(app, doctree, docname):
    """Turn each name of a paper in the page's text into a link to its source entry."""
    builder = app.builder
    if builder.format != "html":
        return
    target = builder.get_relative_uri(docname, CONCEPTS)
    for text in list(doctree.findall(nodes.Text)):
        if _inside(text.parent, _NO_LINKS_IN) or not _NAMES.search(text.astext()):
            continue
        value, pieces, at = text.astext(), [], 0
        for match in _NAMES.finditer(value):
            pieces.append(nodes.Text(value[at:match.start()]))
            uri = ("" if docname == CONCEPTS else target) + "#" + PAPERS[match.group()]
            link = nodes.reference("", "", internal=True, refuri=uri, classes=["paper"])
            link += nodes.Text(match.group())
            pieces.append(link)
            at = match.end()
        pieces.append(nodes.Text(value[at:]))
        text.parent.replace(text, [p for p in pieces if not (isinstance(p, nodes.Text) and not p)])


def _exists(target: str) -> bool:
    """Whether ``target`` (``ppt_dask.a.b`` or ``ppt_dask.a.B.c``) names something of the package."""
    if not target.startswith("ppt_dask."):
        return False
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _a_type_word(node, contnode) -> bool:
    """A word of a typed field's type (plain text; a role such as :class:`x` shows code)."""
    return node.get("reftype") == "class" and isinstance(contnode, nodes.Text)


def internal_as_code(app, env, node, contnode):
    """A reference to a name of the package that has no page of its own: its code text; the
    word of a type: its text."""
    if node.get("refdomain") != "py":
        return None
    if _exists(node.get("reftarget", "")) or _a_type_word(node, contnode):
        return contnode
    return None


_BOKEH_LOAD = "_bokeh_onload_callbacks"  # in the library's loader, never in a plot's own script


def _is_bokeh_loader(node) -> bool:
    text = node.astext()
    return _BOKEH_LOAD in text and "embed_document" not in text and len(text) > 100_000


def drop_bokeh_loaders(app, doctree):
    found = [node for node in doctree.findall(nodes.raw) if _is_bokeh_loader(node)]
    for node in found:
        node.parent.remove(node)
    if found or any("embed_document" in n.astext() for n in doctree.findall(nodes.raw)):
        app.env.metadata[app.env.docname]["bokeh"] = True


def link_bokeh(app, pagename, templatename, context, doctree):
    if app.env.metadata.get(pagename, {}).get("bokeh"):
        app.add_js_file("bokeh.min.js")  # added in this event: on this page only


def copy_bokeh(app, exception):
    if exception is None and app.builder.format == "html":
        from bokeh.util.paths import bokehjs_path

        shutil.copy(Path(bokehjs_path()) / "js" / "bokeh.min.js", Path(app.outdir) / "_static")


def setup(app):
    app.connect("doctree-resolved", link_papers)
    app.connect("missing-reference", internal_as_code)
    app.connect("doctree-read", drop_bokeh_loaders)
    app.connect("html-page-context", link_bokeh)
    app.connect("build-finished", copy_bokeh)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
