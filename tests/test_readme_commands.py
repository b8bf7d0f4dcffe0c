"""Every ``ppt-dask`` command printed in README.md, deploy/README.md and the user guide
(docs/guide/*.md) runs as printed.

The commands are read from the fenced code blocks (continuation lines joined, comments
dropped) and run in order in one folder, so ``calib.json`` written by ``model calibrate``
is the one ``model predict`` reads (graphs/out's when the calibration did not run here).
Small settings keep the suite short: training commands get ``--epochs 1`` (and two
splits), the calibration fewer probe rounds and cluster sizes (a long run all the same:
``-m slow``, CI's full run). The commands that train or calibrate run on the tests' shared
scheduler (``--scheduler``, with ``--workers 2`` where the command gives none: what it
starts on a 2-core machine) rather than each on a LocalCluster of its own, but for the
quick start, which starts its LocalCluster as printed. Commands that need a cluster of
several hosts (a remote ``--scheduler``, ``cluster ssh``) run with ``--help`` appended,
which still parses every flag and value before printing. A command fails the test on a
non-zero exit status or a traceback.
"""

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import system

ROOT = Path(__file__).resolve().parents[1]
# the guide's pages hold the long explanations the README points to, with their commands
GUIDE = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guide").glob("*.md"))
DOCS = ("README.md", "deploy/README.md", *GUIDE)
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


QUICK_START = ["ppt-dask", "train", "parity8"]


def runnable(line: str, data_dir: str, scheduler: str | None = None) -> tuple[dict, list[str], bool]:
    """(environment additions, argv, help only) for one printed command; ``scheduler``: the
    address the commands that train or calibrate run on (None: their own LocalCluster)."""
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
    if words[1] == "train" and words != QUICK_START:  # the quick start runs as is
        extra = ["--epochs", "1", "--quiet"]
        if "--splits" in words:
            extra += ["--splits", "2", "--split-epochs", "1"]
    elif words[1:3] == ["model", "calibrate"]:
        extra = ["--rounds", "8", "--p-values", "1,2"]
    if scheduler and extra:
        extra += ([] if "--workers" in words else ["--workers", "2"]) + ["--scheduler", scheduler]
    return env, words + extra, False


# a command printed in two documents (the README's examples, again in the guide) runs once, where it is first printed
COMMANDS: list[tuple[str, str]] = []
for _doc in DOCS:
    COMMANDS += [(_doc, line) for line in printed_commands(ROOT / _doc) if line not in {seen for _, seen in COMMANDS}]
_OWN_FILES = ("train.csv", "test.csv", "new.csv", "parts/", "images.npy", "labels.npy")  # made by _own_files
# The MNIST calibration takes a minute or more even with small settings, LeNet-5's epoch about 20 s:
# long runs, in CI's full run (-m slow); the commands that read its calib.json get graphs/out's when
# it did not run.
LONG = ("ppt-dask model calibrate mnist", "ppt-dask train mnist --model ppt_dask.nets.examples:lenet5")
PARAMS = [pytest.param(doc, line, id=f"{doc}: {line}",
                       marks=[pytest.mark.slow] if line.startswith(LONG) else [])
          for doc, line in COMMANDS]


def test_the_documents_print_the_commands_we_expect():
    """The extraction finds the commands (an empty list would make the tests below vacuous)."""
    lines = [line for _, line in COMMANDS]
    assert "ppt-dask train parity8" in lines  # the quick start
    assert any(line.startswith("ppt-dask model recommend") for line in lines)
    assert any(line.startswith("ppt-dask cluster ssh") and "--python" in line for line in lines)
    assert sum(doc == "deploy/README.md" for doc, _ in COMMANDS) >= 3
    guide = {doc for doc, _ in COMMANDS if doc.startswith("docs/guide/")}
    assert {"docs/guide/cli.md", "docs/guide/own-data.md", "docs/guide/scaling-out.md"} <= guide


def _inputs_of_predict(argv: list[str], workdir: Path, script: str, env: dict, scheduler: str) -> None:
    """What a printed ``predict`` reads and the documents make elsewhere (a model trained on
    another machine, the user's own rows): a parity8 model and rows of its width."""
    import numpy as np

    model = workdir / argv[2]
    if not model.exists():
        subprocess.run([script, "train", "parity8", "--epochs", "1", "--quiet", "--save", str(model),
                        "--workers", "2", "--scheduler", scheduler],
                       cwd=workdir, env=env, check=True, capture_output=True, timeout=600)
    if "--input" in argv and not (workdir / argv[argv.index("--input") + 1]).exists():
        from ppt_dask import load_model

        width = load_model(model).net.sizes[0]
        np.save(workdir / argv[argv.index("--input") + 1], np.random.default_rng(0).random((5, width)))


