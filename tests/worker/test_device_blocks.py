"""In-process trials time their measured steps on a GPU in blocks, by device events at the
step boundaries with one synchronisation at the block's end (orchestrator.worker.timing,
orchestrator.platform.block_timing); each block takes the clock that bounds its steps, and
the trial record and decisions.md say which. Driven through the device seam
(``devmod.event_backend``, ``devmod.synchronize``) by a fake event clock
(tests/helpers/event_clock.py); on the CPU nothing changes but the record saying the host
clock timed the steps."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.analysis.analyze import Analysis, ArmSummary
from orchestrator.analysis.decisions_md import clock_line
from orchestrator.platform import device as devmod
from orchestrator.platform.block_timing import DEVICE_EVENTS, HOST_CLOCK, DeviceTimer
from orchestrator.spec.sweep import Arm
from orchestrator.worker.timing import Stepper, clock_fields, window_block
from tests.helpers.event_clock import FakeGpu, SlowDevice

GPU = devmod.DeviceInfo("cuda", 0, "fake gpu", 1)
CPU = devmod.DeviceInfo("cpu", None, "cpu", 1)


class _Trainer:
    """Launches one step's work onto the fake device per train_step; tags the steps in
    ``tag_at`` (counted from 0) ``checkpoint``."""

    tokens_per_step = 8
    samples_per_step = 1

    def __init__(self, gpu: FakeGpu | None, tag_at: tuple[int, ...] = ()) -> None:
        self.gpu, self.tag_at, self.n = gpu, tag_at, 0

    def train_step(self, batch: int) -> float:
        if self.gpu is not None:
            self.gpu.launch()
        self.n += 1
        return 1.0

    def visit_shapes(self) -> None:
        pass

    def step_tags(self) -> list[str]:
        return ["checkpoint"] if self.n - 1 in self.tag_at else []


def _stepper(monkeypatch: pytest.MonkeyPatch, gpu: FakeGpu | None,
             tag_at: tuple[int, ...] = ()) -> Stepper:
    if gpu is not None:  # the seam hands out the fake's events and synchronisation
        monkeypatch.setattr(devmod, "event_backend", lambda dev: gpu)
        monkeypatch.setattr(devmod, "device_timer", lambda dev: DeviceTimer(gpu))
        monkeypatch.setattr(devmod, "synchronize", lambda dev: gpu.synchronize())
    spec = SimpleNamespace(clock="wall", speed_reference="off")
    worker = SimpleNamespace(device=GPU if gpu is not None else CPU, host_only=True,
                             world_size=1, group=None)
    st = Stepper(spec, worker, _Trainer(gpu, tag_at), iter(range(10**6)))  # type: ignore[arg-type]
    if gpu is not None:
        st.clock = gpu.clock
    return st


def _warm_then_block(st: Stepper, warm: int, n: int) -> list[tuple[float, list[str], Any]]:
    for _ in range(warm):
        _, _, row = st.step()
        row["phase"] = "warmup"
    out = st.block(n)
    for _, tags, row in out:
        row["phase"] = "excluded" if tags else "measured"
    return out


def test_a_slow_device_with_a_fast_host_is_timed_by_device_events(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(host_s=0.002, device_s=0.010)
    st = _stepper(monkeypatch, gpu)
    for _ in range(2):  # warm-up: synchronised step by step, the host waits for the device
        _, _, row = st.step()
        row["phase"] = "warmup"
        assert row["step_time_s"] == pytest.approx(0.010)
    syncs = gpu.syncs
    out = _warm_then_block(st, 0, 6)
    assert gpu.syncs - syncs == 2  # before the block and at its end: none inside it
    for decide_s, _, row in out:
        assert decide_s == row["step_time_s"] == pytest.approx(0.010)  # the device's time
        assert row["host_step_s"] == pytest.approx(0.002)  # the host ran ahead
        assert row["device_time_s"] == pytest.approx(0.010)
        assert row["timed_by"] == DEVICE_EVENTS and row["device_block"] == 0
    rec = clock_fields(st, st.rows)
    assert rec["timed_by"] == DEVICE_EVENTS
    assert rec["device_host_agreement"] == pytest.approx(5.0)
    assert rec["device_block_steps"] == 6 and rec["device_blocks"] == 1
    assert rec["timed_by_why"].startswith("device-bound: device 10 ms per step, host 2 ms")


def test_a_fast_device_with_a_slow_host_is_timed_by_the_host_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(host_s=0.010, device_s=0.002)
    st = _stepper(monkeypatch, gpu)
    out = _warm_then_block(st, 1, 5)
    for decide_s, _, row in out:
        assert decide_s == row["step_time_s"] == row["host_step_s"] == pytest.approx(0.010)
        assert row["timed_by"] == HOST_CLOCK
    rec = clock_fields(st, st.rows)
    assert rec["timed_by"] == HOST_CLOCK
    assert rec["device_host_agreement"] == pytest.approx(1.0)  # the device waited on launches
    assert rec["timed_by_why"].startswith("host-bound:")


def test_a_tagged_step_inside_a_block_keeps_its_own_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(host_s=0.001, device_s=0.004)
    st = _stepper(monkeypatch, gpu, tag_at=(2,))
    out = _warm_then_block(st, 0, 4)
    assert [tags for _, tags, _ in out] == [[], [], ["checkpoint"], []]
    assert [r["phase"] for _, _, r in out] == ["measured", "measured", "excluded", "measured"]
    assert all(r["step_time_s"] == pytest.approx(0.004) for _, _, r in out)
    assert clock_fields(st, st.rows)["device_block_steps"] == 4  # the tagged one ran in it


def test_blocks_mixed_between_the_clocks_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(host_s=0.002, device_s=0.010)
    st = _stepper(monkeypatch, gpu)
    _warm_then_block(st, 0, 3)
    _warm_then_block(st, 0, 3)
    gpu.host_s, gpu.device_s = 0.010, 0.002  # the third block: the host is the bottleneck
    _warm_then_block(st, 0, 3)
    rec = clock_fields(st, st.rows)
    assert rec["timed_by"] == DEVICE_EVENTS and rec["device_blocks"] == 3
    assert rec["timed_by_why"].startswith("2 of 3 blocks device-bound")


def test_on_the_cpu_nothing_changes_but_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    st = _stepper(monkeypatch, None)
    assert st.blocks is None
    out = _warm_then_block(st, 1, 3)
    assert len(out) == 3 and all("timed_by" not in r and "host_step_s" not in r
                                 for _, _, r in out)
    assert clock_fields(st, st.rows) == {
        "timed_by": HOST_CLOCK, "timed_by_why": "no device events on cpu",
        "device_host_agreement": None, "device_block_steps": None}


def test_the_measured_window_runs_as_one_block_then_what_the_time_floor_needs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = _stepper(monkeypatch, None)
    assert window_block(cpu, 0, 0.0, steps=10, min_s=0.5, cap=2000) == 1  # step by step
    gpu = _stepper(monkeypatch, FakeGpu(0.001, 0.002))
    assert window_block(gpu, 0, 0.0, steps=10, min_s=0.0, cap=10) == 10
    assert window_block(gpu, 4, 0.04, steps=10, min_s=0.0, cap=10) == 6
    # 10 steps of 10 ms measured, 0.5 s asked: 40 more at that pace, within the cap
    assert window_block(gpu, 10, 0.1, steps=10, min_s=0.5, cap=2000) == 40
    assert window_block(gpu, 10, 0.1, steps=10, min_s=0.5, cap=30) == 20


def _summary(label: str, arm_id: str, **kw: Any) -> tuple[Arm, ArmSummary]:
    arm = Arm(arm_id, label, None, arm_id == "a0")
    return arm, ArmSummary(arm_id, label, "b", 3, 3, {"ok": 3}, [], **kw)


def test_decisions_md_names_the_clock() -> None:
    (a0, s0), (a1, s1) = (_summary("base", "a0", timed_by={HOST_CLOCK: 3},
                                   timed_by_why="no device events on cpu"),
                          _summary("v", "a1", timed_by={HOST_CLOCK: 3},
                                   timed_by_why="no device events on cpu"))
    cpu = Analysis(["b"], [a0, a1], {("b", "a0"): s0, ("b", "a1"): s1})
    assert clock_line(cpu) == "host clock (no device events on cpu)"
    s0.timed_by, s0.device_host_agreement = {DEVICE_EVENTS: 2, HOST_CLOCK: 1}, 1.8
    s1.timed_by, s1.device_host_agreement = {HOST_CLOCK: 3}, 1.0
    line = clock_line(cpu)
    assert "`base`: device events in 2 of 3 trials, host clock in 1 of 3 trials, " \
           "device/host time per step 1.80" in line
    assert "`v`: host clock in 3 of 3 trials, device/host time per step 1.00" in line
    assert clock_line(Analysis(["b"], [a0], {("b", "a0"): _summary("base", "a0")[1]})) == ""


def _synthetic_campaign(compose: Any, run_dir: Path, pairing: str, *more: str) -> None:
    from orchestrator.campaign.run import run_campaign

    run_campaign(compose([
        "workload=synthetic", "+sweep=calibrate", "protocol=default",
        f"protocol.pairing={pairing}", "protocol.measured_steps=4", "protocol.measured_min_s=0",
        "protocol.paired_min_s=0", "protocol.block_steps=2", "workload.units_per_token=0.05",
        "launcher=inline", "sweep.values=[3.0]", "sweep.labels=[big]", "protocol.aa_arm=false",
        "protocol.repeats=1", "protocol.max_rounds=1", "protocol.correctness.mode=off", *more]),
        run_dir)


def _records(run_dir: Path) -> list[tuple[dict[str, Any], Path]]:
    out = [(json.loads(p.read_text()), p.parent) for p in run_dir.glob("trials/*/trial.json")]
    assert out and all(r["status"] == "ok" for r, _ in out)
    return out


@pytest.mark.parametrize(("pairing", "block"), [("steps", 2), ("process", 4)])
def test_a_trial_on_a_slow_device_is_timed_by_its_events(
        compose: Any, run_dir: Path, monkeypatch: pytest.MonkeyPatch, pairing: str,
        block: int) -> None:
    """End to end, paired by steps (a block per arm's measured block) and one arm per process
    (the measured window one block): no sync inside a block, the device's 30 ms per step is
    what steps.csv and the record give, decisions.md says the device events timed them."""
    import pandas as pd

    slow = SlowDevice(device_s=0.03)
    monkeypatch.setattr(devmod, "event_backend", lambda dev: slow)
    monkeypatch.setattr(devmod, "synchronize", lambda dev: slow.synchronize())
    # the host-speed reference (on for the CPU by default) would keep the steps synchronised
    _synthetic_campaign(compose, run_dir, pairing, "protocol.speed_reference=off")
    for rec, tdir in _records(run_dir):
        assert rec["timed_by"] == DEVICE_EVENTS, rec["timed_by_why"]
        assert rec["device_block_steps"] == block and rec["device_host_agreement"] > 2
        steps = pd.read_csv(tdir / "steps.csv")
        measured = steps[steps["phase"] == "measured"]
        assert len(measured) == 4
        assert measured["step_time_s"].median() == pytest.approx(0.03, rel=0.05)
        assert (measured["host_step_s"] < measured["step_time_s"]).all()
        assert (measured["timed_by"] == DEVICE_EVENTS).all()
    md = (run_dir / "decisions.md").read_text()
    assert "- steps timed by: per block of measured steps, device events" in md
    assert "device events in 1 of 1 trials" in md


def test_a_cpu_trial_record_says_the_host_clock_timed_it(
        compose: Any, run_dir: Path) -> None:
    """One arm per process, on the CPU, the default protocol's speed reference on: rows as
    ever, the record and decisions.md say why the host clock timed the steps."""
    import pandas as pd

    _synthetic_campaign(compose, run_dir, "process")
    for rec, tdir in _records(run_dir):
        assert rec["timed_by"] == HOST_CLOCK
        assert rec["timed_by_why"] == "no device events on cpu"
        assert rec["device_host_agreement"] is None
        steps = pd.read_csv(tdir / "steps.csv")
        assert not {"timed_by", "host_step_s", "device_block"} & set(steps.columns)
    assert "- steps timed by: host clock (no device events on cpu)" in (
        run_dir / "decisions.md").read_text()
