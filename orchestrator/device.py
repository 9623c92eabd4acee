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

from orchestrator.errors import BackendUnavailable

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


def unavailable_reason(requested: str) -> str | None:
    """Why this process cannot use the explicitly requested device (``musa``, ``cuda``,
    ``musa:1`` ...), in one phrase naming what is missing; None when it can, and always None
    for ``auto`` and ``cpu``. Asks torch / torch_musa themselves, never shell variables (those
    are only quoted as a hint)."""
    kind, _, index = requested.partition(":")
    if kind in ("auto", "cpu", ""):
        return None
    if kind not in VISIBILITY_VARS:
        return f"unknown device kind {kind!r}"
    var = VISIBILITY_VARS[kind]
    hint = f"; {var}={os.environ[var]!r} is set" if var in os.environ else ""
    torch = _torch()
    if kind == "musa":
        if _torch_musa() is None:
            return f"{musa_import_error or 'torch_musa is not importable'} (install the vendor's torch_musa)"
        mod = getattr(torch, "musa", None)
        if mod is None:
            return "torch_musa imported but did not register torch.musa (a broken install)"
        driver = "the MUSA driver (mthreads-gmi)"
    else:
        if not (getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None)):
            return (f"this torch ({torch.__version__}) is a CPU-only build without CUDA support; "
                    "install a CUDA build of torch")
        mod = torch.cuda
        driver = "the NVIDIA driver (nvidia-smi)"
    import warnings

    with warnings.catch_warnings(record=True) as caught:  # torch warns instead of raising
        warnings.simplefilter("always")
        try:
            count = int(mod.device_count()) if mod.is_available() else 0
        except Exception as exc:  # noqa: BLE001 - a vendor stack can raise anything here
            return f"torch.{kind} cannot query its devices ({_err(exc)}); check {driver}{hint}"
    if count == 0:
        why = f" ({str(caught[0].message).strip().splitlines()[0]})" if caught else ""
        return f"no {kind.upper()} device is visible to this process{why}; check {driver}{hint}"
    if index and (not index.isdigit() or int(index) >= count):
        return f"no {kind} device {index!r}: this process sees {count} ({kind}:0..{count - 1}){hint}"
    return None


def host_cpu(requested: str = "auto") -> DeviceInfo:
    """The host CPU, without asking torch (for recipes that do not use torch)."""
    if requested not in ("auto", "cpu"):
        raise BackendUnavailable(f"device={requested!r} requested but this recipe runs on the "
                                 "host CPU only; use device=cpu")
    return DeviceInfo("cpu", None, cpu_name(), os.cpu_count() or 1)


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


def peak_reserved_bytes(dev: DeviceInfo) -> int | None:
    """The caching allocator's peak of reserved (held from the driver) bytes since the last
    :func:`reset_peak_memory`; None on the CPU, which has no such allocator."""
    read = None if dev.kind == "cpu" else getattr(_backend(dev.kind), "max_memory_reserved", None)
    return None if read is None else int(read(dev.index))


