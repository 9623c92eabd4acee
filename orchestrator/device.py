"""The device seam: the only module that asks torch about musa, cuda or cpu.

MUSA is detected from inside the process: ``torch_musa`` is imported when present (which
registers ``torch.musa``) and asked whether it has a device. Shell variables are never taken as
evidence. Tests replace :func:`_torch_musa` / ``torch.musa`` here and nowhere else.
"""

from __future__ import annotations

import importlib
import logging
import os
import resource
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

VISIBILITY_VARS = {"musa": "MUSA_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # cpu | cuda | musa
    index: int | None
    name: str
    count: int  # devices of this kind visible to the process

    @property
    def torch_device(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"


def _torch() -> ModuleType:
    import torch

    return torch


def _torch_musa() -> ModuleType | None:
    """Import torch_musa when it is installed; None when it is absent.

    A broken install (import raises something other than ImportError) is logged and treated as
    absent, with the reason kept for the environment report."""
    global musa_import_error
    try:
        return importlib.import_module("torch_musa")
    except ImportError as exc:
        musa_import_error = f"torch_musa not importable: {exc}"
        return None
    except Exception as exc:  # a vendor build that fails at import must not take the trial down
        musa_import_error = f"torch_musa import failed: {type(exc).__name__}: {exc}"
        log.warning("%s", musa_import_error)
        return None


musa_import_error: str | None = None


def musa_module() -> Any | None:
    """``torch.musa`` when torch_musa is importable and registered it, else None."""
    if _torch_musa() is None:
        return None
    return getattr(_torch(), "musa", None)


def available_kinds() -> list[str]:
    torch = _torch()
    kinds = []
    musa = musa_module()
    try:
        if musa is not None and musa.is_available() and musa.device_count() > 0:
            kinds.append("musa")
    except Exception as exc:  # broken driver: record, do not crash
        log.warning("torch.musa present but unusable: %s", exc)
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        kinds.append("cuda")
    kinds.append("cpu")
    return kinds


def _backend(kind: str) -> Any:
    return musa_module() if kind == "musa" else getattr(_torch(), kind)


def resolve(requested: str = "auto", index: int | None = None) -> DeviceInfo:
    """``auto`` = musa if torch_musa reports a device, else cuda, else cpu."""
    from orchestrator.errors import BackendUnavailable

    kinds = available_kinds()
    kind = kinds[0] if requested == "auto" else requested
    if kind not in kinds:
        raise BackendUnavailable(
            f"device={requested!r} requested but this process sees only {', '.join(kinds)}"
        )
    if kind == "cpu":
        return DeviceInfo("cpu", None, cpu_name(), os.cpu_count() or 1)
    mod = _backend(kind)
    idx = 0 if index is None else index
    return DeviceInfo(kind, idx, str(mod.get_device_name(idx)), int(mod.device_count()))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


def synchronize(dev: DeviceInfo) -> None:
    """Wait for queued device work. torch.utils.benchmark syncs only CUDA; MUSA needs its own."""
    if dev.kind != "cpu":
        _backend(dev.kind).synchronize(dev.index)


def reset_peak_memory(dev: DeviceInfo) -> None:
    if dev.kind != "cpu":
        _backend(dev.kind).reset_peak_memory_stats(dev.index)


def peak_memory_bytes(dev: DeviceInfo) -> tuple[int, str]:
    """(bytes, source): the device allocator's peak on GPUs; the process's peak RSS on CPU."""
    if dev.kind != "cpu":
        return int(_backend(dev.kind).max_memory_allocated(dev.index)), f"{dev.kind} allocator peak"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes
    return (rss if sys.platform == "darwin" else rss * 1024), "process peak RSS"


def is_oom(exc: BaseException) -> bool:
    torch = _torch()
    if isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(exc).lower()
    return "out of memory" in text or isinstance(exc, MemoryError)


def visibility_var(kind: str) -> str | None:
    """The variable that pins a process to devices: MUSA_VISIBLE_DEVICES on MUSA."""
    return VISIBILITY_VARS.get(kind)


DIST_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "musa": "mccl"}


def dist_backend(kind: str) -> str:
    """The torch.distributed backend for a device kind: gloo on CPU, nccl on CUDA, mccl on MUSA
    (torch_musa registers mccl when it is imported)."""
    return DIST_BACKENDS[kind]


def set_current(dev: DeviceInfo) -> None:
    """Make ``dev`` the current device of this process (one rank, one device)."""
    if dev.kind != "cpu" and dev.index is not None:
        _backend(dev.kind).set_device(dev.index)
