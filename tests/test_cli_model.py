"""``ppt-dask train|predict|model calibrate ... --model package.module:function``: a PyTorch
module of one's own from the command line, with ppt_dask/nets/examples.py; every refusal is one
line naming what to change, before any cluster starts."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from system import needs_module

needs_module("torch", "pip install 'ppt_dask[torch]'")

ROOT = Path(__file__).resolve().parents[1]

BAD_NETS = textwrap.dedent("""
    from torch import nn

    NOT_CALLABLE = 3

    def not_a_module():
        return "a string"

    def five_outputs():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 5))

    def flat_only():
        return nn.Sequential(nn.Linear(784, 10))

    def double():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10)).double()

    def parity_net():
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).double()

    def with_batchnorm():
        return nn.Sequential(nn.Conv2d(1, 2, 5), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 24 * 24, 10))
""")


def _run(*argv, cwd=ROOT, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != "PPT_DASK_DEBUG"}
    return subprocess.run([sys.executable, "-m", "ppt_dask.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


@pytest.mark.slow  # a long run (CI's full run): moved out of the default suite
def test_train_save_and_predict_with_a_module_of_ones_own(tmp_path):
    summary, model = tmp_path / "out.json", tmp_path / "tiny.npz"
    run = _run("train", "mnist", "--model", "ppt_dask.nets.examples:tiny_cnn", "--workers", "2", "--epochs", "0.1",
               "--quiet", "--json", str(summary), "--save", str(model))
    assert run.returncode == 0, run.stderr[-3000:]
    s = json.loads(summary.read_text())
    assert s["network"] == "Sequential" and s["strategy"] == "local" and s["workers"] == 2
    assert s["epochs"] == pytest.approx(0.1, abs=0.03) and s["test_accuracy"] > 0.5
    assert "network Sequential" in run.stdout and s["phases"]  # the breakdown came back
    run = _run("predict", str(model), "mnist")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "trained with the module of 'ppt_dask.nets.examples:tiny_cnn'" in run.stderr and "--model" in run.stderr
    run = _run("predict", str(model), "mnist", "--model", "ppt_dask.nets.examples:tiny_cnn")
    assert run.returncode == 0, run.stderr
    assert f"accuracy  {s['test_accuracy']:.4f}" in run.stdout and "TorchNet, rows (1, 28, 28)" in run.stdout


@pytest.mark.parametrize("argv, words", [
    (["--model", "no_such_package.nets:lenet5"], "--model: cannot import 'no_such_package.nets'"),
    (["--model", "bad_nets:missing"], "--model: 'bad_nets' has no 'missing'"),
    (["--model", "bad_nets"], "a module path is 'package.module:function', got 'bad_nets'"),
    (["--model", "bad_nets:NOT_CALLABLE"], "--model bad_nets:NOT_CALLABLE: a int, not a function or class"),
    (["--model", "bad_nets:not_a_module"], "not_a_module() must return a torch.nn.Module, got a str"),
    (["--model", "bad_nets:five_outputs"], "the module has 5 outputs; mnist needs 10"),
    (["--model", "bad_nets:flat_only"], "cannot take rows of shape (1, 28, 28)"),
    (["--model", "bad_nets:with_batchnorm"], "changes buffer(s) 1.running_mean"),
    (["--model", "bad_nets:double", "--dtype", "float32"], "--dtype float32, but the parameters of --model "
                                                           "bad_nets:double are float64"),
    (["--model", "bad_nets:flat_only", "--row-shape", "1,28,27"], "--row-shape 1,28,27 holds 756 numbers; a row "
                                                                  "of mnist holds 784"),
    (["--model", "bad_nets:flat_only", "--hidden", "64"], "--hidden applies to the built-in MLP, not with --model"),
    (["--row-shape", "784"], "--row-shape applies with --model"),
])
def test_a_bad_module_is_refused_in_one_line_before_any_cluster(tmp_path, monkeypatch, capsys, argv, words):
    """In this process (the refusals come before any cluster, so no subprocess is needed)."""
    from ppt_dask.cli import main

    (tmp_path / "bad_nets.py").write_text(BAD_NETS)
    monkeypatch.chdir(tmp_path)  # --model searches the current folder first
    monkeypatch.delenv("PPT_DASK_DEBUG", raising=False)
    sys.modules.pop("bad_nets", None)
    assert main(["train", "mnist", *argv, "--epochs", "0.01"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines
    assert "time breakdown" not in lines[0]


@pytest.mark.slow  # a long run (CI's full run): moved out of the default suite
def test_a_flat_module_takes_flat_rows_and_the_double_module_its_dtype(tmp_path):
    (tmp_path / "bad_nets.py").write_text(BAD_NETS)
    for name, extra in (("flat_only", ["--row-shape", "784"]), ("double", [])):
        summary = tmp_path / f"{name}.json"
        run = _run("train", "mnist", "--model", f"bad_nets:{name}", *extra, "--workers", "1", "--epochs", "0.05",
                   "--quiet", "--json", str(summary), cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-2000:]
        assert json.loads(summary.read_text())["test_accuracy"] > 0.5


def test_a_module_walks_each_pass_over_mnist_in_a_new_order():
    """The module defaults shuffle each pass, as a PyTorch loop's DataLoader(shuffle=True): in the
    files' order every pass one worker's epoch of a small CNN reached 96.5%, in a new order 98%
    (graphs/README.md, "A module's step"); other strategies have no shuffle, the MLP's preset keeps its order."""
    from ppt_dask.cli import commands, parser

    def settings(*argv):
        return commands._settings(parser.build_parser().parse_args(["train", "mnist", *argv]))
    assert settings("--model", "mynets:cnn")["shuffle"] is True
    assert "shuffle" not in settings("--model", "mynets:cnn", "--strategy", "block")
    assert "shuffle" not in settings()


