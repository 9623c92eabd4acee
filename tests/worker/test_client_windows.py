"""orchestrator.client's timed windows (issue 48, part 2): no device sync inside a block, one
at each block boundary; on a GPU the windows timed by reused device events; several windows
in one step (gradient accumulation) are that one step, a nested window counted once; and
across ranks the step time is the slowest rank's, rank 0's and the skew recorded beside it.

The window tests run the client in this process against a real trial channel and plan, on a
clock of their own (the client's ``time`` replaced, a fake ``torch`` in ``sys.modules``), so
every expected time is exact; the rank test runs two real gloo ranks through a real trial."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import client
from orchestrator.spec.jobs import PairedArm, TrialSpec
from orchestrator.worker.pairing.steps import StepsPart, part as steps_part
from orchestrator.worker.pairing.client import Channel, Plan
from tests.worker.test_client import _paired, _records, _run
from tests.helpers.rundirs import steps_cells


class Clock:
    """The client's clock (``time.perf_counter``) and a device's (its events' timestamps)."""

    def __init__(self) -> None:
        self.host = 100.0
        self.dev = 500.0
        self.step = 0  # steps the loop under test has finished

    def perf_counter(self) -> float:
        return self.host

    def tick(self, host_s: float, dev_s: float = 0.0) -> None:
        self.host += host_s
        self.dev += dev_s


class FakeDevice:
    """``torch.cuda`` as the client sees it: started, counting its syncs (and the steps run by
    then) and its events (each one's timestamp readable only after a sync)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.syncs: list[int] = []  # at each sync: the steps finished by then
        self.made = 0
        device = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                device.made += 1
                self.at, self.gen = 0.0, -1

            def record(self) -> None:
                self.at, self.gen = device.clock.dev, len(device.syncs)

            def elapsed_time(self, end: Event) -> float:  # milliseconds, as torch's
                assert len(device.syncs) > max(self.gen, end.gen), "read before a sync"
                return (end.at - self.at) * 1e3

        self.Event = Event

    def is_initialized(self) -> bool:
        return True

    def synchronize(self) -> None:
        self.syncs.append(self.clock.step)


@pytest.fixture
def channel(tmp_path: Path, monkeypatch: Any) -> Iterator[tuple[Plan, Clock]]:
    """A real trial channel and plan (two arms, one rank; fixed warm-up of 2, 6 measured
    steps per arm in blocks of 3 after 1 switch step), this process its rank."""
    arms = [PairedArm(f"a{i}", f"a{i}", i == 0, f"t{i}", str(tmp_path / f"t{i}"),
                      {"params": {"units": 1 + i}}) for i in range(2)]
    spec = TrialSpec(trial_id="t0", trial_dir=arms[0].trial_dir, bucket={"name": "b",
                     "seq_len": 1, "micro_batch": 1}, arm_id="a0", arm_label="a0",
                     is_baseline=True, round=0, position=0, workload={}, warmup_steps=2,
                     measured_steps=6, paired=steps_part(arms, StepsPart(3, 1, "balanced", "t")))
    plan = Plan(spec, {a.arm_id: {"units": 1 + i} for i, a in enumerate(arms)}, "a0", ["units"])
    chan = Channel(plan, 1)
    clock = Clock()
    for name in ("RANK", "WORLD_SIZE", client.ENV, client.TOKEN_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(client, "time", clock)  # the client's clock only
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace())  # no device started
    try:
        monkeypatch.setattr(client, "_session", client._Session(chan.address, chan.token))
        monkeypatch.setattr(client, "_looked", True)
        yield plan, clock
    finally:
        chan.close()


def test_repeated_windows_of_a_step_are_one_step_and_a_nested_one_counts_once(
        channel: tuple[Plan, Clock]) -> None:
    """Four micro-batches a step, each its own window (one through begin/end), with a window
    inside each: the step's time is the four windows' sum, the inner ones and the time
    between the windows left out."""
    plan, clock = channel

    def micro_batch() -> None:
        clock.tick(0.001)
        with client.timed():  # nested: already inside the window
            clock.tick(0.002)
        clock.tick(0.002)

    for _ in client.steps(5):
        client.params({"units": 1})
        for micro in range(4):
            if micro < 3:
                with client.timed():
                    micro_batch()
            else:
                client.begin()
                micro_batch()
                client.end()
            clock.tick(0.1)  # between micro-batches (data loading): not timed
        client.report(loss=1.0)
        clock.tick(1.0)
    rows = plan.rows()
    assert plan.done and len(rows) >= 2 * (2 + 6)
    assert plan.clocks == {"host clock"}  # what the record's timed_by says (no device)
    assert [r["step_time_s"] for r in rows] == pytest.approx([0.020] * len(rows))


def test_the_device_syncs_at_block_boundaries_only_and_events_time_the_windows(
        channel: tuple[Plan, Clock], monkeypatch: Any) -> None:
    """A started device: synchronised once before the first block and once at each block's end
    (never in a step); two windows a step, each timed by the device's events (3 ms each on
    the device, 1 ms on the host's clock), the events made once and reused."""
    plan, clock = channel
    dev = FakeDevice(clock)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=dev))
    for _ in client.steps(5):
        client.params({"units": 1})
        for _micro in range(2):
            with client.timed():
                clock.tick(0.001, 0.003)
            clock.tick(0.05, 0.05)  # outside the windows: on neither clock
        client.report(loss=1.0)
        clock.step += 1
    rows = plan.rows()
    assert plan.done and [r["step_time_s"] for r in rows] == pytest.approx([0.006] * len(rows))
    from orchestrator.worker.pairing.client import client_clock_fields

    assert plan.clocks == {"device events"}
    assert client_clock_fields(plan.clocks)["timed_by"] == "device events"
    ends, n = [0], 0
    for blk in plan.blocks:
        n += blk["steps"]
        ends.append(n)
    assert dev.syncs == ends  # before the first block, then at each block's end
    assert dev.made == 2 * 2 * max(b["steps"] for b in plan.blocks)  # not one per step


