"""The balanced orders of pairing by steps and of one-arm-per-process rounds, and the
carry-over estimate (orchestrator.core.blocks)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from orchestrator.core import blocks


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_williams_rows_balance_positions_and_predecessors(n: int) -> None:
    rows = blocks.williams_rows(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(r) == list(range(n)) for r in rows)
    follows = Counter((r[i], r[i + 1]) for r in rows for i in range(n - 1))
    assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1
    positions = Counter((r[i], i) for r in rows for i in range(n))
    assert len(positions) == n * n and len(set(positions.values())) == 1


def test_balanced_orders_are_seeded_and_walk_the_rows() -> None:
    arms = ["a0", "aa", "a1"]
    one = [blocks.balanced_order(arms, i, "0|r1|b") for i in range(6)]
    assert one == [blocks.balanced_order(arms, i, "0|r1|b") for i in range(6)]  # stable
    assert len({tuple(o) for o in one}) == 6  # six rows, each once
    firsts = Counter(o[0] for o in one)
    assert set(firsts.values()) == {2}  # every arm first equally often, A/A included
    other = [blocks.balanced_order(arms, i, "0|r2|b") for i in range(6)]
    assert other != one  # another round, another start and labelling


def test_carryover_compares_a_blocks_first_step_with_the_rest() -> None:
    steps = [(0, 1.1), (0, 1.0), (0, 1.0), (1, 1.0), (1, 1.0), (2, 2.0)]  # block 2: no rest
    assert blocks.block_starts(steps) == [True, False, False, True, False, True]
    got = blocks.carryover(steps)
    assert [round(x, 6) for x in got] == [round(math.log(1.1), 6), 0.0]
