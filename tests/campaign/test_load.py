"""What counts as load a campaign's timings met (campaign.load.detected_load): the trials' own
measurements first; for trials that measure none (a command's), a busy sample before the
campaign only while the machine is still busy at the decision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.campaign import load
from orchestrator.platform.interference import MachineLoad

BUSY = {"cores": 2, "load_average": 2.0, "others_cores": 1.9, "gpu_processes": [],
        "sample_s": 0.5, "problems": ["other processes took 1.90 of 2 cores over 0.5 s"]}


def _cfg(compose: Any) -> Any:
    return compose(["workload=command_busy", "+sweep=planted_command", "protocol=quick"])


def _now(monkeypatch: pytest.MonkeyPatch, cores: float) -> None:
    monkeypatch.setattr(load, "machine_load",
                        lambda s=1.0: MachineLoad(2, cores, cores, [], s))


@pytest.mark.parametrize(("now", "detected"), [(0.0, False), (1.7, True)])
def test_a_busy_start_counts_for_a_command_only_while_it_lasts(
        compose: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, now: float,
        detected: bool) -> None:
    (tmp_path / "machine_load.json").write_text(json.dumps(BUSY))
    _now(monkeypatch, now)
    # a command's trial: no interference of its own
    said = load.detected_load(_cfg(compose), tmp_path, [{"status": "ok", "kind": "timed"}])
    if detected:
        assert said == ("before the campaign: other processes took 1.90 of 2 cores over 0.5 s; "
                        "still 1.70 cores at the decision")
    else:
        assert said == ""


def test_trials_that_measured_their_load_speak_for_themselves(
        compose: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "machine_load.json").write_text(json.dumps(BUSY))
    _now(monkeypatch, 1.7)
    quiet = {"status": "ok", "kind": "timed", "interference": {"others_cores": 0.05}}
    assert load.detected_load(_cfg(compose), tmp_path, [quiet]) == ""
    loaded = {"status": "ok", "kind": "timed", "interference": {"others_cores": 0.9}}
    assert load.detected_load(_cfg(compose), tmp_path, [quiet, loaded]) == (
        "1 trial(s) measured while other processes took more than 0.25 cores (up to 0.90)")