def test_a_window_left_open_at_the_step_end_is_refused(channel: tuple[Plan, Clock]) -> None:
    with pytest.raises(client.ClientError, match="window open: close it"):
        for _ in client.steps(5):
            client.params({"units": 1})
            client.begin()


@pytest.mark.slow
def test_the_slowest_gloo_rank_sets_the_step_time(tmp_path: Path) -> None:
    """Two gloo ranks training a tiny model, meeting at a barrier before each step's window;
    rank 1 sleeps 30 ms more inside its window: each step's time is rank 1's, rank 0's beside
    it, the skew about the sleep, in steps.csv and in the record."""
    command = ("{python} tests/helpers/client_trainer.py --steps {steps} --ranks {world_size} "
               "--mode ddp --slow-rank 1 --slow-ms 30")
    spec, arms = _paired(tmp_path, command, units=(2, 3), world=2)
    _run(spec)
    for a in arms:
        r = _records(arms)[a.arm_id]
        assert r["status"] == "ok", r.get("error")
        cells = steps_cells(a.trial_dir)
        measured = [c for c in cells if c["phase"] == "measured"]
        assert len(measured) == r["measured_steps_run"] >= 6
        for c in cells:
            t0, t1 = float(c["step_time_rank0_s"]), float(c["step_time_rank1_s"])
            assert float(c["step_time_s"]) == max(t0, t1)
            assert float(c["rank_skew_s"]) == pytest.approx(abs(t1 - t0))
        for c in measured:  # rank 1's window: rank 0's and the sleep
            assert c["slowest_rank"] == "1"
            assert float(c["rank_skew_s"]) >= 0.025
        medians = r["step_time_rank_medians_s"]
        assert medians["1"] == r["step_time_median_s"]
        assert medians["0"] <= r["step_time_median_s"] - 0.025
        assert 0.025 <= r["rank_skew_median_s"] <= r["rank_skew_max_s"]
        assert r["rank_skew_median_s"] < 0.1  # the sleep, not a rank waiting on the other
        assert r["slowest_rank_counts"] == {"0": 0, "1": len(measured)}
        assert r["world_size"] == 2 and "slowest rank" in r["step_time_definition"]
