"""The progress display: a live line on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

from orchestrator.campaign.progress import Progress, format_line, remaining_s
from tests.helpers.launching import make_spec


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_remaining_time_is_mean_trial_time_times_trials_left() -> None:
    assert remaining_s(0, 8, 10.0) is None
    assert remaining_s(2, 8, 10.0) == 30.0
    assert remaining_s(8, 8, 80.0) == 0.0
    line = format_line("fa2", 2, 8, "s32 tiled r0", 75.0)
    assert line == "fa2 [2/8] | s32 tiled r0 | elapsed 1m15s, ~3m45s left"
    assert format_line("fa2", 0, 8, "", 3.0).endswith("elapsed 3s, ~? left")


def test_live_line_on_a_terminal(tmp_path: Path, caplog: Any) -> None:
    clock = _Clock()
    out = io.StringIO()
    p = Progress("fa2", 2, stream=out, live=True, clock=clock)
    spec = make_spec(tmp_path, 1, label="tiled")
    p.on_start(spec)
    clock.t += 10
    with caplog.at_level(logging.INFO, logger="orchestrator.campaign.run"):
        p.on_done(spec, {"status": "ok", "step_time_median_s": 0.0025})
    p.close()
    text = out.getvalue()
    assert "\r\x1b[K" in text and "fa2 [0/2] | s32 tiled r0" in text
    assert "fa2 [1/2] | s32 tiled r0 | elapsed 10s, ~10s left" in text
    assert text.endswith("\n")
    # the per-trial line still reaches the log (campaign.log), marked for the console filter
    (rec,) = [r for r in caplog.records if "[1/2]" in r.getMessage()]
    assert "2.50 ms/step" in rec.getMessage() and rec.progress_line is True


def test_plain_log_lines_off_a_terminal(tmp_path: Path, caplog: Any) -> None:
    out = io.StringIO()  # not a tty
    p = Progress("fa2", 1, stream=out, clock=_Clock())
    assert p.live is False
    with caplog.at_level(logging.INFO, logger="orchestrator.campaign.run"):
        p.on_start(make_spec(tmp_path, 0))
        p.on_done(make_spec(tmp_path, 0), {"status": "oom", "error": "out of memory"})
    p.close()
    assert out.getvalue() == ""
    assert any("[1/1] s32 gpt r0: oom: out of memory" in r.getMessage() for r in caplog.records)


def test_console_handler_is_quiet_while_the_live_line_shows(tmp_path: Path) -> None:
    root = logging.getLogger()
    console = io.StringIO()
    handler = logging.StreamHandler(console)
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.INFO)
    try:
        p = Progress("fa2", 1, stream=io.StringIO(), live=True, clock=_Clock())
        p.on_done(make_spec(tmp_path, 0), {"status": "ok", "step_time_median_s": 0.001})
        p.close()
        logging.getLogger("orchestrator.campaign.run").info("after")
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
    assert "[1/1]" not in console.getvalue() and "after" in console.getvalue()


def test_total_is_the_plan_and_survives_extensions(tmp_path: Path, caplog: Any) -> None:
    """A resume starts at the trials already done; an adaptive extension raises the total and
    keeps counting; the time left is estimated from this invocation's trials only."""
    clock = _Clock()
    p = Progress("fa2", 0, stream=io.StringIO(), clock=clock)
    p.plan(total=8, done=6)  # resumed: 6 of 8 on disk
    assert p.line() == "fa2 [6/8] | elapsed 0s, ~? left"
    clock.t += 10
    with caplog.at_level(logging.INFO, logger="orchestrator.campaign.run"):
        p.on_done(make_spec(tmp_path, 0), {"status": "ok", "step_time_median_s": 0.001})
    assert "[7/8]" in caplog.records[-1].getMessage()
    assert p.line() == "fa2 [7/8] | elapsed 10s, ~10s left"  # 10 s per trial run here, not 10/7
    p.plan(total=12, done=8)  # adaptive rounds: 4 more
    assert p.line().startswith("fa2 [8/12]")
    p.close()


def test_campaign_progress_counts_the_whole_plan(compose: Any, run_dir: Path, caplog: Any,
                                                 monkeypatch: Any) -> None:
    """End to end (inline, synthetic): one count across the adaptive extension (was: a new
    count per extension), and a resume that has one trial left starts at the done ones."""
    import re

    from orchestrator.campaign import run as campaign

    monkeypatch.setattr(campaign, "more_rounds_reason", lambda p, done, cap, g, n=0: (
        "test" if done < cap else ""))
    cfg = compose(["workload=synthetic", "+sweep=calibrate", "protocol=quick",
                   "workload.units_per_token=0.02", "launcher=inline", "sweep.values=[0.5]",
                   "sweep.labels=[half]", "protocol.max_rounds=3",
                   "protocol.adaptive_step_rounds=1",
                   # exact counts: a busy machine's interference re-runs would add trials
                   "protocol.interference_retries=0"])

    def counts() -> list[str]:
        return [m.group(1) for r in caplog.records
                if (m := re.match(r"\[(\d+/\d+)\]", r.getMessage()))]

    with caplog.at_level(logging.INFO, logger="orchestrator.campaign.run"):
        campaign.run_campaign(cfg, run_dir)
    assert counts() == ["1/4", "2/4", "3/4", "4/4", "5/6", "6/6"]
    caplog.clear()
    min(run_dir.glob("trials/*/trial.json")).unlink()  # a trial of round 0
    with caplog.at_level(logging.INFO, logger="orchestrator.campaign.run"):
        campaign.run_campaign(cfg, run_dir)
    # the resume's plan so far is the initial 4 trials, 3 on disk; the extension it then
    # re-derives (round 2) is complete already and adds no line
    assert counts() == ["4/4"]
