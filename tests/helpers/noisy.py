"""A synthetic trainer with a noisy neighbour: on its first attempt (no marker file in
$NOISY_MARKER_DIR yet) it starts a real busy-looping process for its measured steps, so the
trial is measured under interference; the re-run finds the marker and runs alone. The busy
process is detached (a shell starts it in the background and exits), so it is another process
of the machine, not one of the trial's own workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from recipes.synthetic.recipe import SyntheticTrainer


def start_busy(seconds: float) -> int:
    """Start a detached busy-looping process (not a descendant of this one) and return its pid."""
    loop = f"import time\nt = time.time() + {seconds}\nwhile time.time() < t: pass"
    shell = subprocess.run(["sh", "-c", '"$0" -c "$1" </dev/null >/dev/null 2>&1 & echo $!',
                            sys.executable, loop], capture_output=True, text=True, check=True)
    return int(shell.stdout.split()[-1])


def stop_busy(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


BUSY_S = 0.5  # how long the neighbour is busy: most of the test's 0.6 s measured window (its
# measured_steps are few, so measured_min_s sets the window on any machine)


class NoisyNeighbour(SyntheticTrainer):
    """The variant (more work units than the baseline) is the noisy one: from its 3rd step, for
    BUSY_S seconds, a busy process shares the machine (by time, not steps: a step's length
    depends on the machine)."""

    def train_step(self, batch: int) -> float:
        self._n = getattr(self, "_n", 0) + 1
        marker = Path(os.environ.get("NOISY_MARKER_DIR", "."), f"units{self.units}.busy")
        if self._n == 3 and self.units != self.base_units and not marker.exists():
            marker.write_text("busy once")
            self._busy = start_busy(30)
            self._busy_until = time.monotonic() + BUSY_S
        if getattr(self, "_busy", None) is not None and time.monotonic() >= self._busy_until:
            stop_busy(self._busy)
            self._busy = None
        return super().train_step(batch)


def build(workload: Any, bucket: Any, device: str) -> NoisyNeighbour:
    return NoisyNeighbour(workload, bucket, device)


build.host_only = True  # type: ignore[attr-defined]