def is_oom(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")  # a process that never imported torch raised no torch OOM
    if torch is not None and isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(exc).lower()
    return "out of memory" in text or isinstance(exc, MemoryError)


def preload_for_fork() -> None:
    """Import what a worker's device set-up imports (torch; torch_musa where installed)
    without asking for a device: the launchers' fork server calls this once, so its children
    start with them loaded and no device runtime initialised."""
    _torch()
    _torch_musa()


def fork_safety() -> str | None:
    """Why a fork of this process would hand its child a device runtime the child cannot use
    (None: no device runtime is set up here). Asks only what torch already knows and
    initialises nothing: ``torch.musa`` exists only once torch_musa was imported. Called in the
    launchers' fork server before it forks, and in a probe child it forks (where torch's
    bad-fork flag shows a runtime the server touched, e.g. by counting devices)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for kind in ("cuda", "musa"):
        mod = getattr(torch, kind, None)
        if mod is None:
            continue
        is_init = getattr(mod, "is_initialized", None)
        if callable(is_init) and is_init():
            return f"{kind} is initialised in the fork server"
        bad = getattr(mod, "_is_in_bad_fork", None)
        if callable(bad) and bad():
            return f"{kind} was touched in the fork server (torch marks its forks unusable)"
    return None


def visibility_var(kind: str) -> str | None:
    """The variable that pins a process to devices: MUSA_VISIBLE_DEVICES on MUSA."""
    return VISIBILITY_VARS.get(kind)


# --------------------------------------------------------------------------- environment facts
# Read by orchestrator.environment. Every function here returns plain data and records why a
# query failed instead of raising: a broken driver or library must not take a report down.


def _err(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _call(fn: Any, *args: Any) -> tuple[Any, str | None]:
    try:
        return fn(*args), None
    except Exception as exc:  # a vendor stack can raise anything here
        return None, _err(exc)


def torch_build() -> dict[str, Any]:
    """torch's version and the accelerator stacks it was compiled against."""
    torch = _torch()
    _torch_musa()  # importing torch_musa is what sets torch.version.musa
    v = torch.version
    return {
        "version": torch.__version__,
        "git_version": getattr(v, "git_version", None),
        "debug": getattr(v, "debug", None),
        "cuda": getattr(v, "cuda", None),
        "hip": getattr(v, "hip", None),
        # set by torch_musa (the compiled MUSA version); None or absent otherwise
        "musa": getattr(v, "musa", None),
    }


def _properties(mod: Any, index: int) -> dict[str, Any]:
    p = mod.get_device_properties(index)
    major, minor = getattr(p, "major", None), getattr(p, "minor", None)
    total = getattr(p, "total_memory", None)
    return {
        "index": index,
        "name": str(getattr(p, "name", "?")),
        "arch": f"{major}.{minor}" if major is not None else None,
        "total_memory_bytes": int(total) if total is not None else None,
        "multi_processor_count": getattr(p, "multi_processor_count", None),
        "is_integrated": getattr(p, "is_integrated", None),
        "is_multi_gpu_board": getattr(p, "is_multi_gpu_board", None),
    }


def _devices(mod: Any, out: dict[str, Any]) -> None:
    avail, err = _call(mod.is_available)
    out["available"] = bool(avail) if err is None else False
    if err:
        out["errors"]["is_available"] = err
        return
    count, err = _call(mod.device_count)
    out["device_count"] = int(count) if err is None else 0
    if err:
        out["errors"]["device_count"] = err
    out["devices"] = []
    for i in range(out["device_count"]):
        props, err = _call(_properties, mod, i)
        out["devices"].append(props if err is None else {"index": i, "error": err})


def musa_facts() -> dict[str, Any]:
    """What this process sees of MUSA: ``status`` is ``absent`` (torch_musa not installed),
    ``broken`` (installed but importing it or registering ``torch.musa`` failed) or ``present``.
    Device facts come from ``torch.musa`` itself, never from shell variables."""
    out: dict[str, Any] = {"status": "absent", "available": False, "device_count": 0,
                           "devices": [], "errors": {}}
    tm = _torch_musa()
    if tm is None:
        broken = bool(musa_import_error and "import failed" in musa_import_error)
        out["status"] = "broken" if broken else "absent"
        out["errors"]["import"] = musa_import_error
        return out
    out["torch_musa_version"] = getattr(tm, "__version__", None)
    ver_mod, err = _call(importlib.import_module, "torch_musa.version")
    out["torch_musa_git"] = getattr(ver_mod, "git_version", None) if ver_mod else None
    mod = getattr(_torch(), "musa", None)
    if mod is None:
        out["status"] = "broken"
        out["errors"]["register"] = "torch_musa imported but torch.musa is not registered"
        return out
    out["status"] = "present"
    _devices(mod, out)
    torch = _torch()
    mudnn = getattr(torch.backends, "mudnn", None)
    if mudnn is None:
        out["mudnn_version"] = None
        out["errors"]["mudnn"] = "torch.backends.mudnn not present"
    else:
        out["mudnn_version"], err = _call(mudnn.version)
        if err:
            out["errors"]["mudnn"] = err
        out["mudnn_allow_tf32"] = getattr(mudnn, "allow_tf32", None)
    mccl = getattr(mod, "mccl", None)
    if mccl is None:
        out["mccl_version"] = None
        out["errors"]["mccl"] = "torch.musa.mccl not present (builds with USE_MCCL=0 lack it)"
    else:
        ver, err = _call(mccl.version)
        out["mccl_version"] = ".".join(str(x) for x in ver) if isinstance(ver, tuple) else ver
        if err:
            out["errors"]["mccl"] = err
    if hasattr(mod, "get_arch_list"):
        out["arch_list"], err = _call(mod.get_arch_list)
        if err:
            out["errors"]["arch_list"] = err
    return out


def cuda_facts() -> dict[str, Any]:
    """What this process sees of CUDA (or ROCm, which torch exposes as torch.cuda)."""
    torch = _torch()
    out: dict[str, Any] = {"built": bool(torch.version.cuda or getattr(torch.version, "hip", None)),
                           "available": False, "device_count": 0, "devices": [], "errors": {}}
    if not out["built"]:
        return out
    _devices(torch.cuda, out)
    out["cudnn_version"], err = _call(torch.backends.cudnn.version)
    if err:
        out["errors"]["cudnn"] = err
    nccl = getattr(torch.cuda, "nccl", None)
    if nccl is not None and out["available"]:
        ver, err = _call(nccl.version)
        out["nccl_version"] = ".".join(str(x) for x in ver) if isinstance(ver, tuple) else ver
        if err:
            out["errors"]["nccl"] = err
    out["arch_list"], err = _call(torch.cuda.get_arch_list)
    if err:
        out["errors"]["arch_list"] = err
    return out


def distributed_backends() -> dict[str, Any]:
    """Process-group backends compiled into this torch (mccl: registered by torch_musa)."""
    out: dict[str, Any] = {}
    try:
        import torch.distributed as dist
    except Exception as exc:
        return {"error": _err(exc)}
    if not dist.is_available():
        return {"error": "torch.distributed is not available in this build"}
    for name in ("gloo", "nccl", "mpi", "ucc", "xccl"):
        fn = getattr(dist, f"is_{name}_available", None)
        if fn is not None:
            ok, err = _call(fn)
            out[name] = bool(ok) if err is None else f"error: {err}"
    registered = [str(b) for b in getattr(dist.Backend, "backend_list", [])]
    fn = getattr(dist, "is_mccl_available", None)
    if fn is not None:
        ok, err = _call(fn)
        out["mccl"] = bool(ok) if err is None else f"error: {err}"
    else:
        musa = musa_module()
        out["mccl"] = "mccl" in registered or (musa is not None and hasattr(musa, "mccl"))
    out["registered"] = registered
    return out


def profiler_activities() -> list[str]:
    """torch.profiler activities this build supports (MUSA shows as PrivateUse1/MUSA)."""
    from torch.profiler import supported_activities

    return sorted(str(a).split(".")[-1] for a in supported_activities())


DIST_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "musa": "mccl"}


