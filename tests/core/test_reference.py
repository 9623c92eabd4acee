"""The host-speed reference: when it applies, what normalising does, and real trials with it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from orchestrator.core import reference


def test_resolve_by_device_and_world_size() -> None:
    assert reference.resolve("auto", "cpu")[0] is True
    on, why = reference.resolve("auto", "cuda")
    assert not on and "cuda" in why
    on, why = reference.resolve("host", "musa")
    assert not on and "ignored" in why and "musa" in why
    assert not reference.resolve("off", "cpu")[0]
    on, why = reference.resolve("auto", "cpu", world_size=2)
    assert not on and "distributed" in why
    # a multi-threaded step leaves spinning threads behind: auto stays off, host forces it
    on, why = reference.resolve("auto", "cpu", pool_threads=2)
    assert not on and "2-thread pool" in why and "speed_reference=host" in why
    assert reference.resolve("host", "cpu", pool_threads=2)[0] is True


def test_normalise_divides_each_step_by_its_reference() -> None:
    # trial b ran in a spell twice as slow for its last two steps: the reference saw it too
    steps = {"a": [1.0, 1.0, 1.0], "b": [1.1, 2.2, 2.2], "c": [5.0]}
    refs = {"a": [0.1, 0.1, 0.1], "b": [0.1, 0.2, 0.2], "c": [0.1, 0.1]}  # c: wrong length
    out = reference.normalise(steps, refs)
    # scale = median reference over usable trials (a, b) = 0.1
    assert out["a"] == pytest.approx([1.0, 1.0, 1.0])
    assert out["b"] == pytest.approx([1.1, 1.1, 1.1])
    assert out["c"] == [5.0]  # left raw
    assert reference.normalise(steps, {}) == steps


def test_reference_takes_real_time_on_the_given_clock() -> None:
    ticks = iter(range(100))
    run = reference.host_reference(clock=lambda: float(next(ticks)))
    assert run() == 1.0  # one clock read before, one after the fixed work
    real = reference.host_reference()
    assert 0 < real() < 1.0


def _trial(tmp_path: Path, mode: str) -> tuple[dict, list[dict]]:
    from orchestrator.worker.trial import TrialSpec, run_trial

    workload = {"name": "s", "kind": "synthetic", "recipe": "synthetic", "units_per_token": 0.5,
                "buckets": [{"name": "b", "seq_len": 8, "micro_batch": 2}]}
    spec = TrialSpec("t", str(tmp_path / mode), {"name": "b", "seq_len": 8, "micro_batch": 2},
                     "a0", "base", True, 0, 0, workload, device="cpu", warmup_steps=1,
                     measured_steps=4, speed_reference=mode)
    rec = run_trial(spec)
    rows = list(csv.DictReader(open(Path(spec.trial_dir) / "steps.csv")))
    return rec, rows


def test_trial_records_the_reference_before_every_step(tmp_path: Path) -> None:
    rec, rows = _trial(tmp_path, "auto")
    assert rec["status"] == "ok" and rec["speed_reference"] is True
    assert all(float(r["reference_s"]) > 0 for r in rows)
    assert rec["reference_median_s"] > 0
    rec, rows = _trial(tmp_path, "off")
    assert rec["speed_reference"] is False and "reference_s" not in rows[0]
    assert rec["reference_median_s"] is None


def test_campaign_decides_on_normalised_times_and_says_so(compose, run_dir: Path) -> None:
    from orchestrator.campaign.run import run_campaign

    cfg = compose(["workload=synthetic", "+sweep=calibrate", "protocol=quick", "launcher=inline",
                   "sweep.values=[0.5]", "sweep.labels=[slower]"])
    res = run_campaign(cfg, run_dir)
    assert res.analysis.speed_normalised
    md = (run_dir / "decisions.md").read_text()
    assert "host-speed reference" in md
    cfg = compose(["workload=synthetic", "+sweep=calibrate", "protocol=quick", "launcher=inline",
                   "sweep.values=[0.5]", "sweep.labels=[slower]", "protocol.speed_reference=off"])
    res = run_campaign(cfg, run_dir.parent / "off")
    assert not res.analysis.speed_normalised
    assert "host-speed reference" not in (run_dir.parent / "off" / "decisions.md").read_text()
