"""The presets' settings chosen by the number of shards (one per worker for the local strategy):
the values each count gets, the flags winning over them, a round never longer than a check, and
the same weights on 1, 2 and 4 workers for a count's settings, chosen or given as flags."""

import json
import subprocess
import sys

import numpy as np
import pytest

from ppt_dask.cli import commands, presets
from ppt_dask.cli.parser import build_parser

MLP = presets.PRESETS["mnist"]
MODULE = {**MLP, **presets.MODULE_PRESETS["mnist"]}


def _scaled(block, lr, ema):
    return dict(block=block, interval=block, lr=lr, pull=1.0, compensate=True, ema=ema)


def _horizon(block, n_shards):
    """The running mean's horizon kept in epochs: the preset's 0.5 a round of its 6000 rows
    (interval 6000 at S = 1), so 0.5 ** (rows a round / 6000) for one step of ``block`` rows on
    each of ``n_shards`` shards, to the 4 places the presets keep."""
    return round(0.5 ** (block * n_shards / 6000), 4)


# the settings graphs/README.md measured (MNIST MLP, epochs to 97% at seed 0 in the table there):
# 400 rows a step over all shards (4 of the preset's 100-row blocks) at lr 0.5 up to 8 shards,
# 200 (2 blocks) at the preset's lr 0.2 times 2 beyond, each shard's share never under 8 rows
@pytest.mark.parametrize("n_shards, want", [
    (1, {}), (2, {}),  # the preset's own: 60 steps of 100 rows a round
    *((s, _scaled(round(400 / s), 0.5, _horizon(round(400 / s), s))) for s in (3, 4, 8)),
    *((s, _scaled(round(200 / s), 2 * 0.2, _horizon(round(200 / s), s))) for s in (9, 16)),
    (64, _scaled(8, 2 * 0.2, _horizon(8, 64))),  # 200 / 64 = 3 rows: never under 8 rows a step
])
def test_the_mlp_presets_settings_by_shards(n_shards, want):
    assert presets.for_shards(MLP, n_shards) == want


@pytest.mark.parametrize("n_shards, want", [
    (1, {}), (2, {}), (4, _scaled(32, 0.1, 0.0)), (8, _scaled(16, 0.1, 0.0)),
])
def test_a_modules_settings_by_shards(n_shards, want):
    """``--model``: 64-row steps at lr 0.05 in the preset, so 128 rows a step at lr 0.1 over
    all shards at every count; no running mean, as the module preset has none."""
    assert presets.for_shards(MODULE, n_shards, presets.MODULE_SCALING) == want


def test_only_the_local_strategy_is_scaled():
    assert presets.for_shards(presets.PRESETS["parity8"], 8) == {}
    assert presets.for_shards({**MLP, "strategy": "average"}, 8) == {}


def _settings(*flags):
    return commands._settings(build_parser().parse_args(["train", *flags]))


def test_the_command_line_takes_the_settings_of_its_shard_count():
    s = _settings("mnist", "--workers", "8")
    assert {k: s[k] for k in ("block", "interval", "lr", "pull", "compensate", "ema")} == _scaled(50, 0.5, 0.9548)
    assert s["momentum"] == MLP["momentum"] and s["check_every"] == MLP["check_every"]
    assert _settings("mnist", "--workers", "2")["block"] == 100  # the preset
    # the count of shards, not of workers: 8 shards on 2 workers are run as on 8
    assert _settings("mnist", "--workers", "2", "--shards", "8") == s
    assert _settings("mnist", "--workers", "8", "--model", "ppt_dask.nets.examples:tiny_cnn")["block"] == 16


def test_the_users_flags_win_over_the_settings_by_shards():
    s = _settings("mnist", "--workers", "8", "--lr", "0.3", "--no-compensate", "--pull", "0.5", "--interval", "100")
    assert (s["lr"], s["compensate"], s["pull"], s["interval"], s["block"]) == (0.3, False, 0.5, 100, 50)
    # another strategy keeps its own preset: nothing of the local strategy's reaches it
    average = _settings("mnist", "--workers", "8", "--strategy", "average")
    assert average["block"] == 100 and average["lr"] == 0.1 and "compensate" not in average


def test_a_round_is_cut_to_a_check():
    """The stopping rule checks the test set at the end of a round: a round longer than
    check_every epochs would check less often than the preset says."""
    s = _settings("mnist", "--workers", "2", "--check-every", "0.1")
    assert s["interval"] == 6000 and presets.round_within_check(s, 60000, 2)
    assert s["interval"] == 3000  # 2 shards x 3000 rows = 0.1 epoch
    s = _settings("mnist", "--workers", "2")
    assert not presets.round_within_check(s, 60000, 2) and s["interval"] == 6000  # 0.2 epoch: one check
    s = _settings("mnist", "--workers", "2", "--check-every", "0.001")
    assert presets.round_within_check(s, 60000, 2) and s["interval"] == 100  # at least one block
    s = _settings("mnist", "--workers", "2", "--target-error", "0.05", "--strategy", "block", "--block", "1000")
    assert not presets.round_within_check(s, 60000, 2)  # rounds of another strategy stay


def _train(tmp_path, address, name, *flags):
    out, model = tmp_path / f"{name}.json", tmp_path / f"{name}.npz"
    proc = subprocess.run([sys.executable, "-m", "ppt_dask.cli", "train", "mnist", "--epochs", "0.02",
                           "--json", str(out), "--save", str(model), "--quiet", "--scheduler", address, *flags],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), np.load(model)["params"]


@pytest.mark.slow  # 7 s, three runs: in CI's full run (.ci/run), out of the default suite's few minutes
def test_four_shards_settings_give_the_same_weights_on_1_2_4_workers(tmp_path, scheduler_address):
    """4 shards take the settings of 4 (one step of 100 rows a round, lr 0.5, the compensated
    correction) however many workers run them, and so end with the same weights, bit for
    bit; given as flags they are the same run."""
    runs = {w: _train(tmp_path, scheduler_address, f"w{w}", "--shards", "4", "--workers", str(w)) for w in (1, 2, 4)}
    flags = _train(tmp_path, scheduler_address, "flags", "--workers", "4", "--block", "100", "--interval", "100",
                   "--lr", "0.5", "--pull", "1", "--compensate", "--ema", "0.9548")
    summary, params = runs[4]
    chosen = {k: summary[k] for k in ("block", "interval", "lr", "pull", "compensate", "ema")}
    assert chosen == _scaled(100, 0.5, 0.9548)
    assert summary["rounds"] == 3 and summary["shards"] == 4  # 3 x 4 x 100 rows = 0.02 epoch
    for workers, (other, other_params) in [*((w, runs[w]) for w in (1, 2)), (4, flags)]:
        assert other["workers"] == workers and other["train_loss"] == summary["train_loss"]
        assert other_params.tobytes() == params.tobytes()
