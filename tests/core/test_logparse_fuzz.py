"""The log parser against hostile lines: linear in a line's length, and no error but its own.

Python's ``re`` backtracks, so a pattern that retries the rest of the line from every
candidate start is quadratic: a 1 MiB line of key characters took over two minutes before the
key=value pattern was fixed. Each case times one line of length L and one of 8L with the
length cap lifted (the best of a few runs against noise) and requires the ratio to be far
from quadratic's 64. A ratio, not a wall-clock limit, so a loaded machine does not fail it.
"""

from __future__ import annotations

import random
import re
import string
import time
from collections.abc import Callable

import pytest

from orchestrator.core import logparse
from orchestrator.core.logparse import (
    LogParseError,
    StepRecord,
    parse_steps,
)

KiB = 1024
GROWTH = 8  # the long line is this many times the short one
MAX_RATIO = 30.0  # linear gives ~8, quadratic ~64
REPEATS = 3
SEED = 51

KEY_CHARS = string.ascii_letters + string.digits + "_/."
TOKENS = ["step", "iter", "iteration", "time", "step_time", "dt", "loss", "tokens", "samples",
          "mfu", "ms", "s", "%", "=", ":", "#", " ", "\t", ",", "|", ";", "1", "23", "4.5", ".5",
          "1e3", "-2", "nan", "inf", "/", ".", "_", "a", "{", "}", '"step":', "\\", "é", "\r",
          # torchtitan's and Megatron-LM's words, and an ANSI colour
          "tps:", "tflops:", "step:", "validate", "iteration 4/9 |", "consumed samples:",
          "elapsed time per iteration (ms):", "lm loss:", "N/A", "12,345", "\x1b[31m",
          "\x1b[38;2;1;2;3m"]


