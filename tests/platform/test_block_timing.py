"""Blocks of steps timed by device events (orchestrator.platform.block_timing), against a fake
event clock (tests/helpers/event_clock.py): a device with its own queue beside a host that
launches work onto it."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.platform.block_timing import (
    DEVICE_BOUND_MARGIN,
    DEVICE_EVENTS,
    HOST_CLOCK,
    BlockTimer,
    DeviceTimer,
    bounding_clock,
)
from tests.helpers.event_clock import FakeEvent, FakeGpu


def _block(gpu: FakeGpu, steps: int) -> Any:
    bt = BlockTimer(gpu, gpu.synchronize, gpu.clock)
    bt.begin()
    for _ in range(steps):
        gpu.launch()
        bt.mark()
    return bt.end()


def test_slow_device_fast_host_is_timed_by_the_device_events() -> None:
    gpu = FakeGpu(host_s=0.002, device_s=0.010)
    syncs = gpu.syncs
    times = _block(gpu, 5)
    assert gpu.syncs - syncs == 2  # one before the block (outside it), one at its end
    assert times.device_step_s == pytest.approx([0.010] * 5)
    assert times.host_step_s == pytest.approx([0.002] * 5)  # the host ran ahead
    assert times.device_span_s == pytest.approx(0.050)
    assert times.host_span_s == pytest.approx(0.010)
    assert times.wall_s == pytest.approx(0.050)  # the host waited at the end
    assert times.timed_by == DEVICE_EVENTS
    assert times.step_s == times.device_step_s


def test_fast_device_slow_host_is_timed_by_the_host_clock() -> None:
    gpu = FakeGpu(host_s=0.010, device_s=0.002)
    times = _block(gpu, 4)
    assert times.host_step_s == pytest.approx([0.010] * 4)
    # the device waited for every launch: its events see the host's pace
    assert times.device_step_s == pytest.approx([0.010] * 4)
    assert times.device_span_s == pytest.approx(times.host_span_s)
    assert times.timed_by == HOST_CLOCK
    assert times.step_s == times.host_step_s


def test_events_are_made_once_and_reused_by_later_blocks() -> None:
    gpu = FakeGpu(host_s=0.001, device_s=0.003)
    made = []
    real_event = gpu.Event

    def counting(enable_timing: bool = False) -> FakeEvent:
        made.append(1)
        return real_event(enable_timing=enable_timing)

    gpu.Event = counting  # type: ignore[method-assign]
    bt = BlockTimer(gpu, gpu.synchronize, gpu.clock)
    for steps in (3, 2, 3):
        bt.begin()
        for _ in range(steps):
            gpu.launch()
            bt.mark()
        assert bt.end().device_step_s == pytest.approx([0.003] * steps)
    assert len(made) == 4  # the largest block's boundaries


def test_an_empty_block_is_refused() -> None:
    gpu = FakeGpu(0.001, 0.001)
    bt = BlockTimer(gpu, gpu.synchronize, gpu.clock)
    bt.begin()
    with pytest.raises(RuntimeError, match="at least one step"):
        bt.end()


def test_the_device_bound_margin() -> None:
    # a device span a little over the host's (the last kernel's run) is the host's bottleneck
    assert bounding_clock(1.0 + DEVICE_BOUND_MARGIN / 2, 1.0) == HOST_CLOCK
    assert bounding_clock(1.0, 1.0) == HOST_CLOCK
    assert bounding_clock(0.9, 1.0) == HOST_CLOCK
    assert bounding_clock(1.0 + 2 * DEVICE_BOUND_MARGIN, 1.0) == DEVICE_EVENTS


def test_device_timer_reads_seconds() -> None:
    gpu = FakeGpu(host_s=0.001, device_s=0.004)
    timer = DeviceTimer(gpu)
    timer.start()
    gpu.launch()
    timer.stop()
    gpu.synchronize()
    assert timer.elapsed_s() == pytest.approx(0.004)


def test_step_agreement_takes_a_blocks_steps_in_one_all_reduce(tmp_path: Any) -> None:
    """One rank (gloo, world size 1): a block's times and tags come back as they went, every
    step's tags its own, in one agreement."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    from orchestrator.platform import distributed as distmod

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        agree = distmod.StepAgreement("cpu")
        got = agree.many([0.5, 0.25, 0.125], [[], ["checkpoint"], ["mine", "compile"]])
        assert got == [(0.5, []), (0.25, ["checkpoint"]), (0.125, ["mine", "compile"])]
        assert agree(0.75, ["compile"]) == (0.75, ["compile"])
        assert len(agree.cost_s) == 2
    finally:
        dist.destroy_process_group()
