"""What a duet (protocol.pairing=duet) needs that the pre-flight can know before any trial.

A duet runs a round's arms at the same time, each on its own slice, and keeps each arm's
measured steps whose midpoint lies where every arm was measuring (orchestrator.worker.pairing.duet).
Two things make every trial of it ``infra_failed`` that nothing refused before: too few
measured steps for the window to hold :data:`MIN_OVERLAP_STEPS` of each arm, and slices whose
devices (protocol.duet_devices) this host does not have. Both are refused in one line (or, with
``pairing=auto``, the duet is not picked and the reason said; orchestrator.spec.sweep).
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.platform import device as devmod

# measured steps each arm must have inside the overlap window: orchestrator.worker.pairing.duet's
# MIN_OVERLAP_STEPS, which this layer may not import (a test keeps the two equal)
MIN_OVERLAP_STEPS = 3
# measured steps a duet's trial asks of each arm at the least. The arms start together but
# not in one instant, and their start-up and warm-up differ, so the window loses steps at both
# ends of each arm: at 3 (protocol=quick) every measured step of every arm would have to fall
# inside it, and no trial ever overlaps; the default protocol's 10 leave the ends room
DUET_MIN_MEASURED_STEPS = 10


def duet_length_obstacle(p: Any) -> str:
    """Why protocol ``p`` gives a duet's arms too few measured steps to overlap, "" when it
    does not."""
    if p.measured_steps >= DUET_MIN_MEASURED_STEPS:
        return ""
    return (f"protocol.measured_steps={p.measured_steps} is too few to overlap: a duet keeps "
            f"each arm's steps only where every arm was measuring, and needs {MIN_OVERLAP_STEPS} "
            f"of each there; set protocol.measured_steps={DUET_MIN_MEASURED_STEPS} or more (the "
            "quick protocol's 3 never overlap), or another protocol.pairing")


def _ids(text: str) -> list[str]:
    return [d.strip() for d in str(text).split(",") if d.strip()]


_WHERE = ("checked on this host because launcher=local/inline runs the trials here; with "
          "launcher=slurm the compute node's devices are not checked")


def duet_devices_obstacle(p: Any, launcher: str, device: str) -> tuple[str, str] | None:
    """(key, why) when protocol.duet_devices names devices this host does not have, else None.

    Only where the trials run on this host (launcher local or inline): with Slurm they run on
    a compute node, whose devices the submitting host cannot see. The ids are the visible-devices
    entries each arm gets (CUDA_VISIBLE_DEVICES / MUSA_VISIBLE_DEVICES, which replace this
    process's own), so a number is checked against this process's own list when one is set,
    else against the devices torch counts; a UUID (GPU-..., MIG-...) is left to the driver."""
    if not p.duet_devices or str(launcher) == "slurm":
        return None
    # start-up cost: the device queries import torch; only when device slices are declared
    seen = [k for k in devmod.available_kinds() if k != "cpu"]
    kind = str(device) if str(device) in ("cuda", "musa") else (seen[0] if seen else "")
    if kind not in seen:
        what = kind or "CUDA or MUSA"
        why = devmod.unavailable_reason(kind or "cuda") or f"no {what} device"
        msg = (f"{list(p.duet_devices)} gives each slice devices, but this host has no {what} "
               f"device this process can use ({why}); drop protocol.duet_devices "
               "(protocol.duet_cpus slices the cores alone), or run where the devices are "
               f"({_WHERE})")
        return "protocol.duet_devices", msg
    var = devmod.visibility_var(kind) or ""
    own = os.environ.get(var, "")
    have = _ids(own) if own else [str(i) for i in range(devmod.resolve(kind).count)]
    for i, text in enumerate(p.duet_devices):
        for d in _ids(text):
            if d.isdigit() and d not in have:
                msg = (f"{kind} device {d} is not on this host, which has {kind} "
                       f"{', '.join(have)}{f' ({var} is set)' if own else ''}; give each slice "
                       f"devices among those ({_WHERE})")
                return f"protocol.duet_devices[{i}]", msg
    return None
