"""What the commands print for a person: rounded aligned results, the stop reason in words,
progress with a total and time left, --version, a report that names its run."""

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ppt_dask
from ppt_dask.cli import textout


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ppt_dask.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_train_prints_aligned_rounded_lines_that_agree_with_the_json(tmp_path, scheduler_address):
    """760b1fe: `train_loss=0.7268891663924053 ... learned=False` on one line."""
    out, report = tmp_path / "out.json", tmp_path / "report.html"
    proc = run("train", "mnist", "--workers", "2", "--epochs", "1", "--json", str(out), "--report", str(report),
               "--scheduler", scheduler_address)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    lines = proc.stdout.strip().splitlines()
    # local SGD repeats its bits on any number of workers, and the first line says so
    assert lines[0] == ("mnist: strategy local, 2 workers, network 784-64-64-10, "
                        "the same bits on any number of workers (--reproducible any-p)")
    rows = dict(re.match(r"^  (\S.*?)\s{2,}(\S.*)$", line).groups() for line in lines[1:])
    assert rows["test accuracy"] == f"{100 * summary['test_accuracy']:.2f} %"
    assert rows["train error"] == f"{100 * summary['train_error_rate']:.2f} %"
    assert rows["wall time"] == textout.duration(summary["wall_seconds"])
    assert rows["epochs"] == f"{summary['epochs']:.4g} ({summary['rounds']} rounds)"
    # one epoch does not reach the 3 % target: said in words, not learned=False
    assert rows["stopped"] in ("max epochs (target of 3 % error not reached)", "target reached")
    assert rows["stopped"] == textout.stop_reason(summary["stopped_because"], summary["learned"], 0.03)
    assert len({len(line) - len(line.lstrip()) for line in lines[1:]}) == 1  # aligned
    assert len({re.search(r"\S\s{2,}\S", line).end() for line in lines[1:]}) == 1  # values aligned
    assert len(str(summary["wall_seconds"])) > 6  # the JSON keeps every digit
    # progress: epochs of the total, rate and time left (plain lines: stderr is not a terminal)
    assert re.search(r"^epoch \d+\.\d\d/1 \(\d+ %\)  \S+ patterns/s, .* left", proc.stderr, re.M), proc.stderr
    html = report.read_text()
    assert "dataset mnist, strategy local, workers 2" in html.replace("&quot;", '"')
    assert f"ppt_dask {ppt_dask.__version__}, dask " in html


def test_version():
    proc = run("--version", timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"ppt-dask {ppt_dask.__version__}"


@pytest.mark.parametrize("seconds, shown", [(0.04177, "0.042 s"), (1.8412, "1.84 s"), (12.34, "12.3 s"),
                                            (185.2, "3 min 05 s"), (7450, "2 h 04 min")])
def test_durations(seconds, shown):
    assert textout.duration(seconds) == shown


@pytest.mark.parametrize("because, learned, target, words", [
    ("target_error", True, 0.03, "target reached"), ("max_epochs", False, None, "max epochs"),
    ("max_epochs", False, 0.03, "max epochs (target of 3 % error not reached)"),
    ("stopped", False, None, "stopping rule"),
    ("diverged at round 7", False, None, "diverged (loss not finite) at round 7")])
def test_stop_reasons_in_words(because, learned, target, words):
    assert textout.stop_reason(because, learned, target) == words


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_the_bar_on_a_terminal_and_plain_lines_elsewhere():
    """One display for a run (ppt_dask.progress, drawn by tqdm): on a terminal a bar redrawn
    in place, elsewhere (a log, a pipe) a plain line; both with the epochs of the total,
    patterns per second, time left, loss, error and round time, the /ppt link above them,
    and why the run stopped at the end."""
    from ppt_dask.progress import Training

    class Finished:  # what close() reads of a Result
        stopped_because, learned, settings, wall_seconds = "max_epochs", False, {"target_error": 0.03}, 5.0

    record = {"epoch": 4.0, "loss": 0.5, "error_rate": 0.25, "patterns": 1000, "wall_seconds": 0.01,
              "elapsed_seconds": 2.0}
    tty, plain = FakeTerminal(), io.StringIO()
    for stream in (tty, plain):
        shown = Training(10, link="http://127.0.0.1:8787/ppt", stream=stream)
        assert stream.getvalue() == ""  # nothing before the first round
        shown(record)
        shown.close(Finished())
    state = "500 patterns/s, 3.00 s left  loss 0.5  error 25.00 %  10 ms/round"
    assert tty.getvalue().startswith(f"time breakdown, live: http://127.0.0.1:8787/ppt\n"
                                     f"\repoch 4.00/10 [#########...............]  40%  {state}")
    assert tty.getvalue().endswith("  40%  max epochs (target of 3 % error not reached) after 5.00 s  "
                                   "loss 0.5  error 25.00 %  10 ms/round\n")
    assert plain.getvalue() == (f"time breakdown, live: http://127.0.0.1:8787/ppt\nepoch 4.00/10 (40 %)  {state}\n"
                                "epoch 4.00/10 (40 %)  max epochs (target of 3 % error not reached) after 5.00 s"
                                "  loss 0.5  error 25.00 %  10 ms/round\n")


def _train_flags():
    from ppt_dask.cli import commands as cli
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return [o for a in sub.choices["train"]._actions for o in a.option_strings if o not in ("-h", "--help")]


def test_the_guide_documents_every_train_flag():
    """docs/guide/cli.md's table of ``ppt-dask train``'s flags names every flag the parser has."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "guide" / "cli.md").read_text()
    start = guide.index("The flags of `ppt-dask train`:")
    table = guide[start:guide.index("\n\n", guide.index("| flag", start))]
    missing = [flag for flag in _train_flags() if f"`{flag}" not in table and f", `{flag}" not in table
               and f"{flag}`" not in table]
    assert missing == [], missing


@pytest.mark.parametrize("command", [["train"], ["model", "calibrate"], ["model", "predict"],
                                     ["model", "recommend"], ["cluster", "ssh"]])
def test_help_is_the_reference_and_prints(command):
    proc = run(*command, "--help", timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: ppt-dask " + " ".join(command))
    if command == ["train"]:
        assert all(flag in proc.stdout for flag in _train_flags())