@pytest.mark.slow  # a long run (CI's full run): moved out of the default suite
def test_calibrate_a_module_then_predict_and_recommend(tmp_path):
    (tmp_path / "bad_nets.py").write_text(BAD_NETS)
    out = tmp_path / "calib.json"
    run = _run("model", "calibrate", "parity8", "--model", "bad_nets:parity_net", "--workers", "2",
               "--block", "64", "--rounds", "8", "--p-values", "1,2", "--out", str(out), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    cal = json.loads(out.read_text())
    assert cal["network"] == "Sequential" and cal["n_weights"] == 8 * 16 + 16 + 16 + 1
    c = cal["constants"]  # measured on a worker: a call's cost, and the call curve over rows
    assert c["tf_seconds"] + c["tb_seconds"] + c["tc_seconds"] > 0 and min(c["call_seconds"]) > 0
    run = _run("model", "predict", "--calibration", str(out), "--p", "1,2,4", "--block", "64,256")
    assert run.returncode == 0 and "| 256 |" in run.stdout, run.stderr
    run = _run("model", "recommend", "--calibration", str(out), "--p-max", "8")
    assert run.returncode == 0 and "recommended: block" in run.stdout, run.stderr


@pytest.mark.slow  # a few minutes: the guide's claim (docs/guide/own-network.md) for a module with no other flag
def test_lenet5_with_no_other_flag_reaches_98_percent_within_3_epochs_on_2_workers(tmp_path):
    summary = tmp_path / "lenet.json"
    run = _run("train", "mnist", "--model", "ppt_dask.nets.examples:lenet5", "--workers", "2", "--quiet",
               "--json", str(summary), timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    s = json.loads(summary.read_text())
    print(f"lenet5, no other flag: {100 * s['test_accuracy']:.2f}% after {s['epochs']:.2f} epochs, "
          f"{s['wall_seconds']:.1f} s, {s['percent_not_gradient']:.1f}% not gradient")
    assert s["learned"] and s["test_accuracy"] >= 0.98 and s["epochs"] <= 3, s


def test_without_torch_the_command_says_how_to_install_it():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from ppt_dask.cli import main\n"
            "sys.exit(main(['train', 'mnist', '--model', 'ppt_dask.nets.examples:lenet5', '--epochs', '0.01']))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.strip().splitlines() == [
        "ppt-dask: error: --model: ppt.TorchNet needs PyTorch: pip install 'ppt_dask[torch]' (torch 2.1 to 2.13.0; "
        "on Linux the CPU build: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu) "
        "(import of torch halted; None in sys.modules)"]
