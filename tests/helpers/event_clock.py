"""A fake event clock for the device seam's timing events (orchestrator.platform.block_timing):
a device with its own queue beside a host that launches work onto it.

The model: a step's device work is queued when the host begins launching it and runs once the
device is free; the host takes ``host_s`` to launch one step; an event completes when the
device reaches it, at max(the host's time when it was recorded, the device's free time);
``synchronize`` makes the host wait for the device. Times are exact numbers, not sleeps."""

from __future__ import annotations

import time


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.at: float | None = None

    def record(self) -> None:
        self.at = max(self.gpu.now, self.gpu.free)

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.at is not None and other.at is not None, "an event never recorded"
        assert self.gpu.now >= other.at, "read before the device reached the event"
        return (other.at - self.at) * 1000.0  # milliseconds, as torch.cuda.Event's


class FakeGpu:
    """The event backend (``Event``), its ``synchronize`` and the host's clock, in seconds."""

    def __init__(self, host_s: float, device_s: float) -> None:
        self.host_s, self.device_s = host_s, device_s
        self.now = self.free = 100.0
        self.syncs = 0

    def Event(self, enable_timing: bool = False) -> FakeEvent:  # torch.cuda's name
        assert enable_timing
        return FakeEvent(self)

    def clock(self) -> float:
        return self.now

    def launch(self) -> None:
        """One step: its device work queued, the host busy launching it."""
        self.free = max(self.free, self.now) + self.device_s
        self.now += self.host_s

    def synchronize(self) -> None:
        self.syncs += 1
        self.now = max(self.now, self.free)


class SlowDevice:
    """The same model on the real clock, for a whole trial on the CPU through the device seam
    (``devmod.event_backend`` and ``devmod.synchronize`` pointed here): a device that takes
    ``device_s`` per step, whatever the host does. It sees steps only as the events between
    them: each event after the first of a block closes a step whose work was queued at the
    event before it; ``synchronize`` sleeps until the device is done."""

    def __init__(self, device_s: float) -> None:
        self.device_s = device_s
        self.free = 0.0
        self.last: float | None = None  # the host's time at the block's latest event
        self.events = 0

    def Event(self, enable_timing: bool = False) -> SlowEvent:  # torch.cuda's name
        assert enable_timing
        return SlowEvent(self)

    def reach(self) -> float:
        """When the device reaches an event recorded now."""
        now = time.perf_counter()
        self.events += 1
        if self.last is not None:  # a step since the last event: its work, once free
            self.free = max(self.free, self.last) + self.device_s
        self.last = now
        return max(now, self.free)

    def synchronize(self) -> None:
        wait = self.free - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        self.last = None  # the next event starts a block on an idle device


class SlowEvent:
    def __init__(self, device: SlowDevice) -> None:
        self.device = device
        self.at: float | None = None

    def record(self) -> None:
        self.at = self.device.reach()

    def elapsed_time(self, other: SlowEvent) -> float:
        assert self.at is not None and other.at is not None, "an event never recorded"
        return (other.at - self.at) * 1000.0
