"""Every ``ppt-dask`` command printed in README.md and deploy/README.md runs as printed.

The commands are read from the fenced code blocks (continuation lines joined, comments
dropped) and run in order in one folder, so ``calib.json`` written by ``model calibrate``
is the one ``model predict`` reads. Small settings keep the suite short: training
commands get ``--epochs 1`` (and two splits), the calibration fewer probe rounds;
commands that need a cluster of several hosts (a remote ``--scheduler``, ``cluster ssh``)
run with ``--help`` appended, which still parses every flag and value before printing.
A command fails the test on a non-zero exit status or a traceback.
"""

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import system

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "deploy/README.md")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
_COMMAND = re.compile(r"^([A-Z_][A-Z0-9_]*=\S*\s+)*ppt-dask\s")  # VAR=... ppt-dask ...
LOCAL_HOSTS = ("127.0.0.1", "localhost")


def printed_commands(path: Path) -> list[str]:
    """The ``ppt-dask`` command lines of the fenced blocks of ``path``, as printed."""
    found = []
    for block in _FENCE.findall(path.read_text()):
        block = re.sub(r"\\\n\s*", " ", block)  # join continuation lines
        for line in block.splitlines():
            for part in line.split(" #", 1)[0].split("&&"):  # pip install . && ppt-dask ...
                if _COMMAND.match(part.strip() + " "):
                    found.append(part.strip())
    return found


def needs_several_hosts(words: list[str]) -> bool:
    if words[1:3] in (["cluster", "ssh"], ["cluster", "slurm"]):  # run for real in test_deploy, test_slurm
        return True
    if "--scheduler" in words:
        address = words[words.index("--scheduler") + 1]
        return not any(host in address for host in LOCAL_HOSTS)
    return False


def runnable(line: str, data_dir: str) -> tuple[dict, list[str], bool]:
    """(environment additions, argv, help only) for one printed command."""
    words = shlex.split(line, comments=True)
    env = {}
    while _ENV.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = os.path.expanduser(value)
    words = [data_dir if i and words[i - 1] == "--data-dir" and w == "DIR" else w
             for i, w in enumerate(words)]
    if needs_several_hosts(words):
        return env, words + ["--help"], True
    extra = []
    if words[1] == "train" and words != ["ppt-dask", "train", "parity8"]:  # the quick start runs as is
        extra = ["--epochs", "1", "--quiet"]
        if "--splits" in words:
            extra += ["--splits", "2", "--split-epochs", "1"]
    elif words[1:3] == ["model", "calibrate"]:
        extra = ["--rounds", "8"]
    return env, words + extra, False


COMMANDS = [(doc, line) for doc in DOCS for line in printed_commands(ROOT / doc)]


def test_the_documents_print_the_commands_we_expect():
    """The extraction finds the commands (an empty list would make the tests below vacuous)."""
    lines = [line for _, line in COMMANDS]
    assert "ppt-dask train parity8" in lines  # the quick start
    assert any(line.startswith("ppt-dask model recommend") for line in lines)
    assert any(line.startswith("ppt-dask cluster ssh") and "--python" in line for line in lines)
    assert sum(doc == "deploy/README.md" for doc, _ in COMMANDS) >= 3


def _inputs_of_predict(argv: list[str], workdir: Path, script: str, env: dict) -> None:
    """What a printed ``predict`` reads and the documents make elsewhere (a model trained on
    another machine, the user's own rows): a parity8 model and rows of its width."""
    import numpy as np

    model = workdir / argv[2]
    if not model.exists():
        subprocess.run([script, "train", "parity8", "--epochs", "1", "--quiet", "--save", str(model)],
                       cwd=workdir, env=env, check=True, capture_output=True, timeout=600)
    if "--input" in argv and not (workdir / argv[argv.index("--input") + 1]).exists():
        from ppt_dask import load_model

        width = load_model(model).net.sizes[0]
        np.save(workdir / argv[argv.index("--input") + 1], np.random.default_rng(0).random((5, width)))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


@pytest.mark.parametrize("doc,line", COMMANDS, ids=[f"{d}: {c}" for d, c in COMMANDS])
def test_printed_command_runs(doc, line, workdir):
    data_dir = os.environ.get("PPT_DASK_DATA") or str(ROOT.parent / "shared" / "data")
    env_extra, argv, help_only = runnable(line, data_dir)
    if "--model" in argv and importlib.util.find_spec("torch") is None:
        system.missing("--model needs torch (pip install 'ppt_dask[torch]')")
    env = {**os.environ, **env_extra, "PPT_DASK_DATA": data_dir}
    env.pop("PPT_DASK_DEBUG", None)
    # the console script of this environment, so the test does not depend on PATH
    script = Path(sys.executable).with_name("ppt-dask")
    cmd = [str(script) if script.exists() else argv[0], *argv[1:]]
    if argv[1] == "predict":
        _inputs_of_predict(argv, workdir, cmd[0], env)
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{doc}: {line!r} exited {done.returncode}:\n{output[-3000:]}"
    assert "Traceback" not in output, f"{doc}: {line!r} printed a traceback:\n{output[-3000:]}"
    if help_only:
        assert done.stdout.startswith("usage: ppt-dask"), output
    elif argv[1] == "train":
        # the summary starts with the data set (a single run), or gives the splits' accuracy
        assert done.stdout.startswith(f"{argv[2]}: ") or "test accuracy over" in done.stdout, output
