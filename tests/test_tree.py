"""The fixed shard tree: reduce order, decomposition, plans (hypothesis properties)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppt_dask.core import tree
from ppt_dask.engine.rounds.graph import make_plan


def _parts(values):
    return [(np.array([v]), np.array([1.0])) for v in values]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-1000, 1000), min_size=1, max_size=70), st.integers(2, 6))
def test_tree_reduce_equals_flat_sum(values, fan_in):
    total = tree.reduce_serial(_parts(values), fan_in)
    assert total[0][0] == sum(values)  # integers: exact whatever the order
    assert total[1][0] == len(values)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 70), st.integers(2, 5), st.data())
def test_decompose_is_an_exact_cover_by_maximal_subtrees(n_shards, fan_in, data):
    start = data.draw(st.integers(0, n_shards - 1))
    stop = data.draw(st.integers(start + 1, n_shards))
    nodes = tree.decompose(start, stop, fan_in, n_shards)
    covered = [s for n in nodes for s in range(*tree.node_range(n, fan_in, n_shards))]
    assert covered == list(range(start, stop))
    for level, j in nodes:  # maximal: the parent is not inside the range
        if (level, j) != tree.root(n_shards, fan_in):
            a, b = tree.node_range((level + 1, j // fan_in), fan_in, n_shards)
            assert a < start or b > stop


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(1, 9), st.integers(2, 4), st.integers(0, 2**31))
def test_plan_evaluated_piecewise_is_bitwise_the_serial_tree(n_shards, n_workers, fan_in, seed):
    """What workers and reduce tasks compute, in any split, equals the one-process tree."""
    rng = np.random.default_rng(seed)
    parts = [(rng.standard_normal(5),) for _ in range(n_shards)]
    blocks = [(f"w{i}", a, b) for i, (a, b) in enumerate(tree.split_shards(n_shards, n_workers)) if b > a]
    plan = make_plan(blocks, n_shards, fan_in)
    values = {}
    for _, _a, _b, nodes in plan.blocks:  # each worker's subtrees
        for node in nodes:
            values[node] = tree.evaluate(node, parts.__getitem__, fan_in, n_shards)
    for node in plan.reduces:  # then the reduce tasks, children first
        values[node] = tree.combine([values[c] for c in tree.children(node, fan_in, n_shards)])
    expected = tree.reduce_serial(parts, fan_in)
    assert values[plan.root][0].tobytes() == expected[0].tobytes()
    # a reduce task only ever combines data of two or more workers
    for node in plan.reduces:
        a, b = tree.node_range(node, fan_in, n_shards)
        assert sum(1 for _, wa, wb in blocks if wa < b and a < wb) >= 2 or len(blocks) == 1


def test_aligned_blocks_give_one_node_per_worker():
    plan = make_plan([("a", 0, 4), ("b", 4, 8)], 8, 2)
    assert [nodes for *_, nodes in plan.blocks] == [((2, 0),), ((2, 1),)]
    assert plan.reduces == ((3, 0),)


def test_split_rows_partitions_the_rows():
    rows = tree.split_rows(10, 3)
    assert rows == [(0, 3), (3, 6), (6, 10)]
    with pytest.raises(ValueError, match="shards"):
        tree.split_rows(3, 4)


@pytest.mark.parametrize("bad", [0, 1, -2])
def test_fan_in_below_two_is_refused(bad):
    with pytest.raises(ValueError, match="fan_in"):
        tree.height(8, bad)
