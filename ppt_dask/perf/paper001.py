"""Seed 001's published numbers: its problems (Table IV) and its measured constants
(Tables II, III and V, the Bat Cave and Messner clusters), as :mod:`ppt_dask.perf.model`
takes them. With them the model gives back 001's Table VII (``tests/test_perfmodel.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ppt_dask.perf.model import Constants

_MS, _US = 1e-3, 1e-6


@dataclass(frozen=True)
class Problem:
    """Sizes of one of 001's problems (Table IV); ``layers`` from section IV."""

    n_patterns: int
    n_test: int
    n_weights: int
    layers: tuple[int, ...]



# 001, Table IV (n, m, w) and section IV (architectures); w counts weights without biases.
PROBLEMS = {
    "function": Problem(1024, 128, 16768, (2, 128, 128, 1)),
    "encoder": Problem(256, 0, 4096, (256, 8, 256)),
    "digits": Problem(60000, 10000, 54912, (784, 64, 64, 10)),
}


def _paper(tf, tb, tu, tm, ts, to, tw, ti) -> Constants:
    # Tables II/III print Tf..To in ms. Table V is headed "ms", but Tw * w * log2(p) must
    # be milliseconds: only Tw in us per weight (= ms per 1000 weights) and Ti in us
    # reproduce Table VII (with ms the p = 2, b = 16 speedup would be 0.03, not 0.57) and
    # match the links (100 MBit/s moves one 8-byte weight in 0.64 us).
    return Constants(tf * _MS, tb * _MS, tu * _MS, tm * _MS, ts * _MS, to * _MS,
                     tw_seconds_per_weight=tw * _US, ti_seconds=ti * _US)


# 001, Table II (Bat Cave), Table III (Messner), Table V (Tw, Ti per cluster). The digits
# To is printed "314 529.2" and "40 218.1" (thin-space thousands): 314 s and 40 s, which
# the text confirms ("more than half of the run time is constant").
CONSTANTS = {
    ("bat_cave", "function"): _paper(0.22, 0.41, 0.07, 0.04, 0.001, 30.9, 0.798, 365.868),
    ("bat_cave", "encoder"): _paper(0.12, 0.16, 0.01, 0.01, 0.023, 28.4, 0.798, 365.868),
    ("bat_cave", "digits"): _paper(1.37, 1.33, 0.66, 0.22, 0.003, 314529.2, 0.798, 365.868),
    ("messner", "function"): _paper(0.12, 0.20, 0.03, 0.003, 0.002, 17.7, 0.230, 515.250),
    ("messner", "encoder"): _paper(0.07, 0.09, 0.01, 0.001, 0.013, 9.4, 0.230, 515.250),
    ("messner", "digits"): _paper(0.26, 0.27, 0.92, 0.058, 0.003, 40218.1, 0.230, 515.250),
}
