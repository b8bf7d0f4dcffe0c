"""One table decides which parameter applies to which strategy (ppt_dask.core.applicability):
this walks all of it, through the command line, ``train`` and the estimator alike."""

import dataclasses
import subprocess

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms import choose
from ppt_dask.cli import commands as cli
from ppt_dask.cli import flags as cliflags
from ppt_dask.core import applicability
from ppt_dask.core.applicability import STRATEGIES, STRATEGY_OWN, TABLE

# a value for each row that is "given" (not the neutral default)
CLI_VALUES = {"block": ["--block", "4"], "local_epoch": ["--local-epoch", "4"], "replicate": ["--replicate"],
              "interval": ["--interval", "8"], "pull": ["--pull", "0.5"], "ema": ["--ema", "0.5"],
              "local_epochs": ["--local-epochs", "2"],
              "sample_fraction": ["--sample-fraction", "0.5"], "momentum_policy": ["--momentum-policy", "average"],
              "staleness": ["--staleness", "2"], "exchange": ["--exchange", "tree"], "pipeline": ["--pipeline", "2"],
              "restarts": ["--restarts", "1"], "solver": ["--solver", "adam"], "compensate": ["--compensate"],
              "shuffle": ["--shuffle"]}
OWN_VALUES = {"block": 4, "local_epoch": 4, "interval": 8, "pull": 0.5, "ema": 0.5, "local_epochs": 2.0,
              "sample_fraction": 0.5, "momentum_policy": "average", "staleness": 2, "solver": "adam",
              "shuffle": True, "compensate": True}


def test_the_table_agrees_with_the_strategy_classes():
    """A strategy's own row applies exactly where the strategy's class has that field
    ("epoch" is Sync without a block: block does not apply to it)."""
    for name in STRATEGIES:
        cls = type(choose.make(name, block=4 if name == "block" else None))
        for row in STRATEGY_OWN:
            has = row in {f.name for f in dataclasses.fields(cls)} and not (name == "epoch" and row == "block")
            assert applicability.applies(row, name) == has, (name, row)
    assert set(cliflags.STRATEGY_FLAGS) <= set(TABLE) and set(OWN_VALUES) == set(STRATEGY_OWN)


@pytest.fixture
def cli_here(capsys, monkeypatch):
    """The command line run in this process: the console script's ``main``, its exit status
    and what it printed. A refusal comes before any cluster, so a fresh interpreter for each
    of the fifty here would only add its start-up (1-2 s each; tests/test_cli.py and
    tests/test_cli_errors.py run refusals in subprocesses)."""
    monkeypatch.delenv("PPT_DASK_DEBUG", raising=False)

    def run(*args):
        status = cli.main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, status, out, err)
    return run


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_flag_that_does_not_apply_is_refused_and_every_one_that_does_passes(strategy, tmp_path, cli_here):
    """Refusals through the real command line (one line, status 2, before any cluster);
    the flags that apply pass the same check the command runs first."""
    (tmp_path / "checkpoint.npz").write_bytes(b"")  # --resume needs a file there to get past
    values = {**CLI_VALUES, "checkpoint": ["--checkpoint", str(tmp_path)],
              "resume": ["--checkpoint", str(tmp_path), "--resume"]}
    base = ["train", "parity8", "--strategy", strategy] + (["--block", "4"] if strategy == "block" else [])
    refused = []
    for row in cliflags.STRATEGY_FLAGS:
        argv = base + values[row] if not (row == "block" and strategy == "block") else base
        if row == "pipeline" and strategy != "async":  # it applies to the per-round graphs
            argv = argv + ["--exchange", "all"]
        if applicability.applies(row, strategy, "tree"):
            args = cli.build_parser().parse_args(argv)
            cliflags.refuse_flags(args, strategy, 0.0)  # no error
        else:
            refused.append(row)
            out = cli_here(*argv)
            flag = applicability.cli_spelling(row)
            assert out.returncode == 2, (row, out.stderr)
            lines = out.stderr.strip().splitlines()
            named = (flag, "--checkpoint") if row == "resume" else (flag,)  # --resume comes with --checkpoint
            assert len(lines) == 1 and any(f in lines[0] for f in named), lines
            assert "applies to --strategy" in lines[0], lines
            assert f"not to --strategy {strategy}" in lines[0]
    assert refused or strategy == "none"  # every strategy has flags that do not apply
    assert len(refused) == sum(not applicability.applies(r, strategy, "tree") for r in cliflags.STRATEGY_FLAGS)


def test_exchange_all_applies_to_local_and_auto_to_all():
    for strategy in STRATEGIES:
        applicability.refuse(strategy, {"exchange": "auto"})
    applicability.refuse("local", {"exchange": "all"})
    with pytest.raises(ValueError, match="exchange 'all' applies to strategy epoch, block, ppt, average"):
        applicability.refuse("async", {"exchange": "all"})


