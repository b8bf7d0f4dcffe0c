"""The settings each data set is trained with from the command line (``ppt-dask train NAME``)."""

# Per data set: the network and the settings that learn it (seed 000 for parity, 001 for
# Encoder, Function and Digits). Command-line flags override them.
PRESETS = {
    "parity8": dict(hidden=(100,), activation="tanh", output="sigmoid", strategy="epoch",
                    lr=2.0, momentum=0.9, epochs=2000, target_error=0.0),
    "encoder": dict(hidden=(8,), activation="sigmoid", output="sigmoid", strategy="epoch",
                    lr=2.0, momentum=0.9, epochs=5000, target_error=0.0),
    "function": dict(hidden=(128, 128), activation="tanh", output="linear", strategy="block",
                     block=16, lr=0.1, momentum=0.5, epochs=200, target_error=None),
    # local SGD with the average applied one round late (ppt_dask.algorithms.localsgd): 60 local steps of
    # 100 rows between averages, the exchange hidden behind them; the model reported and
    # tested is the running mean of the averages (ema 0.5: 97% 0.6-1.8 epochs sooner than the
    # last average, seeds 0-3); float32 (the same accuracy per epoch as float64 here, half the
    # bytes and time); a test-set check every round (0.2 epoch) once the training-error
    # estimate over the last 0.4 epoch is at the target (over a whole epoch it lags the mean).
    # The fastest of the measured combinations (graphs/README.md, "The mnist preset").
    "mnist": dict(hidden=(64, 64), activation="tanh", output="softmax", strategy="local",
                  block=100, interval=6000, pull=0.5, ema=0.5, lr=0.2, momentum=0.8, epochs=15,
                  target_error=0.03, dtype="float32", check_every=0.2, window_epochs=0.4),
    "digits5000": dict(hidden=(25,), activation="sigmoid", output="softmax", strategy="epoch",
                       lr=2.0, momentum=0.9, l2=0.6987, epochs=500, target_error=None),
}


# Per (data set, strategy): settings that differ from the data set's preset.
STRATEGY_PRESETS = {
    ("parity8", "ppt"): dict(local_epoch=32, replicate=True, epochs=5000),
    # learning by block (001) where the set's preset learns by epoch: a quarter of the set a step
    ("parity8", "block"): dict(block=64, lr=0.5),  # learnt in 360 epochs
    ("encoder", "block"): dict(block=32, lr=2.0, momentum=0.5),  # learnt in 1034 epochs (8268 rounds)
    ("digits5000", "block"): dict(block=500, lr=0.5),
    # asynchronous: less momentum than the sets' synchronous presets (asynchrony brings its own;
    # ppt_dask.algorithms.asynchronous); p = 2, 2026-11-26, loaded machine
    # parity8 async, a shard an update: `ppt-dask train parity8 --strategy async --workers 2 --seed S`
    # learnt for 15 of 15 seeds in 22.5-74.5 epochs (2026-11-27; through ppt.train on 2 of 4
    # workers, 40 of 40 in 31-90)
    ("parity8", "async"): dict(lr=1.0, momentum=0.8),
    ("encoder", "async"): dict(block=32, lr=4.0, momentum=0.0),  # learnt in 966 epochs, 13.9 s
    ("digits5000", "async"): dict(block=500, lr=1.0, momentum=0.0),  # 8.4% training error in 100 epochs, 2.7 s
    ("parity8", "average"): dict(lr=0.5, block=16),
    ("mnist", "average"): dict(lr=0.1, momentum=0.9, block=100, local_epochs=1.0, interval=None, epochs=15),
    ("mnist", "block"): dict(block=1000, lr=0.5, momentum=0.9, epochs=15),
    ("mnist", "epoch"): dict(block=None, lr=0.5, momentum=0.9, epochs=15),
    ("mnist", "ppt"): dict(local_epoch=500, lr=0.5, block=None, epochs=15),
    # a replica per worker, 100 patterns an update, no explicit momentum: asynchrony brings its
    # own (ppt_dask.algorithms.asynchronous). At p = 2, lr / (1 - momentum) = 0.5 throughout,
    # 97% in a median 4.5 epochs with momentum 0 against 5.2 with 0.6, 6.0 with 0.8 and 6.5
    # with 0.9 (graphs/README.md, "Asynchronous training")
    ("mnist", "async"): dict(block=100, lr=0.5, momentum=0.0, staleness=8, epochs=10),
    ("digits5000", "average"): dict(lr=2.0, momentum=0.0, sample_fraction=0.9, local_epochs=5,
                                    epochs=500),
}


