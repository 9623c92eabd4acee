"""A host-speed reference: a fixed piece of host work timed between steps, outside the timed
window, so that a CPU trial's step times can be put in units of this machine's speed of the
moment.

Why: a shared or virtualised host does not run at one speed. On the 2-core machine this tool
is developed on, the same process alternates between two speeds about 1.6x apart (another
tenant on the sibling hyperthread, frequency steps), for spans of 0.3 s to a few seconds. A
trial that happens to run in the slow spell looks 60 % slower, which no number of interleaved
rounds averages out cheaply. Timing a fixed reference right before every step measures the same
slowdown, so each step time divided by the reference time just before it is far steadier
across spells (``bench/speed_reference.py`` measures raw and normalised spread side by side).

It is for host-bound trials only (the CPU device): a GPU's step time does not scale with the
host's speed. And only for single-threaded steps by default: a torch step on a CPU thread pool
leaves its worker threads spinning for a moment after the step, right when the reference runs,
and how much depends on the arm (measured on the tiled-attention GPT: the reference after a
32x32-tile step ran ~1.3x slower than after a 64x64-tile step in the same rounds, which pulled
a 1.39x raw speedup down to 1.05x). So ``protocol.speed_reference=auto`` turns it on for CPU
trials whose step is single-threaded (the synthetic calibration load, a torch trainer with one
thread) and off otherwise; ``host`` forces it on for any CPU trial.

The raw step times are always kept (``step_time_s``); the reference time of each step is
``reference_s`` in steps.csv, and analysis divides each step time by the reference
time just before it (times the campaign's median reference, so figures stay in seconds at the
campaign's typical speed). Medians shown in reports stay raw; speedups, intervals and the
noise floor use the normalised times, and decisions.md says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable

MODES = ("auto", "host", "off")
# the reference work: REPS products of two SIZE x SIZE float32 matrices (~30 MFLOP, a few
# tenths of a millisecond on one core); fixed, never calibrated, so every trial does the same
SIZE = 96
REPS = 16


def resolve(mode: str, device_kind: str, world_size: int = 1, pool_threads: int = 1
            ) -> tuple[bool, str]:
    """(on, why) for a trial on ``device_kind`` whose step runs ``pool_threads`` threads."""
    if mode == "off":
        return False, "protocol.speed_reference=off"
    if world_size > 1:
        return False, "not applied to distributed trials (ranks would each need their own)"
    if device_kind != "cpu":
        if mode == "host":
            return False, (f"protocol.speed_reference=host ignored: the trial runs on {device_kind}, "
                           "whose step time does not follow the host's speed")
        return False, f"auto: off on {device_kind} (host speed does not set a device's step time)"
    if mode == "auto" and pool_threads > 1:
        return False, (f"auto: off for a step that runs a {pool_threads}-thread pool: its threads "
                       "spin on the other cores right after a step, while the reference runs, "
                       "so the reference would depend on the arm (protocol.speed_reference=host "
                       "forces it on)")
    return True, f"{mode}: host-bound trial on the CPU device"


def host_reference(clock: Callable[[], float] = time.perf_counter) -> Callable[[], float]:
    """A callable that runs the fixed reference work and returns its time in seconds on
    ``clock`` (the trial's clock)."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((SIZE, SIZE)).astype(np.float32)
    b = rng.standard_normal((SIZE, SIZE)).astype(np.float32)
    out = np.empty_like(a)

    def run() -> float:
        t0 = clock()
        for _ in range(REPS):
            np.matmul(a, b, out=out)
        return clock() - t0

    for _ in range(3):  # page in the buffers and load BLAS before the first timed use
        run()
    return run


def normalise(trial_steps: dict[str, list[float]], trial_refs: dict[str, list[float]]
              ) -> dict[str, list[float]]:
    """Each step time divided by the reference time taken just before it, times the median
    reference time over all trials (so figures stay in seconds at the campaign's typical
    speed). A trial without a reference for every step is left as it is."""
    import statistics

    usable = {t: r for t, r in trial_refs.items()
              if t in trial_steps and len(r) == len(trial_steps[t]) and r and min(r) > 0}
    if not usable:
        return dict(trial_steps)
    scale = statistics.median(x for r in usable.values() for x in r)
    return {t: ([x * scale / y for x, y in zip(xs, usable[t])] if t in usable else xs)
            for t, xs in trial_steps.items()}
