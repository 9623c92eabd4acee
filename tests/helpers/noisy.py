"""A synthetic trainer with a noisy neighbour: on its first attempt (no marker file in
$NOISY_MARKER_DIR yet) it starts a real busy-looping process for its measured steps, so the
trial is measured under interference; the re-run finds the marker and runs alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from recipes.synthetic.recipe import SyntheticTrainer


class NoisyNeighbour(SyntheticTrainer):
    """The variant (more work units than the baseline) is the noisy one: from its 3rd step to
    its 90th a busy process shares the machine."""

    def train_step(self, batch: int) -> float:
        self._n = getattr(self, "_n", 0) + 1
        marker = Path(os.environ.get("NOISY_MARKER_DIR", "."), f"units{self.units}.busy")
        if self._n == 3 and self.units != self.base_units and not marker.exists():
            marker.write_text("busy once")
            self._busy = subprocess.Popen(
                [sys.executable, "-c", "import time\nt = time.time() + 30\nwhile time.time() < t: pass"])
        if self._n == 90 and getattr(self, "_busy", None) is not None:
            self._busy.kill()
            self._busy.wait()
            self._busy = None
        return super().train_step(batch)


def build(workload: Any, bucket: Any, device: str) -> NoisyNeighbour:
    return NoisyNeighbour(workload, bucket, device)


build.host_only = True  # type: ignore[attr-defined]