def test_exchange_stream_applies_to_every_strategy_and_tree_not_to_the_streamed_only():
    for strategy in STRATEGIES:
        applicability.refuse(strategy, {"exchange": "stream"})
    for strategy in ("local", "async"):
        with pytest.raises(ValueError, match=f"exchange 'tree' applies to strategy epoch, block, ppt, average, "
                                             f"not to strategy {strategy}"):
            applicability.refuse(strategy, {"exchange": "tree"})


@pytest.mark.parametrize("strategy", ["local", "block"])
def test_pipeline_is_refused_on_streamed_rounds(strategy, threads_client, cli_here):
    """The streamed rounds run ahead by themselves: a pipeline there would change nothing."""
    out = cli_here("train", "parity8", "--strategy", strategy, "--pipeline", "2")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--pipeline applies to the per-round graphs" in out.stderr
    X, y = np.random.default_rng(0).normal(size=(64, 3)), np.arange(64) % 2
    shards = ppt.enter_data(threads_client, X, y, n_shards=2)
    made = choose.make(strategy, lr=0.1, block=8, interval=16 if strategy == "local" else None)
    try:
        with pytest.raises(ValueError, match="^pipeline=2 applies to the per-round graphs"):
            ppt.train(ppt.MLP((3, 4, 2)), shards, made, ppt.Stop(max_epochs=1), pipeline=2)
        ppt.train(ppt.MLP((3, 4, 2)), shards, made, ppt.Stop(max_epochs=1), pipeline=2, exchange="all")
    finally:
        ppt.exit_data(shards)


TRAIN_ROWS = ("exchange", "pipeline", "checkpoint", "resume", "restarts", "on_round", "snapshot_epochs",
              "initial_state")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_train_refuses_what_does_not_apply_and_runs_what_does(strategy, threads_client, tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(64, 3)), rng.integers(0, 2, 64)
    net = ppt.MLP((3, 4, 2))
    shards = ppt.enter_data(threads_client, X, y, n_shards=2)
    made = choose.make(strategy, lr=0.1, block=None if strategy in ("epoch", "ppt") else 8,
                       local_epoch=8 if strategy == "ppt" else None,
                       interval=16 if strategy == "local" else None)
    values = {"exchange": "tree", "pipeline": 2, "checkpoint_dir": str(tmp_path), "resume": True,
              "on_round": lambda record: None, "snapshot_epochs": (0.5,),
              "initial_state": made.init(net.init_params(0))}
    try:
        for row in TRAIN_ROWS:
            keyword = {"checkpoint": "checkpoint_dir"}.get(row, row)
            kwargs = {keyword: values[keyword]} if row != "restarts" else {}
            if row == "pipeline" and strategy != "async":  # it applies to the per-round graphs
                kwargs["exchange"] = "all"
            if row == "resume":
                kwargs["checkpoint_dir"] = str(tmp_path)
            stop = ppt.Stop(max_epochs=1, restarts=1 if row == "restarts" else 0)
            if applicability.applies(row, strategy, "tree"):
                result = ppt.train(net, shards, made, stop, **kwargs)
                assert result.rounds >= 1, (row, strategy)
            else:
                named = "(resume|checkpoint)" if row == "resume" else row  # resume comes with checkpoint_dir
                with pytest.raises(ValueError, match=f"^{named}.* applies to strategy .*not to strategy {strategy}$"):
                    ppt.train(net, shards, made, stop, **kwargs)
    finally:
        ppt.exit_data(shards)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_estimator_refuses_strategy_params_that_do_not_apply(strategy):
    """Refused in fit before any cluster work (no client here: a fit would start one)."""
    X, y = np.random.default_rng(0).normal(size=(40, 3)), np.arange(40) % 2
    size = {"ppt": "local_epoch", "average": "block"}.get(strategy, "block")
    for row in STRATEGY_OWN:
        if row == "solver":  # the estimator's own parameter, not one of strategy_params (test_estimator.py)
            continue
        clf = ppt.PPTClassifier(strategy=strategy, strategy_params={row: OWN_VALUES[row]})
        if applicability.applies(row, strategy) or row == size:
            clf._settings()  # the check fit runs first: no error
        else:
            refusal = rf"^strategy_params\['{row}'\] applies to .*not to strategy {strategy}$"
            with pytest.raises(ValueError, match=refusal):
                clf.fit(X, y)
    if strategy == "epoch":
        with pytest.raises(ValueError, match="batch_size=10 applies to strategy block"):
            ppt.PPTClassifier(strategy="epoch", batch_size=10).fit(X, y)
    with pytest.raises(ValueError, match=r"strategy_params\['pipeline'\] is not a parameter of a strategy"):
        ppt.PPTClassifier(strategy=strategy, strategy_params={"pipeline": 2}).fit(X, y)
