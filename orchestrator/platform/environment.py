"""The environment report: what the training process itself sees, gathered inside it.

MUSA behaviour is never inferred from CUDA behaviour nor from shell variables: device facts come
from torch (through :mod:`orchestrator.platform.device`, the only module that asks torch about musa or
cuda), attention backends are probed with a tiny forward and backward call, tools are asked for
their version. Every probe that fails records why and the report still completes.

Two products:

- :func:`gather`: the full report (``environment.json``), a few hundred milliseconds on top of
  ``import torch``; written by the first trial of a campaign and by
  ``python -m orchestrator.tools.env_report``;
- :func:`fingerprint`: the few facts that make two measurements comparable (device, driver,
  torch and library versions), cheap enough for every trial record (no subprocess, no probe).
  :func:`compare` tells which of them differ between trials.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

from orchestrator import __version__
from orchestrator.core import musa_rules
from orchestrator.platform import device as devmod
from orchestrator.platform.env_record import (
    AttentionReport,
    CompileFacts,
    ContainerFacts,
    CpuFacts,
    DeviceEvents,
    DistributedBackends,
    EnvironmentReport,
    Fingerprint,
    FlashAttnFacts,
    SelectedDevice,
    TorchReport,
    TorchRuntime,
    Versions,
)
from orchestrator.core.results import SCHEMA_VERSION, atomic_write_json

log = logging.getLogger(__name__)

TOOL_TIMEOUT_S = 3.0

# environment switches worth recording (the allow-list): exact names and prefixes
ENV_NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_CONF",
             "LD_PRELOAD", "PYTHONHASHSEED", "TOKENIZERS_PARALLELISM", "MASTER_PORT", "WORLD_SIZE")
ENV_PREFIXES = ("PYTORCH_", "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "TRITON_", "MUSA_",
                "MCCL_", "MUDNN_", "MTHREADS_", "CUDA_", "NCCL_", "CUBLAS_", "CUBLASLT_", "CUDNN_",
                "NVIDIA_", "OMP_", "KMP_", "GOMP_", "DNNL_", "ONEDNN_")
ENV_EXCLUDE = ("ORCHESTRATOR_LAUNCH_T0",)  # differs per trial by construction
VISIBILITY_VARS = ("MUSA_VISIBLE_DEVICES", "MTHREADS_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                   "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
# profilers and driver tools: executable -> arguments that print a version
TOOLS: dict[str, list[str]] = {
    "msys": ["--version"], "mcu": ["--version"], "nsys": ["--version"], "ncu": ["--version"],
    "mthreads-gmi": ["-q"], "nvidia-smi": ["--query-gpu=driver_version", "--format=csv,noheader"],
    "musa_toolkits_version": [], "musa_runtime_version": [], "mudnn_version": [],
}
# the MUSA SDK's version tools: `name:{json}` before MUSA 5.2, plain text lines from 5.2
MUSA_VERSION_TOOLS = ("musa_toolkits_version", "musa_runtime_version", "mudnn_version")
PUBLIC_REGISTRIES = ("docker.io", "ghcr.io", "nvcr.io", "quay.io", "gcr.io", "public.ecr.aws",
                     "mcr.microsoft.com", "registry.k8s.io", "registry.mthreads.com")
IMAGE_DIGEST_VARS = ("ORCHESTRATOR_IMAGE_DIGEST", "CONTAINER_IMAGE_DIGEST", "IMAGE_DIGEST")


def _err(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _probe(name: str, fn: Callable[[], Any], errors: dict[str, str]) -> Any:
    try:
        return fn()
    except Exception as exc:  # failures are data: the report completes without this section
        errors[name] = _err(exc)
        log.debug("environment probe %s failed: %s", name, errors[name])
        return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


# --------------------------------------------------------------------------- host


def cpu_facts() -> CpuFacts:
    info = _read("/proc/cpuinfo") or ""
    cores = {(m.group(1), m.group(2)) for m in re.finditer(
        r"physical id\s*:\s*(\d+).*?core id\s*:\s*(\d+)", info, re.DOTALL)}
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    mem = re.search(r"MemTotal:\s*(\d+) kB", _read("/proc/meminfo") or "")
    return {
        "model": devmod.cpu_name(),
        "logical_cores": os.cpu_count(),
        "physical_cores": len(cores) or None,
        "usable_cores": usable,  # this process's CPU affinity
        "memory_total_bytes": int(mem.group(1)) * 1024 if mem else None,
    }


def env_switches(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env)
            if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and k not in ENV_EXCLUDE}


def _public_image(ref: str) -> str:
    """An image reference with a private registry host replaced by ``<registry>``."""
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost") \
            and first.lower() not in PUBLIC_REGISTRIES:
        return f"<registry>/{rest}"
    return ref


def container_facts() -> ContainerFacts:
    evidence = [p for p in ("/.dockerenv", "/run/.containerenv") if os.path.exists(p)]
    cgroup = _read("/proc/1/cgroup") or ""
    for word in ("docker", "kubepods", "containerd", "libpod", "lxc"):
        if word in cgroup:
            evidence.append(f"cgroup:{word}")
    out: ContainerFacts = {"detected": bool(evidence), "evidence": evidence,
                           "image": None, "image_digest": None}
    podman = _read("/run/.containerenv") or ""
    m = re.search(r'^image="([^"]*)"', podman, re.MULTILINE)
    if m and m.group(1):
        out["image"] = _public_image(m.group(1))
    m = re.search(r'^imageid="([^"]*)"', podman, re.MULTILINE)
    if m and m.group(1):
        out["image_digest"] = m.group(1)
    for var in IMAGE_DIGEST_VARS:
        if os.environ.get(var):
            out["image_digest"], out["image_digest_source"] = os.environ[var], var
            break
    if out["image_digest"] is None:
        out["image_digest_note"] = ("not visible from inside the process; set "
                                    "ORCHESTRATOR_IMAGE_DIGEST to record it")
    return out


def tool_version(name: str, args: list[str]) -> dict[str, Any]:
    """The first lines a tool prints about its version; absent tools are recorded as such."""
    path = shutil.which(name)
    if path is None:
        return {"found": False}
    try:
        proc = subprocess.run([path, *args], capture_output=True, text=True,
                              timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"found": True, "error": _err(exc)}
    text = (proc.stdout or proc.stderr).strip()
    out: dict[str, Any] = {"found": True, "returncode": proc.returncode}
    if name == "mthreads-gmi":
        m = re.search(r"Driver Version\s*:\s*(\S+)", text)
        out["driver_version"] = m.group(1) if m else None
        m = re.search(r"Product Name\s*:\s*(.+)", text)
        out["product_name"] = m.group(1).strip() if m else None
    elif name == "nvidia-smi":
        out["driver_version"] = text.splitlines()[0].strip() if text else None
    elif name in MUSA_VERSION_TOOLS:
        out.update(musa_rules.parse_version_tool(name, text))
    else:
        out["version"] = " ".join(text.splitlines()[:2])[:200] if text else None
    return out


def driver_versions() -> dict[str, str | None]:
    """Kernel driver versions from files the drivers publish (cheap: no subprocess)."""
    nv = _read("/proc/driver/nvidia/version") or ""
    m = re.search(r"Kernel Module\s+(\S+)", nv) or re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", nv)
    return {"musa": _read("/sys/module/mtgpu/version"), "cuda": m.group(1) if m else None}


# --------------------------------------------------------------------------- probes in torch


SELECTORS = {
    "cpu": "ATen's selector (flash for CPU, math)",
    "cuda": "ATen's selector (flash, efficient, cudnn, math; per GPU and build)",
    "musa": ("torch_musa's selector (flash, math only; csrc/aten/ops/attention/mudnn/SDPUtils.h): "
             "flash needs mp arch >= 2.2, fp16/bf16, head dims <= 128 (or 192/128, 160/160); "
             "forcing efficient or cudnn is a configuration error"),
}


def attention_backends(dev: devmod.DeviceInfo) -> AttentionReport:
    """Which attention kernels actually run forward and backward here, per dtype. On MUSA a
    forced kernel torch_musa's selector cannot run is a configuration error (not an absent
    kernel), and its math kernel is muDNN's."""
    import torch  # start-up cost: only the full report probes kernels
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtypes = [torch.float32, torch.bfloat16] if dev.kind == "cpu" else \
        [torch.bfloat16, torch.float16, torch.float32]
    out: AttentionReport = {"device": dev.torch_device, "selector": SELECTORS.get(dev.kind),
                            "sdpa": {}}
    for kernel, attr in (("math", "MATH"), ("flash", "FLASH_ATTENTION"),
                         ("efficient", "EFFICIENT_ATTENTION"), ("cudnn", "CUDNN_ATTENTION")):
        backend = getattr(SDPBackend, attr, None)
        res: dict[str, str] = {}
        for dt in dtypes:
            name = str(dt).replace("torch.", "")
            if backend is None:
                res[name] = "absent from this torch"
                continue
            try:
                q = torch.randn(1, 2, 16, 16, device=dev.torch_device, dtype=dt, requires_grad=True)
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
                res[name] = "ok"
            except Exception as exc:  # "no available kernel" is the expected answer here
                text = _err(exc)[:160]
                configuration = ("Invalid backend configuration" in text
                                 or "No viable backend" in text)
                res[name] = f"configuration error: {text}" if (
                    dev.kind == "musa" and configuration) else text
        out["sdpa"][kernel] = res
    out["sdpa_usable"] = {k: [dt for dt, r in res.items() if r == "ok"]
                          for k, res in out["sdpa"].items()}
    if dev.kind == "musa":
        archs = [d.get("arch") for d in (devmod.musa_facts().get("devices") or [])
                 if d.get("index") == dev.index] or [None]
        out["musa"] = {
            "implementation": musa_rules.MUSA_IMPLEMENTATION,
            "arch": archs[0],
            "flash_refusal_bf16_head64": musa_rules.musa_sdpa_refusal(
                "flash", "bfloat16", 64, 64, archs),
        }
    out["flash_attn"] = _flash_attn(dev)
    out["flash_attn_interface"] = _flash_attn_interface()
    return out


