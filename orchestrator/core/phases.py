"""Phase names the recipes mark and the analysis reads. The orchestrator owns the names.

A recipe wraps each part of its step in ``with phase(FORWARD): ...``. Outside a profiled window
:func:`phase` returns a shared no-op context: an inactive ``torch.profiler.record_function``
still enters the dispatcher (tens of microseconds per call on a loaded 2-core CPU), which a
timed step must not pay. Inside the window it is a real ``record_function`` range.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

PREFIX = "phase/"
DATA = PREFIX + "data"  # producing the batch and moving it to the device
FORWARD = PREFIX + "forward"  # forward pass and loss
BACKWARD = PREFIX + "backward"  # backward pass, recompute included
CLIP = PREFIX + "clip"  # gradient unscaling and clipping
OPTIMIZER = PREFIX + "optimizer"  # optimizer step and zeroing gradients
COLLECTIVE = PREFIX + "collective"  # explicit collectives outside backward (all-reduce, ...)

ALL: tuple[str, ...] = (DATA, FORWARD, BACKWARD, CLIP, OPTIMIZER, COLLECTIVE)

# Regions: one operation's time, forward and backward together, inside the phases above (a
# region overlaps its phases, so regions are summed apart from the phase breakdown).
REGION_PREFIX = "region/"
ATTENTION = REGION_PREFIX + "attention"  # the attention op: scores, softmax, weighted sum
REGIONS: tuple[str, ...] = (ATTENTION,)
# what the rest of the step is called in a breakdown (loop, sync, profiler bookkeeping)
UNATTRIBUTED = "unattributed"

_NULL = contextlib.nullcontext()
_enabled: Callable[[], bool] | None = None
_record: Any = None


def short(name: str) -> str:
    """``phase/forward`` -> ``forward``."""
    return name.removeprefix(PREFIX)


def _bind() -> None:
    global _enabled, _record
    import torch

    _enabled = torch._C._autograd._profiler_enabled
    _record = torch.profiler.record_function


def recording() -> bool:
    """Whether a torch profiler records in this process (never, while torch is not imported:
    a host-only recipe pays no torch import for its marks)."""
    if _enabled is None:
        if "torch" not in sys.modules:
            return False
        _bind()
    assert _enabled is not None
    return bool(_enabled())


def phase(name: str) -> contextlib.AbstractContextManager[Any]:
    """A profiler range named ``name`` while a profiler records, else a shared no-op."""
    if not recording():
        return _NULL
    return _record(name)  # type: ignore[no-any-return]


def short_region(name: str) -> str:
    """``region/attention`` -> ``attention``."""
    return name.removeprefix(REGION_PREFIX)
