"""``ppt-dask`` ends an error in one line naming the flag; ``--debug`` shows the traceback."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from ppt_dask.cli import commands as cli
from ppt_dask.cli import errors as clierrors


def _run(*argv, env_extra=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "PPT_DASK_DEBUG"}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "ppt_dask.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("flag,value,words", [
    ("--seed", "-3", "must be >= 0"),
    ("--lr", "-1", "lr must be > 0"),
    ("--momentum", "2", "momentum must be in [0, 1)"),
    ("--target-error", "2", "target_error must be in [0, 1)"),
    ("--shards", "1000", "more shards (1000) than rows (256)"),
    ("--l2", "-1", "l2 must be >= 0"),
])
def test_a_bad_value_names_its_flag_before_any_cluster_starts(flag, value, words):
    run = _run("train", "parity8", flag, value, "--epochs", "1")
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert flag in last and words in last, last
    assert "time breakdown" not in run.stderr  # no cluster was started
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("flag,value", [("--lr", "-1"), ("--momentum", "2"), ("--block", "0")])
def test_a_bad_strategy_value_is_refused_before_the_data_is_read(flag, value, tmp_path):
    """``ppt-dask train mnist --lr -1`` on a machine without MNIST: the flag is named, not
    the missing data (the value is checked before a download would start)."""
    run = _run("train", "mnist", flag, value, env_extra={"PPT_DASK_DATA": str(tmp_path), "PPT_DASK_OFFLINE": "1"})
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ppt-dask: error: {flag}") or f"{flag}:" in last, last
    assert "MNIST" not in run.stderr and list(tmp_path.iterdir()) == []


def test_too_few_probe_rounds_name_the_flag():
    """Fewer rounds than the warm-up left nothing timed and ended in a NaN error."""
    run = _run("model", "calibrate", "mnist", "--rounds", "4")
    assert run.returncode == 2 and "--rounds must be at least 8" in run.stderr


@pytest.mark.parametrize("args,flag", [(["--pull", "0.5"], "--pull"), (["--block", "8"], "--block"),
                                       (["--staleness", "2"], "--staleness"), (["--data-dir", "."], "--data-dir")])
def test_a_flag_that_does_not_apply_is_refused(args, flag):
    """parity8's preset is full-batch epochs: these flags would be dropped without a word."""
    run = _run("train", "parity8", *args)
    assert run.returncode == 2
    line = run.stderr.strip()
    assert line.startswith(f"ppt-dask: error: {flag} ") and "\n" not in line, line
    assert "does not apply to" in line or "not to --strategy epoch" in line, line


def test_exchange_that_does_not_apply_is_refused_before_the_cluster():
    run = _run("train", "parity8", "--strategy", "local", "--exchange", "tree")
    assert run.returncode == 2
    line = run.stderr.strip()
    assert line.startswith("ppt-dask: error: --exchange ") and "\n" not in line, line
    assert "'tree'" in line and line.endswith("not to --strategy local"), line


@pytest.mark.parametrize("argv, words", [
    (["--strategy", "local", "--reproducible", "same-p"], "--reproducible 'same-p' applies to --strategy epoch, "
                                                         "block, ppt, not to --strategy local"),
    (["--strategy", "async", "--reproducible", "any-p"], "--reproducible 'any-p' applies to --strategy epoch, "
                                                        "block, ppt, average, local, not to --strategy async"),
])
def test_a_promise_that_does_not_apply_is_refused_before_the_cluster(argv, words):
    run = _run("train", "parity8", *argv)
    assert run.returncode == 2
    line = run.stderr.strip()
    assert line == f"ppt-dask: error: {words}", line


def test_debug_shows_the_traceback_anywhere_on_the_line_or_from_the_environment():
    for argv, env in ((["--debug", "train", "parity8", "--lr", "-1"], None),
                      (["train", "parity8", "--lr", "-1", "--debug"], None),
                      (["train", "parity8", "--lr", "-1"], {"PPT_DASK_DEBUG": "1"})):
        run = _run(*argv, env_extra=env)
        assert run.returncode == 1 and "Traceback" in run.stderr, (argv, run.stderr)
        assert run.stderr.strip().endswith("ValueError: lr must be > 0, got -1.0")


def test_an_unexpected_exception_is_one_line_and_status_1(capsys):
    """What is not bad input (a fault in ppt_dask, say) still ends in one line."""
    def broken(args):
        return {}.missing  # AttributeError, as the old `perfmodel._default_blocks`

    parser = cli.build_parser()
    clierrors.add_debug_flag(parser)
    args = parser.parse_args(["train", "parity8"])
    assert clierrors.run(broken, args, parser) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ppt-dask: error: AttributeError: ")
    assert "--debug" in err
    args = parser.parse_args(["train", "parity8", "--debug"])
    with pytest.raises(AttributeError):
        clierrors.run(broken, args, parser)


def test_model_recommend_without_blocks_runs(tmp_path):
    """The README's example, which ended in AttributeError (a module-private name moved)."""
    from pathlib import Path

    calibration = Path(__file__).resolve().parents[1] / "graphs" / "out" / "calibration.json"
    run = _run("model", "recommend", "--calibration", str(calibration), "--shards", "none",
               "--p-max", "64")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "| 64 |" in run.stdout


def test_every_flag_of_every_command_is_known_to_the_error_messages():
    flags = clierrors.flags_of(cli.build_parser())
    for dest, flag in (("seed", "--seed"), ("target_error", "--target-error"), ("p_max", "--p-max"),
                       ("calibration", "--calibration"), ("certs", "--certs")):
        assert flags[dest] == flag
    assert clierrors.name_the_flag("n_shards must be >= 1", flags) == "--shards: n_shards must be >= 1"
    assert clierrors.name_the_flag("more shards than rows", flags) == "more shards than rows"


