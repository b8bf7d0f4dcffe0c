"""What the command line tells users names the papers by their authors, never by the file
numbers of this repository's sources (``001``, ``seed 002``, ``000's rule``).

``ppt-dask train --help`` is the reference for every flag (the README says so) and
``ppt-dask model`` prints the run-time model's tables: a reader has no way to look up
what "001 eq. (7)" means, while "Mörchen (2004)" is on the Concepts page's list of sources.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

from ppt_dask.cli.parser import build_parser
from ppt_dask.perf import model as pm
from ppt_dask.perf import paper001

# a paper by its file number: "(001)", "001's", "001 eq.", "seed 002", "(001, 004)", "004: 5"
_PAPER_NUMBER = re.compile(r"(?<![\d.,/-])00[0-4](?![\d.])")


def _helps(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    yield words, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _helps(sub, (*words, name))


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ppt_dask.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_the_rule_finds_a_paper_number():
    """The pattern this file checks with finds the forms the help texts used."""
    for text in ("block (001)", "(000's k)", "001 eq. (7)", "seed 002's hybrid", "(004: 0.9)", "(001, 004)"):
        assert _PAPER_NUMBER.search(text), text
    for text in ("lr 0.001", "1e-004", "100,200,250,500", "0.0005 s"):
        assert not _PAPER_NUMBER.search(text), text


def test_no_help_text_names_a_paper_by_number():
    found = {" ".join(("ppt-dask", *words, "--help")): _PAPER_NUMBER.findall(text)
             for words, text in _helps(build_parser())}
    found = {command: hits for command, hits in found.items() if hits}
    assert not found, f"help texts that name papers by number: {found}"


def test_train_and_model_help_as_users_run_them():
    for command in (("train", "--help"), ("model", "--help"), ("model", "predict", "--help")):
        done = _run(*command)
        assert done.returncode == 0, done.stderr
        lines = [line for line in done.stdout.splitlines() if _PAPER_NUMBER.search(line)]
        assert not lines, f"ppt-dask {' '.join(command)}: {lines}"


def test_what_model_recommend_and_predict_print_names_no_paper_by_number(tmp_path):
    hand = tmp_path / "cluster.json"
    hand.write_text(json.dumps(pm.constants_to_dict(paper001.CONSTANTS["bat_cave", "function"])))
    common = ("--constants", str(hand), "--n-patterns", "1024", "--n-test", "128", "--n-weights", "16768",
              "--cores", "8")
    for command in (("recommend", *common, "--p-max", "8", "--blocks", "4,8,16,32,64"),
                    ("predict", *common, "--p", "2,4,8", "--block", "16,64")):
        done = _run("model", *command)
        assert done.returncode == 0, done.stderr
        assert "Mörchen (2004)" in done.stdout  # the source, by its author
        lines = [line for line in done.stdout.splitlines() if _PAPER_NUMBER.search(line)]
        assert not lines, f"ppt-dask model {command[0]} prints: {lines}"
