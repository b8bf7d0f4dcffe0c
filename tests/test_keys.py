"""Task keys are built and read back in one module: what one builds, the other reads."""

import doctest

import pytest

from ppt_dask.core import keys


def test_doctests():
    assert doctest.testmod(keys).failed == 0


@pytest.mark.parametrize("prefix", [keys.GRAD, keys.REDUCE, keys.UPDATE, keys.WEIGHTS, keys.STATS,
                                    keys.LOOP, keys.LOG, keys.STATE])
def test_a_round_key_reads_back(prefix):
    tag = keys.generation("0123abcd", 3)
    name = keys.round_name(prefix, tag, 41)
    assert keys.parse_key(name) == (prefix, "0123abcd", 3, 41)
    assert keys.parse_key((name, 1)) == (prefix, "0123abcd", 3, 41)  # a worker's task of the round
    assert keys.parse_key((keys.name(prefix, keys.round_tag(tag, 41)), 0, 2)) == (prefix, "0123abcd", 3, 41)


def test_keys_of_others_are_not_ours():
    assert keys.parse_key("sum-0123") is None and keys.parse_key(("x", 1)) is None and keys.parse_key(3) is None