def _own_files(workdir: Path) -> dict:
    """The files of one's own the README's commands name, made as a user would have them:
    tables written by pandas and pyarrow, arrays by numpy."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)

    def flowers(n, seed):
        r = np.random.default_rng(seed)
        df = pd.DataFrame(r.standard_normal((n, 3)), columns=["petal", "sepal", "stem"])
        df.insert(0, "id", np.arange(n))
        df["species"] = np.where(df.petal > 0.5, "iris", np.where(df.sepal > 0, "rose", "tulip"))
        return df

    def parts(folder):
        folder.mkdir()
        for i in range(3):
            df = pd.DataFrame(rng.standard_normal((100, 2)), columns=["rooms", "age"])
            df["price"] = 100 + 20 * df.rooms - 5 * df.age
            df.loc[i, "age"] = np.nan  # one incomplete row per part, for --dropna
            df.to_parquet(folder / f"part-{i}.parquet", index=False)

    images = rng.random((200, 1, 28, 28))
    return {"train.csv": lambda p: flowers(300, 1).to_csv(p, index=False),
            "test.csv": lambda p: flowers(100, 2).to_csv(p, index=False),
            "new.csv": lambda p: flowers(20, 3).drop(columns=["species"]).to_csv(p, index=False),
            "parts/": parts,
            "images.npy": lambda p: np.save(p, images),
            "labels.npy": lambda p: np.save(p, (images.mean(axis=(1, 2, 3)) > 0.5).astype(np.int64))}


def _inputs_of_own_data(argv: list[str], workdir: Path, script: str, env: dict) -> None:
    """The files of one's own a printed command reads, and the model a printed ``predict``
    of such a file needs (trained as the README's first such command trains it)."""
    makers = _own_files(workdir)
    for word in argv:
        if word in makers and not (workdir / word).exists():
            makers[word](workdir / word)
    if argv[1] == "predict" and not (workdir / argv[2]).exists():
        for name in ("train.csv", "test.csv"):
            if not (workdir / name).exists():
                makers[name](workdir / name)
        subprocess.run([script, "train", "train.csv", "--target", "species", "--epochs", "1", "--quiet", "--save",
                        argv[2]], cwd=workdir, env=env, check=True, capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


def _calibration_of(argv: list[str], workdir: Path) -> None:
    """The calib.json a printed ``model predict|recommend`` reads, when the printed
    calibration did not make it here (-m slow): the one graphs/out keeps from a full run."""
    name = argv[argv.index("--calibration") + 1]
    if not (workdir / name).exists():
        shutil.copy(ROOT / "graphs" / "out" / "calibration.json", workdir / name)


@pytest.mark.parametrize("doc,line", PARAMS)
def test_printed_command_runs(doc, line, workdir, scheduler_address):
    data_dir = os.environ.get("PPT_DASK_DATA") or str(ROOT.parent / "shared" / "data")
    env_extra, argv, help_only = runnable(line, data_dir, scheduler_address)
    if "--model" in argv and importlib.util.find_spec("torch") is None:
        system.missing("--model needs torch (pip install 'ppt_dask[torch]')")
    env = {**os.environ, **env_extra, "PPT_DASK_DATA": data_dir}
    env.pop("PPT_DASK_DEBUG", None)
    # the console script of this environment, so the test does not depend on PATH
    script = Path(sys.executable).with_name("ppt-dask")
    cmd = [str(script) if script.exists() else argv[0], *argv[1:]]
    if any(word in _OWN_FILES for word in argv):  # a table or arrays of one's own
        _inputs_of_own_data(argv, workdir, cmd[0], env)
    elif argv[1] == "predict":
        _inputs_of_predict(argv, workdir, cmd[0], env, scheduler_address)
    if "--calibration" in argv:  # model predict|recommend, train --calibration
        _calibration_of(argv, workdir)
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{doc}: {line!r} exited {done.returncode}:\n{output[-3000:]}"
    assert "Traceback" not in output, f"{doc}: {line!r} printed a traceback:\n{output[-3000:]}"
    if help_only:
        assert done.stdout.startswith("usage: ppt-dask"), output
    elif argv[1] == "train":
        # the summary starts with the data set (a single run), or gives the splits' accuracy
        data = argv[2] if argv[2] != "--x" else f"{argv[3]} and {argv[5]}"  # train --x A.npy --y B.npy
        assert done.stdout.startswith(f"{data}: ") or "test accuracy over" in done.stdout, output