# A table or arrays of one's own (ppt-dask train PATH): the estimators' defaults, so that the
# command line and PPTClassifier() / PPTRegressor() train alike (tests/test_owndata.py checks
# them against ppt_dask.sklearn.base): a (100,) relu layer, local SGD in float32 with `batch`
# rows a step over all shards and `steps` local steps between averages (at most a pass over a
# shard; one shard for a set of fewer than `steps` batches), lr 0.05, momentum 0.9, L2 1e-4;
# on such a small set (solver "auto") Adam with MLPClassifier's lr 0.001 and batches of 200,
# each pass in a new order; features (and regression targets) scaled on the cluster;
# at most 200 epochs, stopped by scikit-learn's tol rule (the epoch's mean training loss not
# below the best minus `tol` for more than `n_iter_no_change` epochs).
TABLE = dict(hidden=(100,), activation="relu", strategy="local", batch=100, steps=60, lr=0.05, momentum=0.9,
             l2=1e-4, epochs=200, target_error=None, dtype="float32", tol=1e-4, n_iter_no_change=10,
             solver=None, adam_lr=0.001, adam_batch=200)  # solver None: adam on a small set, else sgd

# Per strategy named on a table: settings that differ from TABLE.
TABLE_STRATEGY_PRESETS = {
    "epoch": dict(lr=0.3),
    "block": dict(batch=1000, lr=0.3),
    "ppt": dict(lr=0.1),
    "average": dict(local_epochs=1.0, lr=0.1),
    "async": dict(batch=1000, lr=0.1, staleness=4),
}

# Per data set: the defaults of a module of the user's (``--model``), over the data set's preset.
# A convolutional network costs far more per row than the MLP (LeNet-5: 0.42 million multiply-adds
# forward per image against 55 thousand; a 64-row step 7-11 ms of a worker), so 20 steps make a round
# of the local strategy (one long task per worker, the averages sent between workers) 150 ms or more
# of gradient work against milliseconds of exchange: the averages can come often. MNIST: LeNet-5
# (ppt_dask/nets/examples.py) reached 98% test accuracy at 1.5 epochs with these, checked every
# quarter epoch, on 2 workers (README, "Your own network").
# Each pass over a shard in a new order (shuffle, as a PyTorch DataLoader's shuffle=True): in the
# files' order every pass, one worker's epoch of graphs/small_cnn.py:torch_example_cnn reached 96.5% test accuracy where
# a plain PyTorch loop in a new order each epoch reached 97.7-98.2% (the plain loop in the files'
# order: 96.5% too; graphs/README.md, "A module's step").
MODULE_PRESETS = {
    "mnist": dict(strategy="local", block=64, interval=1280, pull=0.5, ema=0.0, lr=0.05, momentum=0.9,
                  epochs=10, target_error=0.02, check_every=0.25, window_epochs=0.25, dtype="float32",
                  shuffle=True),
}