def dist_backend(kind: str) -> str:
    """The torch.distributed backend for a device kind: gloo on CPU, nccl on CUDA, mccl on MUSA
    (torch_musa registers mccl when it is imported)."""
    return DIST_BACKENDS[kind]


def set_current(dev: DeviceInfo) -> None:
    """Make ``dev`` the current device of this process (one rank, one device)."""
    if dev.kind != "cpu" and dev.index is not None:
        _backend(dev.kind).set_device(dev.index)


def fabric_identity(kind: str, index: int | None) -> str | None:
    """The device's fast-link domain as an opaque string, or None when it cannot be told.

    CUDA: NVML GPU fabric info through ``pynvml`` (cluster UUID + clique id, only when the
    fabric registration is complete and the UUID is non-zero, as on NVL72 racks). MUSA: no
    public fabric/clique query is known, so None. Callers fall back to the host."""
    if kind != "cuda":
        return None
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        uuid = getattr(_torch().cuda.get_device_properties(index or 0), "uuid", None)
        if uuid is not None:
            handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index or 0)
        info = pynvml.nvmlDeviceGetGpuFabricInfo(handle)
    except Exception as exc:  # no fabric (HGX, PCIe), old driver, no NVML: not an error
        log.debug("no NVML fabric info: %s", exc)
        return None
    cluster = bytes(getattr(info, "clusterUuid", b"") or b"")
    state = getattr(info, "state", None)
    completed = getattr(pynvml, "NVML_GPU_FABRIC_STATE_COMPLETED", 3)
    if state != completed or not any(cluster):
        return None
    return f"nvml:{cluster.hex()}:{getattr(info, 'cliqueId', 0)}"


def profiler_activities_for(dev: DeviceInfo) -> list[Any]:
    """torch.profiler activities for ``dev``: CPU, plus CUDA, or MUSA (torch_musa registers
    ``ProfilerActivity.MUSA`` as an alias of PrivateUse1; it must be imported first, which
    :func:`resolve` has done). Raises BackendUnavailable when the device has no activity."""
    activity = _torch().profiler.ProfilerActivity
    out = [activity.CPU]
    if dev.kind == "cpu":
        return out
    if dev.kind == "musa" and musa_module() is None:
        raise BackendUnavailable("profiler on musa needs torch_musa, which is not importable here")
    name = {"cuda": "CUDA", "musa": "MUSA"}.get(dev.kind, dev.kind.upper())
    extra = getattr(activity, name, None)
    if extra is None:
        raise BackendUnavailable(
            f"torch.profiler has no ProfilerActivity.{name} in this build; device-side events "
            "cannot be recorded"
        )
    return [*out, extra]
