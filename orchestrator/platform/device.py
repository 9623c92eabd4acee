"""The device seam: the only module that asks torch about musa, cuda or cpu.

MUSA is detected from inside the process: ``torch_musa`` is imported when present (which
registers ``torch.musa``) and asked whether it has a device. Shell variables are never taken as
evidence. Tests replace :func:`_torch_musa` / ``torch.musa`` here and nowhere else.

torch_musa registers a ``torch.backends`` entry point (``torch_musa = torch_musa:_autoload``,
its setup.py), so ``import torch`` itself imports it unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``;
a broken torch_musa then makes ``import torch`` raise. :func:`_torch` turns that into one line
naming the variable. Counting devices (``is_available``, ``device_count``) calls torch_musa's
``poison_fork()`` (csrc/core/Module.cpp): every child forked afterwards is a bad fork, and
importing torch_musa counts them (``_dynamo/__init__.py``); so the fork server imports torch
without the extension and never imports torch_musa (:func:`preload_for_fork`).

Test seam: ``ORCH_FAKE_DEVICE_KINDS`` (e.g. ``cuda``) makes :func:`available_kinds` report those
kinds (a Slurm job's environment only: orchestrator.launch.device_probe's test).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
import resource
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from orchestrator.platform import fabric
from orchestrator.platform.env_record import (
    BackendAutoload,
    CudaFacts,
    DeviceFacts,
    DeviceProperties,
    DistributedBackends,
    MusaFacts,
    MusaTopology,
    TorchBuild,
)
from orchestrator.platform.block_timing import DeviceTimer
from orchestrator.core.errors import BackendUnavailable

log = logging.getLogger(__name__)

VISIBILITY_VARS = {"musa": "MUSA_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}
AUTOLOAD_VAR = "TORCH_DEVICE_BACKEND_AUTOLOAD"  # torch/__init__.py: "1" (default) loads extensions
AUTOLOAD_GROUP = "torch.backends"  # the entry-point group torch loads at import


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # cpu | cuda | musa
    index: int | None
    name: str
    count: int  # devices of this kind visible to the process

    @property
    def torch_device(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"


autoload_error: str | None = None  # why `import torch` failed in an autoloaded extension


def autoload_failure(exc: BaseException) -> str | None:
    """One line naming the extension, its own error and the fix, when ``exc`` is torch's
    "Failed to load the backend extension" (raised at the end of ``import torch`` when an
    autoloaded extension such as torch_musa raises); None for any other exception. The line
    is kept (``autoload_error``): importing torch again in this process would fail otherwise
    (torch's half-run import re-registers its operator libraries), so the seam does not."""
    global autoload_error
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, RuntimeError) and "Failed to load the backend extension" in str(e):
            m = re.search(r"backend extension: (\S+?)\.?(?:\s|$)", str(e))
            name = m.group(1) if m else "?"
            cause = e.__cause__ or e.__context__
            why = f" ({_err(cause)})" if cause is not None else ""
            autoload_error = (f"import torch failed: its autoloaded backend extension {name} "
                              f"raised{why}; repair or uninstall {name}, or set "
                              f"{AUTOLOAD_VAR}=0 to import torch without it")
            return autoload_error
    return None


def _torch() -> ModuleType:
    """torch; a broken autoloaded backend extension is one line (BackendUnavailable), here
    and at every later call in this process."""
    if autoload_error is not None:
        raise BackendUnavailable(autoload_error)
    try:
        import torch
    except Exception as exc:
        why = autoload_failure(exc)
        if why is None:
            raise
        raise BackendUnavailable(why) from None
    return torch


def backend_autoload() -> BackendAutoload:
    """Whether ``import torch`` loads out-of-tree backends here, and which: the variable as
    set, torch's reading of it, the ``torch.backends`` entry points installed (from package
    metadata, without importing them) and the failure seen in this process, if any."""
    from importlib.metadata import entry_points  # start-up cost: only the report asks

    value = os.environ.get(AUTOLOAD_VAR)
    try:
        found = sorted(f"{ep.name} = {ep.value}" for ep in entry_points(group=AUTOLOAD_GROUP))
    except Exception as exc:  # noqa: BLE001 - broken metadata: recorded, not fatal
        found = [f"error: {_err(exc)}"]
    return {"variable": AUTOLOAD_VAR, "value": value, "enabled": (value or "1") == "1",
            "entry_points": found, "error": autoload_error}