# The local strategy's settings by the number of shards S (one per worker: S is the number of
# workers p unless --shards says otherwise), over the preset; the flags still win. The presets
# were tuned at p = 1 and 2: 60 local steps of 100 rows between averages. At p = 8 that is 0.8
# epoch a round and 97% MNIST took 17.6 epochs (2.5 at p = 1). What brought it back
# (graphs/README.md, "Settings chosen by the number of workers"; sweeps of the command line on
# one worker with --shards S, the same bits as S workers):
# - One local step a round, of a global batch (its rows over all shards) of a few preset blocks,
#   the learning rate raised with it. Goyal et al. ("Accurate, Large Minibatch SGD: Training
#   ImageNet in 1 Hour", 2017) scale it linearly; that held to 2 blocks (200 rows at lr 0.4,
#   against the preset's 100 at 0.2), not to 4: 400 rows at lr 0.4 / 0.5 / 0.6 / 0.7 took 4.3 /
#   3.35 / 4.0 / 3.8 epochs at S = 8, at lr 0.8 (512 rows at 0.9: no 97% in 15 epochs) more.
#   4 blocks at lr 0.5 for S = 3 to 8 (epochs x p = 1's over seeds 0-2: S = 4 1.25 / 1.18 / 1.16,
#   S = 8 1.34 / 1.07 / 1.36, S = 3 1.34 at seed 0) in about 0.6x the rounds of 2 blocks (2.49 /
#   2.65 epochs at S = 4 / 8), which on 2 cores made p = 4 1.15x and p = 8 1.5x sooner (medians
#   of 3: 1.93 -> 1.68 s, 4.40 -> 2.92 s); from 9 shards 2 blocks (S = 16: 400 rows 5.0 epochs,
#   200 rows 3.9).
# - One local step a round. More drove the shards' models apart: at S = 8, 50-row steps at lr 0.4,
#   one / two steps a round took 4.3 / 6.0 epochs; at S = 4, 100-row steps at lr 0.5, 1 / 2 / 4
#   steps a round 3.1 / 4.1 / more than 6 epochs. So a round is short, and the check cadence (a
#   check every 0.2 epoch) holds at every p.
# - The correction of CoCoD-SGD (Shen et al., IJCAI 2019; LocalSGD(compensate=True, pull=1)):
#   a shard starts from the late average plus its own last round. The preset's half pull of the
#   gap took 4.5 epochs at S = 8 (one 50-row step a round, lr 0.5) against 3.4.
# - The running mean's horizon in epochs kept: ema = 0.5 ** (rows a round / 6000), the preset's
#   0.5 a round of its 6000 rows at S = 1 (modules: no running mean, as their preset).
# No warm-up: lr 0.5 at 400 rows a step did not diverge. At S = 1 the preset stays (one shard:
# no average). At S = 2 it stays too: one 200-row step a round at lr 0.5 reaches 97% at 3.1
# epochs against 4.4, but in 463 rounds against 22, which cost more on 2 cores (1.1 s against
# 0.97) and far more over a slow link.
# A module of one's own (--model) keeps 2 blocks at every S (128 rows at lr 0.1): a convolutional
# network's rounds are its gradients' time, not the exchange's, and 4 blocks were not measured.
SCALED_FROM_SHARDS = 3
# (the most shards it holds for, None: any; the global batch in preset blocks; its lr, None: the
# preset's times the blocks), the first row that holds
MLP_SCALING = ((8, 4, 0.5), (None, 2, None))
MODULE_SCALING = ((None, 2, None),)
SMALLEST_BLOCK = 8  # rows a local step at least: from 16 shards on, the global batch grows with S


def for_shards(preset: dict, n_shards: int, scaling: tuple = MLP_SCALING) -> dict:
    """The settings of a local-strategy ``preset`` that depend on the number of shards
    (empty for 1 and 2 shards, and for other strategies), by the first row of ``scaling``
    that holds for ``n_shards``.

    >>> for_shards(PRESETS["mnist"], 8)
    {'block': 50, 'interval': 50, 'lr': 0.5, 'pull': 1.0, 'compensate': True, 'ema': 0.9548}
    >>> for_shards(PRESETS["mnist"], 16)
    {'block': 12, 'interval': 12, 'lr': 0.4, 'pull': 1.0, 'compensate': True, 'ema': 0.9781}
    >>> for_shards(MODULE_PRESETS["mnist"], 8, MODULE_SCALING)
    {'block': 16, 'interval': 16, 'lr': 0.1, 'pull': 1.0, 'compensate': True, 'ema': 0.0}
    """
    if preset.get("strategy") != "local" or n_shards < SCALED_FROM_SHARDS:
        return {}
    blocks, lr = next((blocks, lr) for most, blocks, lr in scaling if most is None or n_shards <= most)
    rows = blocks * preset["block"]
    block = max(SMALLEST_BLOCK, round(rows / n_shards))
    ema = round(preset["ema"] ** (block * n_shards / preset["interval"]), 4) if preset.get("ema") else 0.0
    return dict(block=block, interval=block, lr=round(lr or preset["lr"] * blocks, 6), pull=1.0,
                compensate=True, ema=ema)


def round_within_check(s: dict, n_rows: int, n_shards: int) -> bool:
    """Cut the local strategy's round to at most one test-set check: the stopping rule
    checks at the end of a round, so a round longer than ``check_every`` epochs would
    check less often than the preset says (``interval * n_shards`` patterns a round
    against ``check_every * n_rows`` a check). ``s["interval"]`` becomes the largest whole
    number of blocks that fits (at least one block); True when it changed."""
    if s.get("strategy") != "local" or s.get("target_error") is None or not s.get("interval"):
        return False
    fits = int(s.get("check_every", 1.0) * n_rows / n_shards)
    block = s.get("block") or 100
    if s["interval"] <= fits:
        return False
    s["interval"] = max(block, fits // block * block)
    return True
