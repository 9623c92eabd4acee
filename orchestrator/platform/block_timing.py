"""Time on the device by its events: one span (``DeviceTimer``), or a block of steps
(``BlockTimer``) with no host synchronisation inside it.

A block records one event at each step boundary on the current stream, beside the host's
clock at the same boundary (after the step's launch returned, no sync), and synchronises once
at its end. Event ``i`` to ``i + 1`` is then step ``i``'s time on the device; the host's clock
between the same boundaries is its launch side. Which of the two bounds the step
(:func:`bounding_clock`): where the device was busy for the whole block, its span exceeds the
host's (the host ran ahead and waited at the end), and the events time the steps; where the
host was the bottleneck, the device waited for each launch, its span is about the host's, and
the host's clock times them.

The backend is anything with ``Event(enable_timing=True)`` whose events have ``record()`` and
``elapsed_time(other)`` in milliseconds (``torch.cuda``, ``torch.musa``; only the device seam,
orchestrator.platform.device, hands them out), so a test passes a fake event clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

DEVICE_EVENTS = "device events"
HOST_CLOCK = "host clock"
# a device span at most this much longer than the host's is the device waiting on launches
# (the last kernel's run and the event's latency), not a busy device; the two agree within it
DEVICE_BOUND_MARGIN = 0.01


class DeviceTimer:
    """The device-side time of one span: two ``Event(enable_timing=True)`` of the device's
    backend (``torch.cuda.Event``, ``torch.musa.Event``) recorded on the current stream by
    :meth:`start` and :meth:`stop`; :meth:`elapsed_s` once the device is synchronised
    (``elapsed_time`` is in milliseconds). The span includes any time the device waited for
    the host to launch work inside it."""

    def __init__(self, backend: Any) -> None:
        self._start = backend.Event(enable_timing=True)
        self._end = backend.Event(enable_timing=True)

    def start(self) -> None:
        self._start.record()

    def stop(self) -> None:
        self._end.record()

    def elapsed_s(self) -> float:
        return float(self._start.elapsed_time(self._end)) / 1000.0


@dataclass(frozen=True)
class BlockTimes:
    """One block's figures in seconds: per step on the device (event to event) and on the
    host (clock to clock, launch side), the two spans, and the host's wall time to the end of
    the final synchronisation."""

    device_step_s: list[float]
    host_step_s: list[float]
    device_span_s: float
    host_span_s: float
    wall_s: float

    @property
    def timed_by(self) -> str:
        return bounding_clock(self.device_span_s, self.host_span_s)

    @property
    def step_s(self) -> list[float]:
        """The per-step times of the clock that bounds the block."""
        return self.device_step_s if self.timed_by == DEVICE_EVENTS else self.host_step_s


def bounding_clock(device_span_s: float, host_span_s: float) -> str:
    """``DEVICE_EVENTS`` where the device was busy for the whole block (its span above the
    host's launch span by more than ``DEVICE_BOUND_MARGIN``), else ``HOST_CLOCK``."""
    return DEVICE_EVENTS if device_span_s > host_span_s * (1 + DEVICE_BOUND_MARGIN) else HOST_CLOCK


class BlockTimer:
    """Events at the step boundaries of one block: :meth:`begin` (the device synchronised
    first, so the block's first event is recorded when the host reaches it), :meth:`mark`
    after each step's launch, :meth:`end` (the one synchronisation) for the figures. Events
    are made once and reused by later blocks."""

    def __init__(self, backend: Any, synchronize: Callable[[], None],
                 clock: Callable[[], float]) -> None:
        self._backend, self._sync, self._clock = backend, synchronize, clock
        self._events: list[Any] = []
        self._host: list[float] = []

    def begin(self) -> None:
        self._sync()  # outside the block: whatever ran before it is done
        self._host = []
        self.mark()

    def mark(self) -> None:
        """A step boundary: the event on the stream, then the host's clock."""
        n = len(self._host)
        if n == len(self._events):
            self._events.append(self._backend.Event(enable_timing=True))
        self._events[n].record()
        self._host.append(self._clock())

    def end(self) -> BlockTimes:
        """Synchronise once, then read the block's events (seconds)."""
        if len(self._host) < 2:
            raise RuntimeError("a timed block needs at least one step between begin and end")
        self._sync()
        wall = self._clock() - self._host[0]
        ev, host = self._events[:len(self._host)], self._host
        device = [float(a.elapsed_time(b)) / 1000.0 for a, b in pairwise(ev)]
        return BlockTimes(device, [b - a for a, b in pairwise(host)],
                          float(ev[0].elapsed_time(ev[-1])) / 1000.0, host[-1] - host[0], wall)
