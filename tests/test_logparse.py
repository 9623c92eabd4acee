from __future__ import annotations

import pytest

from orchestrator.logparse import LogParseError, parse_steps


def test_builtin_formats() -> None:
    log = [
        "starting run, 4 gpus",
        "iter 10: loss 4.2000, time 123.45ms, mfu 30.1%",
        "step 11 | loss 4.1 | lr 3e-4 | time 0.125s | tokens 8192",
        '{"step": 12, "step_time_ms": 120.0, "loss": 4.0, "tokens": 8192}',
        "step=13 loss=3.9 step_time_s=0.119 samples=16",
        "garbage line with time 5ms but no step",
    ]
    recs = parse_steps(log)
    assert [r.step for r in recs] == [10, 11, 12, 13]
    assert [round(r.step_time_s, 5) for r in recs] == [0.12345, 0.125, 0.12, 0.119]
    assert [r.loss for r in recs] == [4.2, 4.1, 4.0, 3.9]
    assert recs[1].tokens == 8192 and recs[2].tokens == 8192 and recs[3].samples == 16


def test_time_without_unit_is_not_guessed() -> None:
    with pytest.raises(LogParseError, match="no step lines matched"):
        parse_steps(["step=1 time=12.5", "step 2 time 13"])


def test_custom_pattern() -> None:
    recs = parse_steps(["[it 5] took 250 ms, l=2.5"],
                       pattern=r"\[it (?P<step>\d+)\] took (?P<time>[\d.]+) (?P<unit>ms), l=(?P<loss>[\d.]+)")
    assert recs[0].step == 5 and recs[0].step_time_s == 0.25 and recs[0].loss == 2.5


@pytest.mark.parametrize(("pattern", "match"), [
    (r"(?P<step>\d+", "invalid regex"),
    (r"(?P<x>\d+)", "needs a named group"),
    (r"(?P<step>\d+)", "needs a time group"),
    (r"(?P<step>\d+) (?P<time>\d+)", "needs a .*unit"),
])
def test_bad_patterns(pattern: str, match: str) -> None:
    with pytest.raises(LogParseError, match=match):
        parse_steps(["1 2"], pattern=pattern)
