"""Device slots for local trials: two trials never share a device.

submitit's local executor starts every job at once and pins each to the first GPUs through
``CUDA_VISIBLE_DEVICES`` only; here a trial waits for free devices and is pinned with its
vendor's visibility variable (``MUSA_VISIBLE_DEVICES`` on MUSA, ``CUDA_VISIBLE_DEVICES`` on
CUDA). On CPU there are no devices to pin and the slots only cap concurrency.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional

from orchestrator.platform import device as devmod


@dataclass(frozen=True)
class Inventory:
    kind: str  # cpu | cuda | musa
    devices: tuple[int, ...]  # indices the launcher may hand out (empty on CPU)

    @property
    def visibility_var(self) -> Optional[str]:
        return devmod.visibility_var(self.kind)


def inventory(requested: str, devices: Optional[list[int]]) -> Inventory:
    """What the local launcher may hand out. Detection goes through the device seam; an
    explicit ``launcher.devices`` list is taken as given."""
    kind = requested
    if requested == "auto" or (requested != "cpu" and devices is None):
        kinds = devmod.available_kinds()
        kind = kinds[0] if requested == "auto" else requested
        if kind not in kinds:  # the trial itself will record `unavailable`
            return Inventory(kind, tuple(devices or ()))
    if kind == "cpu":
        return Inventory("cpu", ())
    if devices is None:
        devices = list(range(devmod.resolve(kind).count))
    return Inventory(kind, tuple(devices))


class DeviceSlots:
    """Hands out disjoint device sets, at most ``max_parallel`` trials at a time."""

    def __init__(self, inv: Inventory, max_parallel: int = 1) -> None:
        self.inv = inv
        self.max_parallel = max(1, max_parallel)
        self._free = list(inv.devices)
        self._running = 0
        self._cond = threading.Condition()

    def fits(self, n_devices: int) -> bool:
        return not self.inv.devices or n_devices <= len(self.inv.devices)

    def acquire(self, n_devices: int) -> list[int]:
        """Block until a slot and ``n_devices`` free devices (none on CPU) are available."""
        need = n_devices if self.inv.devices else 0
        with self._cond:
            while self._running >= self.max_parallel or len(self._free) < need:
                self._cond.wait()
            taken, self._free = self._free[:need], self._free[need:]
            self._running += 1
            return taken

    def release(self, taken: list[int]) -> None:
        with self._cond:
            self._free = sorted(self._free + taken)
            self._running -= 1
            self._cond.notify_all()

    def env(self, taken: list[int]) -> dict[str, str]:
        var = self.inv.visibility_var
        if var is None or not self.inv.devices:
            return {}
        return {var: ",".join(str(d) for d in taken)}