def _distribution_version(module: Any, package: str) -> tuple[list[str], str | None]:
    """(the distributions that provide ``package``, its version): the module's
    ``__version__``, else its distribution's (MATE's flash_attn keeps it only there)."""
    from importlib import metadata  # start-up cost: only the full report asks

    try:
        dists = sorted(set(metadata.packages_distributions().get(package, [])))
    except Exception:  # noqa: BLE001 - broken metadata: none known
        dists = []
    version = getattr(module, "__version__", None)
    for d in dists:
        if version is not None:
            break
        try:
            version = metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    return dists, version


def _flash_attn(dev: devmod.DeviceInfo) -> FlashAttnFacts:
    """The ``flash_attn`` package: who made it (Dao-AILab's flash-attn, or MATE's
    mate-flash-attention on MUSA), its version, which entry points it exports, and whether the
    dense ``flash_attn_func`` runs forward and backward on ``dev``."""
    import importlib.util

    if importlib.util.find_spec("flash_attn") is None:
        return {"installed": False}
    try:
        import flash_attn
    except Exception as exc:
        return {"installed": True, "usable": False, "error": _err(exc)}
    dists, version = _distribution_version(flash_attn, "flash_attn")
    exports = {n: callable(getattr(flash_attn, n, None)) for n in musa_rules.FLASH_ATTN_ENTRY_POINTS}
    out: FlashAttnFacts = {"installed": True, "version": version, "distributions": dists,
                           "provider": musa_rules.flash_attn_provider(dists), "exports": exports}
    if dev.kind == "cpu":
        cast("dict[str, bool | str]", out).update(  # mypy checks no TypedDict.update(**kw)
            usable=False, error="flash-attn needs a cuda or musa device")
        return out
    if not exports["flash_attn_func"]:
        have = [n for n, ok in exports.items() if ok]
        cast("dict[str, bool | str]", out).update(
            usable=False, error=(f"no flash_attn_func (this flash_attn exports "
                                 f"{', '.join(have) or 'none of the known entry points'})"))
        return out
    try:
        import torch

        q = torch.randn(1, 16, 2, 64, device=dev.torch_device, dtype=torch.bfloat16,
                        requires_grad=True)
        flash_attn.flash_attn_func(q, q, q, causal=True).sum().backward()
        out["usable"] = True
    except Exception as exc:
        cast("dict[str, bool | str]", out).update(usable=False, error=_err(exc)[:160])
    return out