def _torch_musa() -> ModuleType | None:
    """Import torch_musa when it is installed; None when it is absent.

    A broken install (import raises something other than ImportError) is logged and treated as
    absent, with the reason kept for the environment report."""
    global musa_import_error
    if autoload_error is not None:  # import torch failed: so would torch_musa's `import torch`
        musa_import_error = f"torch_musa import failed: {autoload_error}"
        return None
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


FAKE_KINDS_VAR = "ORCH_FAKE_DEVICE_KINDS"  # test seam: see the module docstring


def fake_kinds() -> list[str]:
    """The kinds :data:`FAKE_KINDS_VAR` fakes in this process (empty: none, the real answer)."""
    parts = (p.strip() for p in os.environ.get(FAKE_KINDS_VAR, "").split(","))
    return [k for k in parts if k and k != "cpu"]


def available_kinds() -> list[str]:
    """The device kinds this process can use, the preferred first, ``cpu`` last (musa, cuda,
    cpu). :data:`FAKE_KINDS_VAR`, when set, answers instead (a test seam)."""
    if faked := fake_kinds():
        return [*faked, "cpu"]
    try:
        torch = _torch()
    except BackendUnavailable as exc:  # a broken autoloaded extension: no device is usable
        log.warning("%s", exc)
        return ["cpu"]
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
    if autoload_error is not None:  # not even the CPU: torch itself does not import
        raise BackendUnavailable(autoload_error)
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
    try:
        torch = _torch()
    except BackendUnavailable as exc:  # import torch itself fails (an autoloaded extension)
        return str(exc)
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