def _repeat(unit: str) -> Callable[[random.Random, int], str]:
    return lambda rng, n: (unit * (n // len(unit) + 1))[:n]


def _chars(alphabet: str) -> Callable[[random.Random, int], str]:
    return lambda rng, n: "".join(rng.choices(alphabet, k=n))


def _tokens(rng: random.Random, n: int) -> str:
    out: list[str] = []
    size = 0
    while size < n:
        out.append(rng.choice(TOKENS))
        size += len(out[-1])
    return "".join(out)[:n]


def _padded(head: str, fill: str, tail: str) -> Callable[[random.Random, int], str]:
    return lambda rng, n: head + fill * max(0, n - len(head) - len(tail)) + tail


# name -> a line of about n characters (the same recipe at both lengths)
CASES: dict[str, Callable[[random.Random, int], str]] = {
    "key characters": _chars(KEY_CHARS),
    "digits": _chars(string.digits),
    "base64": _chars(string.ascii_letters + string.digits + "+/="),
    "step 1 ": _repeat("step 1 "),
    "step 1 time ": _repeat("step 1 time "),
    "step 1 time 3 ": _repeat("step 1 time 3 "),
    "iter 2: ": _repeat("iter 2: "),
    "loss=": _repeat("loss="),
    "time 3": _repeat("time 3"),
    "a=1.": _repeat("a=1."),
    "k=3s/": _repeat("k=3s/"),
    "mfu tokens samples": _repeat("mfu tokens: samples= "),
    '{"step":': _repeat('{"step":'),
    '{"a":[': _repeat('{"a":['),
    "step lines over newlines": _repeat("step 1 step 2 \n"),
    "blanks after step": _padded("step", " ", "x"),
    "blanks around a separator": lambda rng, n: "step 1 time" + " " * (n // 2) + ":" + " " * (n // 2),
    "a number that never ends": _padded("step 1 time ", "7", "x"),
    "a key that never ends": _padded("step=1 ", "k", "=2 time_ms=3"),
    "progress dots in a step line": _padded("step 1 ", ".", " time 3ms loss 2.5"),
    "random tokens": _tokens,
    "torchtitan fields": _repeat("\x1b[31mstep: 1  \x1b[34mtps: 1,000  tflops: 2  mfu: 3% "),
    "an ANSI code that never ends": _padded("step: 1 tps: 5 tflops: 1 \x1b[", "1;", "x"),
    "blanks after a torchtitan step": _padded("step:", " ", "1 tps: 3 tflops: 1"),
    "megatron headers": _repeat(" iteration 1/ 2 | consumed samples: 3 |"),
    "megatron fields": _padded(" iteration 1/ 2 | consumed samples: 3 |", " lm loss: 1.0E+00 |",
                               " elapsed time per iteration (ms): 5.0 |"),
    "blanks in a megatron header": _padded("iteration 1", " ", "/ 2 |"),
}

# cases timed at 128 KiB and 1 MiB (the line, and a spread of the hardest for the old
# parser); the others at 32 KiB and 256 KiB, to keep the whole file near 5 s
LONGEST = ("key characters", "step 1 ", "step 1 time ", "blanks around a separator",
           "a number that never ends", "random tokens")


# torchtitan's tps reads with these (without them its lines raise MissingSetting)
TOKENS_PER_STEP, WORLD_SIZE = 4096, 2


def _parse(line: str) -> list[StepRecord]:
    try:
        return parse_steps([line], max_line_chars=None, tokens_per_step=TOKENS_PER_STEP,
                           world_size=WORLD_SIZE)
    except LogParseError:  # MalformedStepLine included: the parser's own errors
        return []


def _best_s(short: str, long: str) -> tuple[float, float]:
    """The best of REPEATS timings of each, taken in turns so that a change of load between
    them affects both."""
    best = [float("inf"), float("inf")]
    for _ in range(REPEATS):
        for i, line in enumerate((short, long)):
            t0 = time.perf_counter()
            _parse(line)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best[0], best[1]


@pytest.mark.parametrize("name", list(CASES))
def test_each_line_parses_in_time_linear_in_its_length(name: str) -> None:
    short = 128 * KiB if name in LONGEST else 32 * KiB
    rng = random.Random(f"{SEED}/{name}")
    make = CASES[name]
    t_short, t_long = _best_s(make(rng, short), make(rng, GROWTH * short))
    ratio = t_long / max(t_short, 1e-4)  # a floor: a line parsed in no measurable time
    assert ratio < MAX_RATIO, (
        f"{name}: {GROWTH * short // KiB} KiB took {t_long:.3f} s, {short // KiB} KiB "
        f"{t_short:.4f} s: {ratio:.0f}x for {GROWTH}x the length (quadratic would be "
        f"{GROWTH ** 2}x)")


def test_a_1_mib_line_of_key_characters_no_longer_hangs_the_parser() -> None:
    """The issue's case: over 120 s before the fix, about 0.1 s after; 5 s leaves a loaded
    machine plenty of room and still fails the old parser by far."""
    line = _chars(KEY_CHARS)(random.Random(SEED), 1024 * KiB)
    t0 = time.perf_counter()
    with pytest.raises(LogParseError, match="no step lines matched"):
        parse_steps([line], max_line_chars=None)
    assert time.perf_counter() - t0 < 5.0


def test_random_lines_raise_only_the_parsers_own_errors() -> None:
    """Random mixes of the formats' words and of any characters, short and long: each is a
    step record, nothing, or a LogParseError (MalformedStepLine naming line and field)."""
    rng = random.Random(SEED)
    lines = []
    for i in range(3000):
        n = rng.choice((8, 40, 200, 2000)) if i % 100 else 64 * KiB
        lines.append(_tokens(rng, n) if i % 3 else
                     "".join(chr(rng.randrange(1, 0x3000)) for _ in range(min(n, 400))))
    lines += ["step 1 time 3ms tokens " + "9" * 5000,  # int() refuses over 4300 digits
              "step " + "9" * 5000 + " time 3ms",
              '{"step": ' + "9" * 5000 + ', "step_time_ms": 3}',
              '{"a": ' + "[" * 100_000]  # json's recursion limit
    kinds = set()
    for line in lines:
        try:
            got = parse_steps([line], max_line_chars=None, tokens_per_step=TOKENS_PER_STEP,
                              world_size=WORLD_SIZE)
        except LogParseError as exc:
            kinds.add(type(exc).__name__)
            continue
        assert len(got) == 1 and isinstance(got[0], StepRecord)
        kinds.add("record")
    assert kinds == {"record", "LogParseError", "MalformedStepLine"}



# The patterns as they were before the linear rewrite (quadratic on long lines, exact on
# short ones): the oracle for what the rewrite must still find
_NUM, _VAL = logparse._NUM, logparse._VAL
OLD_KV = re.compile(rf"(?P<key>[A-Za-z_][A-Za-z0-9_/.]*)\s*=\s*(?P<val>{_VAL})"
                    r"(?:(?P<unit>ms|s)\b|(?P<pct>%)|\b)")
OLD_FREE = re.compile(
    rf"\b(?:step|iter(?:ation)?)\b\s*[:=#]?\s*(?P<step>\d+)\b"
    rf"(?=.*?\b(?:step[_ ]?time|time|dt)\b\s*[:=]?\s*(?P<time>{_NUM})\s*(?P<unit>ms|s)\b)",
    re.IGNORECASE)
OLD_FREE_NO_UNIT = re.compile(
    rf"\b(?:step|iter(?:ation)?)\b\s*[:=#]?\s*\d+\b"
    rf".*?\b(?P<key>step[_ ]?time|time|dt)\b\s*[:=]?\s*{_NUM}(?=\s*(?:[,|;]|$))",
    re.IGNORECASE)
OLD_OTHERS = {
    "loss": re.compile(rf"\bloss\b\s*[:=]?\s*(?P<loss>{_VAL})(?!\w)", re.IGNORECASE),
    "tokens": re.compile(r"\btokens?\b\s*[:=]?\s*(?P<tokens>\d+)\b", re.IGNORECASE),
    "samples": re.compile(r"\bsamples?\b\s*[:=]?\s*(?P<samples>\d+)\b", re.IGNORECASE),
    "mfu": re.compile(rf"\bmfu\b\s*[:=]?\s*(?P<mfu>{_NUM})\s*(?P<pct>%)?", re.IGNORECASE),
}
NEW_OTHERS = {"loss": logparse._LOSS, "tokens": logparse._TOKENS, "samples": logparse._SAMPLES,
              "mfu": logparse._MFU}
FRAGMENTS = ["step 3", "step=3", "step: 3", "step #3", "iter 3:", "iteration 7", "Step 9", "step 12a",
             "time 4ms", "time=4.5 ms", "dt: 3s", "step_time: 0.12s", "step time 5ms", "time 30",
             "time=30", "loss 2.5", "loss=nan", "loss: -inf", "tokens 100", "samples=8", "mfu 30%",
             "train/mfu=31%", "step_time_ms=5", "time_ms=3", "x=1", "1a=3", "/step=4", "a=1.",
             "a=3s", "b=2ms", "c=5%", "iter=4", "time=13:02:11", "dt=1e-3s", "ms", "s", "{\"step\": 1}"]
JOINS = [" ", "", ",", " | ", "/", ".", "\n", "=", ":", "  ", ";", "\t", "_", "x"]


def _groups(m: re.Match[str] | None) -> dict[str, str | None] | None:
    return None if m is None else m.groupdict()


def test_the_linear_matchers_find_what_the_old_patterns_found() -> None:
    """On short lines made of the formats' pieces (newlines and pairs that end inside a run of
    key characters included), every match is the old one, group for group."""
    rng = random.Random(SEED)
    for _ in range(4000):
        line = "".join(rng.choice(FRAGMENTS) + rng.choice(JOINS) for _ in range(rng.randint(1, 7)))
        assert ([m.groupdict() for m in logparse._kv_matches(line)]
                == [m.groupdict() for m in OLD_KV.finditer(line)]), line
        old, new = OLD_FREE.search(line), logparse._step_then(line, logparse._TIME)
        assert (None if new is None else (new[0]["step"], new[1]["time"], new[1]["unit"])) == (
            None if old is None else (old["step"], old["time"], old["unit"])), line
        bare_old = OLD_FREE_NO_UNIT.search(line)
        bare_new = logparse._step_then(line, logparse._TIME_NO_UNIT)
        assert (bare_new and bare_new[1]["key"]) == (bare_old and bare_old["key"]), line
        for name, rx in OLD_OTHERS.items():
            assert _groups(NEW_OTHERS[name].search(line)) == _groups(rx.search(line)), (name, line)
