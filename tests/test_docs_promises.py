"""One statement of each promise: what a seeded run repeats bit for bit.

The Concepts page (docs/guide/concepts.md, "Reproducibility") states both promises: the
default for ``Sync`` and ``PPT`` (``reproducible="same-p"``) gives the same weights on the
*same* number of workers, ``reproducible="any-p"`` on *any* number. Every other page, the
README, ``ppt.train``'s docstring and ``ppt-dask train --help`` link to it; where one of
them says that a run repeats its bits on any (or every) number of workers, the same sentence
names ``any-p``, the setting that promises it, and the page links to the statement.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import ppt_dask

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONCEPTS = DOCS / "guide" / "concepts.md"
_FENCE = re.compile(r"^(`{3,})[^\n`]*\n.*?^\1\s*$", re.S | re.M)
# a sentence that promises bits: the words of bitwise sameness ...
_BITS = re.compile(r"same bits|bit for bit|bitwise|to the bit|same weights", re.I)
# ... across a number of workers
_ANY = re.compile(r"\b(?:any|every) (?:number of workers|number|p)\b|on \d+(?:, \d+)* or \d+ workers", re.I)
_SAME = re.compile(r"\bsame number of workers\b", re.I)
_LINK = re.compile(r"concepts\.md#(?:concepts-)?reproducibility|concepts-reproducibility")


def sentences(text: str) -> list[str]:
    """The page's prose (code blocks left out) cut into sentences, each on one line."""
    out = []
    for paragraph in re.split(r"\n\s*\n", _FENCE.sub("\n\n", text)):
        out += re.split(r"(?<=[.;!?])\s+(?=[A-Z`*\[(\"])", " ".join(paragraph.split()))
    return out


def promises(text: str) -> list[str]:
    return [s for s in sentences(text) if _BITS.search(s) and (_ANY.search(s) or _SAME.search(s))]


def _pages() -> dict[str, str]:
    from ppt_dask.cli.parser import build_parser

    pages = {p.relative_to(ROOT).as_posix(): p.read_text() for p in [ROOT / "README.md", *DOCS.rglob("*.md")]
             if "_build" not in p.parts and p != CONCEPTS}
    pages["ppt.train's docstring"] = ppt_dask.train.__doc__
    pages["help(ppt_dask)"] = ppt_dask.__doc__
    pages["ppt.Network's docstring"] = ppt_dask.Network.__doc__
    torchnet = ROOT / "ppt_dask" / "nets" / "torchnet.py"  # read, not imported: torch is an extra
    pages["ppt.TorchNet's module docstring"] = ast.get_docstring(ast.parse(torchnet.read_text()))
    train = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "train")[1]
    pages["ppt-dask train --help"] = train.format_help()
    return pages


def test_the_concepts_page_states_both_promises():
    text = " ".join(CONCEPTS.read_text().split())
    section = text[text.index("## Reproducibility"):]
    section = section[:section.index("## ", 3)]
    assert re.search(r'`"same-p"` \(the default for `Sync` and `PPT`\): the same weights on the \*\*same number of\s+'
                     r"workers\*\*", section), section
    assert re.search(r'`"any-p"` .*?: the same weights on \*\*any number of workers\*\*', section), section


@pytest.mark.parametrize("name", sorted(_pages()))
def test_a_page_that_promises_bits_names_the_setting_and_links_the_statement(name):
    text = _pages()[name]
    found = promises(text)
    wrong = [s for s in found if _ANY.search(s) and "any-p" not in s]
    assert not wrong, (f"{name} promises the same bits on any number of workers without naming any-p "
                       f"(the default for Sync promises the same number only; see docs/guide/concepts.md): {wrong}")
    if found and name.startswith(("ppt.train", "README", "docs")):  # help texts and the other docstrings: no links
        assert _LINK.search(text), f"{name} states what a seeded run repeats without a link to Concepts: {found}"