def _flash_attn_interface() -> FlashAttnFacts:
    """The FlashAttention-3 layout (``flash_attn_interface``; MATE ships its wrapper so from
    v0.2, as ``flash_attn_3``): installed, version, exports. Not probed."""
    import importlib.util

    if importlib.util.find_spec("flash_attn_interface") is None:
        return {"installed": False}
    try:
        import flash_attn_interface  # type: ignore[import-not-found]
    except Exception as exc:
        return {"installed": True, "error": _err(exc)}
    dists, version = _distribution_version(flash_attn_interface, "flash_attn_interface")
    return {"installed": True, "version": version, "distributions": dists,
            "provider": musa_rules.flash_attn_provider(dists),
            "exports": {n: callable(getattr(flash_attn_interface, n, None))
                        for n in musa_rules.FLASH_ATTN_ENTRY_POINTS}}


def compile_facts() -> CompileFacts:
    """What sets compile-time figures: Inductor's ``compile_threads`` (torch_musa's
    ``_inductor/__init__.py`` forces 1), read where Inductor's config is loaded in this process
    (it is once anything compiled, and wherever torch_musa is imported), and Triton: its
    distribution, version and backends (from the files, without importing it)."""
    import importlib.util
    import sys
    from importlib import metadata

    cfg = sys.modules.get("torch._inductor.config")
    out: CompileFacts = {"inductor_compile_threads": getattr(cfg, "compile_threads", None)}
    if cfg is None:
        out["inductor_note"] = ("torch._inductor is not loaded in this process (nothing "
                                "compiled here), so its compile_threads is not read")
    spec = importlib.util.find_spec("triton")
    if spec is None:
        out["triton"] = {"installed": False}
        return out
    try:
        dists = sorted(set(metadata.packages_distributions().get("triton", [])))
    except Exception:  # noqa: BLE001 - broken metadata
        dists = []
    version = None
    for d in dists:
        try:
            version = metadata.version(d)
            break
        except metadata.PackageNotFoundError:
            continue
    backends = sorted({p.name for loc in (spec.submodule_search_locations or [])
                       for p in (Path(loc) / "backends").glob("*")
                       if p.is_dir() and (p / "compiler.py").exists()})
    out["triton"] = {"installed": True, "distributions": dists, "version": version,
                     "backends": backends}
    return out


