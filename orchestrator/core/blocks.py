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

import math
import statistics
from collections.abc import Mapping, Sequence

SWITCH_TAG = "switch"  # the excluded steps after an arm switch


def block_order(arms: Sequence[str], cycle: int) -> list[str]:
    """The arms' block order in ``cycle`` (0-based): as given, reversed every other cycle."""
    order = list(arms)
    return order[::-1] if cycle % 2 else order


def block_medians(times: Sequence[float], blocks: Sequence[int]) -> dict[int, float]:
    """Cycle -> the median of one arm's measured step times in that cycle's block
    (``blocks[i]`` is the cycle of ``times[i]``)."""
    by: dict[int, list[float]] = {}
    for t, b in zip(times, blocks):
        by.setdefault(int(b), []).append(float(t))
    return {b: statistics.median(v) for b, v in by.items()}


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


__all__ = ["SWITCH_TAG", "block_medians", "block_order", "round_cells"]
