"""Arms interleaved step by step inside one process (``protocol.pairing=steps``), pure and
stdlib only (the trial process imports it).

On a host whose speed changes within a second, two arms timed tens of seconds apart in
different processes are poorly paired. For a sweep over keys the recipe can switch between
steps (:func:`recipes.base.switchable`), one fresh process per round and bucket runs every arm:
each arm warms up to its own steady state, then the arms take turns in blocks of
``block_steps`` measured steps, each block after ``switch_warmup_steps`` excluded steps. A cycle
runs every arm once; the order reverses every cycle (A B C, C B A, ...), so an arm's block is
as often early as late in a cycle and a slow drift favours none.

The analysis (:func:`round_cells`) pairs the blocks of one cycle: per round, each arm's effect
is the median over cycles of log(arm's block median / the baseline's block median in the same
cycle). The rounds (fresh processes, arm order reversed every other round) stay the unit of
replication, so the intervals still carry the between-process variation of the effect.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
from collections.abc import Callable, Container, Mapping, Sequence

SWITCH_TAG = "switch"  # the excluded steps after an arm switch


def block_order(arms: Sequence[str], cycle: int) -> list[str]:
    """The arms' order in ``cycle`` (0-based) reversed every other cycle (the earlier design,
    kept for ``protocol.order=reversed`` and the simulator's comparison)."""
    order = list(arms)
    return order[::-1] if cycle % 2 else order


def williams_rows(n: int) -> list[list[int]]:
    """A Williams design for ``n`` treatments (Williams 1949): rows 0, 1, n-1, 2, n-2, ...
    shifted by i (mod n). For even n, n rows in which every treatment follows every other
    exactly once; for odd n, those rows and their mirror images, 2n rows in which it does so
    twice. Every treatment takes every position equally often."""
    if n <= 1:
        return [[0]] * max(n, 1)
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    return rows if n % 2 == 0 else rows + [r[::-1] for r in rows]


def balanced_order(arms: Sequence[str], index: int, seed: str = "") -> list[str]:
    """Order number ``index`` of a seeded Williams design over ``arms``: the seed (a stable
    string: the campaign's protocol.seed, round, bucket) shuffles which arm plays which
    treatment and where in the rows the design starts; consecutive indices walk the rows, so
    every ``len(williams_rows)`` of them are balanced for position and predecessor. Python's
    string seeding is stable across processes and versions (no PYTHONHASHSEED)."""
    arms = list(arms)
    if len(arms) <= 1:
        return arms
    perm, start, rows = _design(tuple(arms), seed)
    row = rows[(start + index) % len(rows)]
    return [perm[i] for i in row]


@functools.lru_cache(maxsize=64)
def _design(arms: tuple[str, ...], seed: str) -> tuple[list[str], int, list[list[int]]]:
    """The seeded design of :func:`balanced_order` (the same for every index: computed once)."""
    rng = random.Random(f"{seed}|{','.join(arms)}")
    perm = list(arms)
    rng.shuffle(perm)
    rows = williams_rows(len(arms))
    return perm, rng.randrange(len(rows)), rows


def ordered(arms: Sequence[str], index: int, order: str = "balanced", seed: str = "") -> list[str]:
    """Order number ``index`` (a round, or a cycle of a paired process) under
    ``protocol.order``: ``balanced`` (:func:`balanced_order`) or ``reversed``
    (:func:`block_order`)."""
    if str(order) == "balanced":
        return balanced_order(arms, index, seed)
    return block_order(arms, index)


def live_arms(ids: Sequence[str], baseline: str, failed: Container[str]) -> list[str]:
    """The arms still in a paired process's rotation: none once the baseline failed."""
    return [] if baseline in failed else [a for a in ids if a not in failed]


def needs_more(n: int, got_s: float, measured_steps: int, min_s: float, cap: int) -> bool:
    """Whether an arm with ``n`` measured steps of ``got_s`` seconds still needs steps: fewer
    than ``measured_steps``, or under the time floor ``min_s`` and the cap."""
    return n < measured_steps or (got_s < min_s and n < cap)


def block_starts(steps: Sequence[tuple[int, float]]) -> list[bool]:
    """For one arm's measured (cycle, time) steps in order: which is its block's first."""
    return [i == 0 or steps[i - 1][0] != c for i, (c, _) in enumerate(steps)]


def carryover(steps: Sequence[tuple[int, float]]) -> list[float]:
    """One arm's measured (cycle, time) steps in order -> one value per block: log(the first
    measured step after the switch / the median of the block's other measured steps).
    Blocks of fewer than two measured steps give none."""
    by: dict[int, list[float]] = {}
    heads: dict[int, float] = {}
    for (c, t), first in zip(steps, block_starts(steps)):
        if first:
            heads[c] = float(t)
        else:
            by.setdefault(c, []).append(float(t))
    return [math.log(heads[c] / statistics.median(rest)) for c, rest in by.items()
            if c in heads and heads[c] > 0 and min(rest) > 0]


def block_medians(times: Sequence[float], blocks: Sequence[int],
                  summary: Callable[[list[float]], float] = statistics.median) -> dict[int, float]:
    """Cycle -> the median (or ``summary``: orchestrator.core.objective) of one arm's measured
    step times in that cycle's block (``blocks[i]`` is the cycle of ``times[i]``)."""
    by: dict[int, list[float]] = {}
    for t, b in zip(times, blocks):
        by.setdefault(int(b), []).append(float(t))
    return {b: summary(v) for b, v in by.items()}


def round_cells(blocks: Mapping[tuple[int, str], Mapping[int, float]], baseline: str
                ) -> dict[tuple[int, str], float]:
    """(round, arm) -> one time per round for the block fit (orchestrator.core.paired.fit_blocks).

    ``blocks``: (round, arm) -> cycle -> block median. The baseline's cell is the geometric
    mean of its blocks; an arm's is that times exp(median over the cycles both ran of
    log(arm / baseline)), so the fit's arm effect for the round is the block-paired one. A
    round without the baseline gives no cells; an arm with no cycle in common none."""
    out: dict[tuple[int, str], float] = {}
    rounds = sorted({r for r, _ in blocks})
    for r in rounds:
        base = blocks.get((r, baseline))
        if not base:
            continue
        base_cell = math.exp(statistics.fmean(math.log(v) for v in base.values()))
        out[(r, baseline)] = base_cell
        for (rr, arm), cyc in blocks.items():
            if rr != r or arm == baseline:
                continue
            common = sorted(set(cyc) & set(base))
            if not common:
                continue
            d = statistics.median(math.log(cyc[c] / base[c]) for c in common)
            out[(r, arm)] = base_cell * math.exp(d)
    return out


__all__ = ["SWITCH_TAG", "balanced_order", "block_medians", "block_starts", "block_order", "carryover", "ordered",
           "round_cells", "williams_rows"]