def gloo_probe() -> str:
    """A one-rank gloo all-reduce: proves the backend works, without a global process group."""
    import datetime

    import torch
    import torch.distributed as dist

    pg = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=10))
    x = torch.ones(4)
    pg.allreduce([x]).wait()  # type: ignore[attr-defined]
    return "ok" if float(x.sum()) == 4.0 else f"wrong result {x.tolist()}"


def torch_runtime() -> TorchRuntime:
    import torch

    out: TorchRuntime = {"threads": torch.get_num_threads(),
                           "interop_threads": torch.get_num_interop_threads()}
    cap = getattr(torch.backends.cpu, "get_cpu_capability", None)
    out["cpu_capability"] = cap() if cap else None
    out["mkldnn"] = torch.backends.mkldnn.is_available()
    return out


# --------------------------------------------------------------------------- products


def _selected(device: str) -> SelectedDevice:
    try:
        d = devmod.resolve(device)
    except Exception as exc:  # BackendUnavailable: the report says so and goes on
        return {"requested": device, "error": _err(exc)}
    return {"requested": device, "kind": d.kind, "index": d.index, "name": d.name, "count": d.count}


def _versions() -> Versions:
    from importlib import metadata

    try:
        return {"orchestrator": metadata.version("throughput-orchestrator")}
    except metadata.PackageNotFoundError:
        return {"orchestrator": __version__, "note": "not installed; version from the source"}