def _folder_with_a_file(tmp_path):
    """A folder holding a file ``afile`` and a model file ``m.npz`` (a parity8 network's)."""
    import ppt_dask as ppt
    from ppt_dask.engine.saving import modelfile

    (tmp_path / "afile").write_text("not a folder")
    net = ppt.MLP((8, 4, 1), hidden="tanh", output="sigmoid")
    modelfile.Model(net, net.init_params(0)).save(tmp_path / "m.npz")
    np.save(tmp_path / "X.npy", np.zeros((3, 8)))
    return tmp_path


# every flag that takes a path, given one that cannot serve: (argv, the flag, words of what it must be)
BAD_PATHS = [
    (["train", "parity8", "--checkpoint", "afile"], "--checkpoint", "is a file; --checkpoint takes a folder"),
    (["train", "parity8", "--checkpoint", "afile/ck"], "--checkpoint", "is a file, so the folder 'afile/ck'"),
    (["train", "parity8", "--json", "nodir/out.json"], "--json", "the folder of 'nodir/out.json'"),
    (["train", "parity8", "--json", "."], "--json", "'.' is a folder; --json takes the path of"),
    (["train", "parity8", "--report", "."], "--report", "'.' is a folder; --report takes the path of"),
    (["train", "parity8", "--trace", "afile/t.json"], "--trace", "is a file, not a folder"),
    (["train", "parity8", "--save", "."], "--save", "'.' is a folder; --save takes the path of"),
    (["train", "mnist", "--data-dir", "afile"], "--data-dir", "is a file; --data-dir takes a folder"),
    (["model", "calibrate", "parity8", "--out", "nodir/c.json"], "--out", "the folder of 'nodir/c.json'"),
    (["model", "calibrate", "parity8", "--out", "."], "--out", "'.' is a folder; --out takes the path of"),
    (["model", "predict", "--calibration", "."], "--calibration", "'.' is a folder; --calibration takes"),
    (["train", "encoder", "--strategy", "block", "--calibration", "none.json"], "--calibration",
     "no such file 'none.json'"),
    (["model", "recommend", "--constants", "none.json"], "--constants", "no such file 'none.json'"),
    (["model", "predict", "--calibration", "afile", "--json", "."], "--json", "'.' is a folder"),
    (["predict", "m.npz", "--input", "none.npy", "--output", "y.npy"], "--input", "no such file 'none.npy'"),
    (["predict", "m.npz", "--input", "X.npy", "--output", "nodir/y.npy"], "--output", "the folder of"),
    (["predict", "m.npz", "parity8", "--json", "."], "--json", "'.' is a folder"),
    (["cluster", "ssh", "none.txt", "--certs", "."], "HOSTFILE", "no such file 'none.txt'"),
    (["cluster", "ssh", "afile", "--certs", "none"], "--certs", "no such folder 'none'"),
]


@pytest.mark.parametrize("argv, flag, words", BAD_PATHS, ids=[" ".join(a[:2] + a[-2:]) for a, _, _ in BAD_PATHS])
def test_a_path_that_cannot_serve_is_one_line_naming_the_flag_before_any_work(argv, flag, words, tmp_path,
                                                                               monkeypatch, capsys):
    """The command line run in this process (the console script's ``main``): each refusal is
    one line with the flag, the path and what it must be, raised before a cluster starts or
    a run trains (760b1fe: ``[Errno 17] File exists: 'afile'``; a --json in a missing folder
    failed after the whole run)."""
    monkeypatch.chdir(_folder_with_a_file(tmp_path))
    monkeypatch.delenv("PPT_DASK_DEBUG", raising=False)
    t0 = time.monotonic()
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err  # nothing ran, nothing trained
    assert err.startswith(f"ppt-dask: error: {flag}: ") and words in err, err
    assert "Errno" not in err and time.monotonic() - t0 < 30
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.npy", "afile", "m.npz"]  # nothing written


def test_the_checkpoint_that_is_a_file_as_a_user_meets_it(tmp_path):
    """The issue's case through the console script, in a fresh process."""
    (tmp_path / "ckpt").write_text("")
    run = _run("train", "parity8", "--checkpoint", str(tmp_path / "ckpt"))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"ppt-dask: error: --checkpoint: {str(tmp_path / 'ckpt')!r} is a file; --checkpoint takes a folder "
        "(made when missing) to hold checkpoint.npz"]


def test_an_os_error_that_slips_past_the_checks_still_names_its_flag(tmp_path, capsys):
    """The last line of defence: an OSError raised while the command runs (a disk that fills,
    a folder removed meanwhile) names the argument whose path it is, or its path alone."""
    parser = cli.build_parser()
    clierrors.add_debug_flag(parser)
    args = parser.parse_args(["train", "mnist", "--data-dir", str(tmp_path), "--json", "out.json"])

    def fails(error):
        def command(_args):
            raise error
        return command

    for error, line in [
        (FileNotFoundError(2, "No such file or directory", str(tmp_path / "mnist" / "x.gz")),
         f"--data-dir: no such file or directory: {str(tmp_path / 'mnist' / 'x.gz')!r}"),
        (OSError(28, "No space left on device", "out.json"), "--json: no space left on device: 'out.json'"),
        (OSError(13, "Permission denied", "/elsewhere"), "permission denied: '/elsewhere'"),
        (OSError("cannot reach the Dask scheduler"), "cannot reach the Dask scheduler"),
    ]:
        assert clierrors.run(fails(error), args, parser) == 2
        assert capsys.readouterr().err == f"ppt-dask: error: {line}\n"