def is_oom(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")  # a process that never imported torch raised no torch OOM
    if torch is not None and isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(exc).lower()
    return "out of memory" in text or isinstance(exc, MemoryError)


def preload_for_fork() -> None:
    """Import torch for the launchers' fork server, with no device runtime touched: without
    autoloaded backend extensions (``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` while it imports), and
    never torch_musa, whose import counts devices and so poisons every later fork. A forked
    child imports torch_musa itself when it resolves its device."""
    saved = os.environ.get(AUTOLOAD_VAR)
    os.environ[AUTOLOAD_VAR] = "0"
    try:
        _torch()
    finally:
        if saved is None:
            os.environ.pop(AUTOLOAD_VAR, None)
        else:
            os.environ[AUTOLOAD_VAR] = saved


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
# Read by orchestrator.platform.environment. Every function here returns plain data and records why a
# query failed instead of raising: a broken driver or library must not take a report down.


def _err(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _call(fn: Any, *args: Any) -> tuple[Any, str | None]:
    try:
        return fn(*args), None
    except Exception as exc:  # a vendor stack can raise anything here
        return None, _err(exc)


def torch_build() -> TorchBuild:
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


def _properties(mod: Any, index: int) -> DeviceProperties:
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


def _devices(mod: Any, out: DeviceFacts) -> None:
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


def musa_facts() -> MusaFacts:
    """What this process sees of MUSA: ``status`` is ``absent`` (torch_musa not installed),
    ``broken`` (installed but importing it or registering ``torch.musa`` failed) or ``present``.
    Device facts come from ``torch.musa`` itself, never from shell variables."""
    out: MusaFacts = {"status": "absent", "available": False, "device_count": 0,
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
    if out["device_count"] > 0:
        out["topology"] = musa_topology(out["device_count"])
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
    # torch.musa.mccl imports in every build; only a USE_MCCL build registers the backend
    # (csrc/distributed/Register.cpp), and without it mccl.version() raises
    out["mccl_built"] = mccl_registered()
    mccl = getattr(mod, "mccl", None)
    if not out["mccl_built"]:
        out["mccl_version"] = None
        out["errors"]["mccl"] = ("no mccl backend registered in torch.distributed: this "
                                 "torch_musa was built with USE_MCCL=0 (as for S80/S3000)")
    elif mccl is None:
        out["mccl_version"] = None
        out["errors"]["mccl"] = "torch.musa.mccl not present"
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


def musa_topology(count: int) -> MusaTopology:
    """MtLink domain of each visible MUSA device and MTML's topology level between each pair
    (pymtml; None where it is absent or a query fails)."""
    return {"source": "pymtml (MTML)",
            "mtlink_domain": [fabric.mtml_domain_identity(i) for i in range(count)],
            "topology_level": {f"{a}-{b}": fabric.mtml_topology_level(a, b)
                               for a in range(count) for b in range(a + 1, count)}}


def cuda_facts() -> CudaFacts:
    """What this process sees of CUDA (or ROCm, which torch exposes as torch.cuda)."""
    torch = _torch()
    out: CudaFacts = {"built": bool(torch.version.cuda or getattr(torch.version, "hip", None)),
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


def distributed_backends() -> DistributedBackends:
    """Process-group backends compiled into this torch (mccl: registered by torch_musa)."""
    out: DistributedBackends = {}
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
    # torch_musa patches is_mccl_available in, but as a constant True
    # (torch_patches/torch_distributed_distributed_c10d.py.patch): the registration is what a
    # USE_MCCL=0 build lacks, so both must hold
    ok = False
    if fn is not None:
        ok, err = _call(fn)
        out["is_mccl_available"] = bool(ok) if err is None else f"error: {err}"
    out["mccl"] = ok is True and "mccl" in registered
    out["registered"] = registered
    return out


def mccl_registered() -> bool:
    """True when torch.distributed knows an ``mccl`` backend: torch_musa registers it only in
    builds with MCCL (``torch.musa.mccl`` itself imports in every build)."""
    try:
        import torch.distributed as dist  # start-up cost: only the environment report asks
    except Exception:  # noqa: BLE001 - no distributed support: no MCCL
        return False
    return "mccl" in [str(b) for b in getattr(dist.Backend, "backend_list", [])]


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
    """The device's fast-link domain as an opaque string, or None when it cannot be told
    (callers fall back to the host). CUDA: NVML's GPU fabric clique, and only where a FABRIC
    memory handle can be shared as NCCL requires before it uses multi-node NVLink; MUSA:
    the MtLink domain through pymtml. See :mod:`orchestrator.platform.fabric`."""
    if kind == "cuda":
        try:
            uuid = getattr(_torch().cuda.get_device_properties(index or 0), "uuid", None)
        except Exception as exc:  # noqa: BLE001 - no properties: look the device up by index
            log.debug("no CUDA device properties: %s", exc)
            uuid = None
        return fabric.nvml_fabric_identity(index or 0, None if uuid is None else str(uuid))
    if kind == "musa":
        return fabric.mtml_domain_identity(index or 0)
    return None


DEVICE_ACTIVITY = {"cuda": "CUDA", "musa": "PrivateUse1"}  # MUSA: torch_musa's alias


def device_activity(kind: str) -> tuple[Any | None, str | None]:
    """(the torch.profiler activity that records ``kind``'s device events, None), or (None,
    why not). MUSA's is ``PrivateUse1`` (torch_musa sets ``ProfilerActivity.MUSA`` as an alias
    of it); it records only where ``torch.profiler.supported_activities()`` lists it, the test
    torch_musa's own profiler tests make, as a Kineto built without the device lacks it."""
    if kind == "cpu":
        return None, "the CPU has host events only"
    if kind == "musa" and musa_module() is None:
        return None, "profiler on musa needs torch_musa, which is not importable here"
    profiler = _torch().profiler
    name = DEVICE_ACTIVITY.get(kind, kind.upper())
    act = getattr(profiler.ProfilerActivity, name, None)
    shown = "MUSA (PrivateUse1)" if kind == "musa" else name
    if act is None:
        return None, (f"torch.profiler has no ProfilerActivity.{shown} in this build; "
                      "device-side events cannot be recorded")
    supported = getattr(profiler, "supported_activities", None)
    if supported is not None and act not in supported():
        return None, (f"ProfilerActivity.{shown} is not in torch.profiler.supported_activities() "
                      f"(this build's Kineto records no {kind} events); device-side events "
                      "cannot be recorded")
    return act, None


def profiler_activities_for(dev: DeviceInfo | str, required: bool = True) -> list[Any]:
    """torch.profiler activities for ``dev`` (a DeviceInfo or a kind): CPU, plus the device's
    when this build records its events (:func:`device_activity`). Without them: raises
    BackendUnavailable when ``required``, else CPU only."""
    kind = dev if isinstance(dev, str) else dev.kind
    out = [_torch().profiler.ProfilerActivity.CPU]
    if kind == "cpu":
        return out
    act, why = device_activity(kind)
    if act is None:
        if required:
            raise BackendUnavailable(str(why))
        log.info("profiling CPU events only: %s", why)
        return out
    return [*out, act]


# --------------------------------------------------------------------------- device time, memory


def event_backend(dev: DeviceInfo) -> Any | None:
    """The backend whose ``Event(enable_timing=True)`` times spans on ``dev`` (``torch.cuda``,
    ``torch.musa``: orchestrator.platform.block_timing); None on the CPU or where it has none."""
    if dev.kind == "cpu":
        return None
    backend = _backend(dev.kind)
    return backend if backend is not None and getattr(backend, "Event", None) is not None else None


def device_timer(dev: DeviceInfo) -> DeviceTimer | None:
    """A :class:`DeviceTimer` on a GPU; None on the CPU or where the backend has no events."""
    backend = event_backend(dev)
    if backend is None:
        return None
    try:
        return DeviceTimer(backend)
    except Exception as exc:  # noqa: BLE001 - no timing events: host time only
        log.warning("no device timing events on %s: %s", dev.torch_device, _err(exc))
        return None


MEMORY_FIGURES = (("peak_mem_bytes", "max_memory_allocated"),
                  ("reserved_mem_bytes", "memory_reserved"),
                  ("peak_reserved_mem_bytes", "max_memory_reserved"))


def memory_figures(dev: DeviceInfo) -> dict[str, int] | None:
    """The device allocator's figures since its last peak reset: allocated peak, reserved now,
    reserved peak (bytes). None on the CPU (peak RSS cannot be reset)."""
    if dev.kind == "cpu":
        return None
    backend = _backend(dev.kind)
    out: dict[str, int] = {}
    for key, fn in MEMORY_FIGURES:
        f = getattr(backend, fn, None)
        if f is not None:
            value, err = _call(f, dev.index)
            if err is None:
                out[key] = int(value)
    return out


# --------------------------------------------------------------------------- attention limits


def attention_target(requested: str) -> dict[str, Any] | None:
    """What the pre-flight needs to refuse an attention arm the device cannot run, or None
    when the trials will not run on MUSA (only torch_musa's selector is modelled:
    :mod:`orchestrator.core.musa_rules`). ``device=musa`` always gets the rules; the visible
    devices' archs where torch_musa is installed here (else unknown: the arch rule cannot
    refuse). ``auto`` gets them only where torch_musa sees a device; without torch_musa
    installed, torch is not imported."""
    kind = requested.partition(":")[0]
    installed = importlib.util.find_spec("torch_musa") is not None
    if kind not in ("musa", "auto") or (kind == "auto" and not installed):
        return None
    archs: list[str | None] = [None]
    mod = None
    if installed:
        try:
            if kind == "auto" and available_kinds()[0] != "musa":
                return None
            mod = musa_module()
        except BackendUnavailable:  # a broken autoload: the device check says so
            if kind == "auto":
                return None
    if mod is not None:
        try:
            archs = ["{}.{}".format(*mod.get_device_capability(i))
                     for i in range(int(mod.device_count()))] or [None]
        except Exception as exc:  # noqa: BLE001 - the arch rule then cannot refuse
            log.debug("no MUSA device capability: %s", exc)
    return {"kind": "musa", "archs": archs, "flash_attn": flash_attn_distributions()}


def flash_attn_distributions() -> list[str]:
    """The installed distributions that provide the ``flash_attn`` package (metadata only)."""
    from importlib.metadata import packages_distributions  # start-up cost: rarely asked

    try:
        return sorted(set(packages_distributions().get("flash_attn", [])))
    except Exception:  # noqa: BLE001 - broken metadata: none known
        return []