def fingerprint(device: str = "auto") -> Fingerprint:
    """The facts two comparable measurements must share. Cheap: no subprocess, no probe."""
    torch = devmod._torch()  # a broken autoloaded extension: one line, not a second import
    sel = _selected(device)
    kind = sel.get("kind")
    fp: Fingerprint = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device_kind": kind or f"unavailable ({device})",
    }
    build = devmod.torch_build()
    for k in ("cuda", "hip", "musa"):
        if build.get(k):
            cast("dict[str, str | None]", fp)[f"torch_{k}"] = build[k]  # torch_cuda|hip|musa
    drivers = driver_versions()
    if kind == "musa":
        m = devmod.musa_facts()
        cast("dict[str, str | int | None]", fp).update(  # mypy checks no TypedDict.update(**kw)
            torch_musa=m.get("torch_musa_version"), mudnn=m.get("mudnn_version"),
            mccl=m.get("mccl_version"), driver=drivers["musa"])
        devices = m.get("devices", [])
    elif kind == "cuda":
        c = devmod.cuda_facts()
        cast("dict[str, str | int | None]", fp).update(
            cudnn=c.get("cudnn_version"), nccl=c.get("nccl_version"), driver=drivers["cuda"])
        devices = c.get("devices", [])
    else:
        devices = []
    if kind in ("musa", "cuda"):
        fp["devices"] = sorted({f"{d.get('name')} (arch {d.get('arch')}, "
                                f"{(d.get('total_memory_bytes') or 0) / 2**30:.1f} GiB)"
                                for d in devices})
    else:
        fp["devices"] = [f"{devmod.cpu_name()} ({os.cpu_count()} logical cores)"]
    return fp


def compare(fingerprints: Iterable[tuple[str, Fingerprint | dict[str, Any] | None]]) -> list[str]:
    """One line per fact that differs across trials: ``key: value (n trials), value (m)``.
    Trials without a fingerprint (a process that died early) are left out, not guessed."""
    values: dict[str, dict[str, int]] = {}
    items = [(tid, fp) for tid, fp in fingerprints if fp]
    keys = sorted({k for _, fp in items for k in fp})
    for k in keys:
        for _, fp in items:
            v = json.dumps(fp.get(k), sort_keys=True)
            values.setdefault(k, {}).setdefault(v, 0)
            values[k][v] += 1
    return [f"{k}: " + ", ".join(f"{v} ({n} trial{'s' if n != 1 else ''})"
                                 for v, n in sorted(vs.items()))
            for k, vs in values.items() if len(vs) > 1]


def _device_events(sel: SelectedDevice) -> DeviceEvents:
    """Whether torch.profiler records the selected device's events in this build."""
    kind = sel.get("kind")
    if kind is None:
        return {"kind": None, "activity": None, "why": "no usable device"}
    act, why = devmod.device_activity(kind)
    return {"kind": kind, "activity": None if act is None else str(act).split(".")[-1],
            "why": why}


