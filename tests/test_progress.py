"""The progress display: a live line on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

from orchestrator.progress import Progress, format_line, remaining_s
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
    with caplog.at_level(logging.INFO, logger="orchestrator.campaign"):
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
    with caplog.at_level(logging.INFO, logger="orchestrator.campaign"):
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
        logging.getLogger("orchestrator.campaign").info("after")
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
    assert "[1/1]" not in console.getvalue() and "after" in console.getvalue()