def gather(device: str = "auto", gathered_in: str = "trial process") -> EnvironmentReport:
    """The full environment report. Never raises: a failing probe is recorded in ``errors``."""
    t0 = time.perf_counter()
    errors: dict[str, str] = {}
    report: EnvironmentReport = {
        "schema_version": SCHEMA_VERSION,
        "gathered_in": gathered_in,
        "gathered_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": {"version": platform.python_version(),
                   "implementation": platform.python_implementation()},
        "platform": {"system": platform.system(), "release": platform.release(),
                     "machine": platform.machine(), "libc": " ".join(platform.libc_ver())},
        "cpu": _probe("cpu", cpu_facts, errors),
        "versions": _probe("versions", _versions, errors),
    }
    report["torch"] = cast("TorchReport", _probe("torch", devmod.torch_build, errors) or {})

    def with_torch(name: str, fn: Callable[[], Any]) -> Any:
        # `import torch` failed in an autoloaded extension: a second import would fail
        # differently (torch's half-run import), so the probes that need torch say why not
        if devmod.autoload_error is not None:
            return {"skipped": devmod.autoload_error}
        return _probe(name, fn, errors)

    report["torch"]["runtime"] = with_torch("torch_runtime", torch_runtime)
    report["torch_backend_autoload"] = _probe("backend_autoload", devmod.backend_autoload, errors)
    report["selected_device"] = _selected(device)
    report["musa"] = _probe("musa", devmod.musa_facts, errors)
    report["cuda"] = with_torch("cuda", devmod.cuda_facts)
    report["visibility"] = {v: os.environ.get(v) for v in VISIBILITY_VARS}
    tools = {name: _probe(f"tool:{name}", functools.partial(tool_version, name, args), errors)
             for name, args in TOOLS.items()}
    drivers = _probe("drivers", driver_versions, errors) or {}
    report["drivers"] = {
        "musa": drivers.get("musa") or (tools.get("mthreads-gmi") or {}).get("driver_version"),
        "cuda": drivers.get("cuda") or (tools.get("nvidia-smi") or {}).get("driver_version"),
        "sources": "/sys/module/mtgpu/version, /proc/driver/nvidia/version, mthreads-gmi, "
                   "nvidia-smi",
    }
    if isinstance(report["musa"], dict):
        report["musa"]["toolkit_version"] = (tools.get("musa_toolkits_version") or {}).get("version")
        report["musa"]["runtime_version"] = (tools.get("musa_runtime_version") or {}).get("version")
        report["musa"]["mudnn_tool_version"] = (tools.get("mudnn_version") or {}).get("version")
    # or Skipped, whose only key is not gloo
    dist = cast("DistributedBackends",
                with_torch("distributed", devmod.distributed_backends) or {})
    if dist.get("gloo") is True:
        dist["gloo_probe"] = _probe("gloo_probe", gloo_probe, errors)
    report["distributed"] = dist
    sel = report["selected_device"]
    if "kind" in sel:
        dev = devmod.DeviceInfo(sel["kind"], sel["index"], sel["name"], sel["count"])
        report["attention"] = with_torch("attention", lambda: attention_backends(dev))
    else:
        report["attention"] = {"skipped": f"no usable device: {sel.get('error')}"}
    report["profilers"] = {
        "torch_activities": with_torch("profiler", devmod.profiler_activities),
        "device_events": with_torch("device_events", lambda: _device_events(sel)),
        "tools": {k: tools[k] for k in ("msys", "mcu", "nsys", "ncu")},
    }
    report["driver_tools"] = {k: tools[k] for k in ("mthreads-gmi", "nvidia-smi",
                                                    *MUSA_VERSION_TOOLS)}
    report["compile"] = _probe("compile", compile_facts, errors)
    report["container"] = _probe("container", container_facts, errors)
    report["env_switches"] = env_switches()
    report["fingerprint"] = with_torch("fingerprint", lambda: fingerprint(device))
    report["errors"] = errors
    report["gather_time_s"] = round(time.perf_counter() - t0, 3)
    return report


def record_facts(record: dict[str, Any], device: str, trial_dir: Path, full: bool) -> None:
    """Add the fingerprint to a trial record; with ``full``, also write the trial's
    environment.json. Called in the trial process after its timed steps; never raises."""
    t0 = time.perf_counter()
    if full:
        report = gather(device)
        try:
            atomic_write_json(trial_dir / "environment.json", report)
            record["environment_report"] = "environment.json"
        except OSError as exc:
            record["environment_report_error"] = _err(exc)
        fp = report.get("fingerprint")
    else:
        fp = None
    if fp is None:
        try:
            fp = fingerprint(device)
        except Exception as exc:  # recorded; the comparison then leaves this trial out
            fp = None
            record["environment_error"] = _err(exc)
    record["environment"] = fp
    record["environment_gather_s"] = round(time.perf_counter() - t0, 4)
