"""The hardware registry and the peak that utilization is relative to.

The registry is the set of ``conf/hardware/<sku>.yaml`` files (``auto.yaml`` and
``measured.yaml`` are selectors, not SKUs). Each entry gives, per dtype, the dense peak in
TFLOP/s, memory and link bandwidths and the fast-link domain size, every figure with its source
and whether it is a datasheet or a measured figure; a figure no public datasheet gives is null,
never guessed. The Muon cost model reads the same entries.

Which peak a trial's MFU uses (:func:`resolve_peaks`):

- ``hardware=auto``: the entry whose ``match`` substrings occur in the detected device name
  (``exclude`` substrings veto a match, so a GB200 is not taken for a B200). No match gives a
  peak of None with the reason: there is no fallback figure.
- ``hardware=measured``: a short square-matmul benchmark at the workload's precision, in the
  trial process, outside the timed steps (:func:`calibrate_peak`); labelled ``measured``.
- ``hardware=<sku>``: that entry's datasheet figure, even when the detected device differs
  (the mismatch is stated with the figure).

A CPU has no fixed peak (cores, clocks and vector units vary), so the ``cpu`` entry says
``calibrate: true`` and its peak is always measured on the spot. ``hardware.measure_peak``
adds a measured peak beside a datasheet one (default: on CPU only).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from orchestrator.platform import device as devmod
from orchestrator.core.errors import ConfigError
from orchestrator.core.paths import conf_dir
from orchestrator.core.trial_record import Calibration, PeakRefDict  # noqa: F401  (moved to core)

log = logging.getLogger(__name__)

SELECTORS = ("auto", "measured")
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
FIGURE_KINDS = ("datasheet", "measured")
DEVICE_KINDS = ("cpu", "cuda", "musa")
# fields of a registry entry (besides `defaults`, Hydra's composition list)
ENTRY_FIELDS = (
    "name", "description", "vendor", "device_kind", "match", "exclude", "calibrate",
    "peak_tflops", "memory_bandwidth_gbps", "intra_domain_bandwidth_gbps",
    "inter_domain_bandwidth_gbps", "collective_latency_us", "domain_size", "figure_kind",
    "sources", "notes",
)
# HardwareConfig fields that select and calibrate rather than describe a SKU
SELECTION_FIELDS = ("measure_peak", "calibration_size", "calibration_min_s", "count_executed_flops")
# default side of the calibration matmul per device kind (big enough to be compute bound)
CALIBRATION_SIZE = {"cpu": 512, "cuda": 8192, "musa": 8192}


@dataclass(frozen=True)
class HardwareEntry:
    """One SKU of the registry. Bandwidths in GB/s (links: per direction per device)."""

    name: str  # the registry key: the file stem, e.g. "h100"
    description: str
    vendor: str
    device_kind: str
    match: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    calibrate: bool = False
    peak_tflops: dict[str, float | None] = field(default_factory=dict)
    memory_bandwidth_gbps: float | None = None
    intra_domain_bandwidth_gbps: float | None = None
    inter_domain_bandwidth_gbps: float | None = None
    collective_latency_us: float | None = None
    domain_size: int | None = None
    figure_kind: Any = "datasheet"  # str, or a mapping figure -> kind
    sources: dict[str, str] = field(default_factory=dict)
    notes: str | None = None

    def kind_of(self, figure: str) -> str:
        """``datasheet`` or ``measured`` for one figure (e.g. ``peak_tflops``)."""
        if isinstance(self.figure_kind, dict):
            return str(self.figure_kind.get(figure, self.figure_kind.get("default", "datasheet")))
        return str(self.figure_kind)

    def peak(self, dtype: str) -> float | None:
        return self.peak_tflops.get(dtype)

    def to_dict(self) -> HardwareEntryDict:
        d = cast("HardwareEntryDict", asdict(self))
        d["match"], d["exclude"] = list(self.match), list(self.exclude)
        return d


class HardwareEntryDict(TypedDict):
    """A :class:`HardwareEntry` as plain data (``match``/``exclude`` as lists)."""

    name: str
    description: str
    vendor: str
    device_kind: str
    match: list[str]
    exclude: list[str]
    calibrate: bool
    peak_tflops: dict[str, float | None]  # dtype -> TFLOP/s
    memory_bandwidth_gbps: float | None
    intra_domain_bandwidth_gbps: float | None
    inter_domain_bandwidth_gbps: float | None
    collective_latency_us: float | None
    domain_size: int | None
    figure_kind: Any  # as HardwareEntry.figure_kind: a kind, or a mapping figure -> kind
    sources: dict[str, str]  # figure -> where it comes from
    notes: str | None


def registry_dir() -> Path:
    return conf_dir() / "hardware"


def _number(key: str, value: Any, *, integer: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(key, f"must be a positive number or null, got {value!r}")
    return int(value) if integer else float(value)


def entry_from_mapping(key: str, data: dict[str, Any], where: str = "hardware") -> HardwareEntry:
    """Validate one registry mapping; errors name ``<where>.<field>`` and the fix."""
    extra = sorted(set(data) - set(ENTRY_FIELDS) - set(SELECTION_FIELDS) - {"defaults"})
    if extra:
        raise ConfigError(f"{where}.{extra[0]}", f"unknown key; valid keys: {', '.join(ENTRY_FIELDS)}")
    if data.get("device_kind") not in DEVICE_KINDS:
        raise ConfigError(f"{where}.device_kind",
                          f"{data.get('device_kind')!r}; choose one of: {', '.join(DEVICE_KINDS)}")
    peaks = data.get("peak_tflops") or {}
    if not isinstance(peaks, dict):
        raise ConfigError(f"{where}.peak_tflops", "must map dtype -> TFLOP/s or null")
    for dtype in peaks:
        if dtype not in DTYPES:
            raise ConfigError(f"{where}.peak_tflops.{dtype}",
                              f"unknown dtype; choose from: {', '.join(DTYPES)}")
    fk = data.get("figure_kind") or "datasheet"
    for kind in (fk.values() if isinstance(fk, dict) else [fk]):
        if kind not in FIGURE_KINDS:
            raise ConfigError(f"{where}.figure_kind", f"{kind!r}; choose one of: datasheet, measured")
    for name in ("match", "exclude"):
        value = data.get(name) or []
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}.{name}", "must be a list of non-empty strings")
    return HardwareEntry(
        name=key,
        description=str(data.get("description") or key),
        vendor=str(data.get("vendor") or "unknown"),
        device_kind=str(data["device_kind"]),
        match=tuple(data.get("match") or ()),
        exclude=tuple(data.get("exclude") or ()),
        calibrate=bool(data.get("calibrate", False)),
        peak_tflops={d: _number(f"{where}.peak_tflops.{d}", peaks.get(d)) for d in DTYPES},
        memory_bandwidth_gbps=_number(f"{where}.memory_bandwidth_gbps", data.get("memory_bandwidth_gbps")),
        intra_domain_bandwidth_gbps=_number(f"{where}.intra_domain_bandwidth_gbps",
                                            data.get("intra_domain_bandwidth_gbps")),
        inter_domain_bandwidth_gbps=_number(f"{where}.inter_domain_bandwidth_gbps",
                                            data.get("inter_domain_bandwidth_gbps")),
        collective_latency_us=_number(f"{where}.collective_latency_us", data.get("collective_latency_us")),
        domain_size=_number(f"{where}.domain_size", data.get("domain_size"), integer=True),  # type: ignore[arg-type]
        figure_kind=dict(fk) if isinstance(fk, dict) else fk,
        sources=dict(data.get("sources") or {}),
        notes=data.get("notes"),
    )


def load_registry(directory: str | Path | None = None) -> dict[str, HardwareEntry]:
    """Every SKU under ``conf/hardware/`` (or ``directory``), keyed by file stem."""
    import yaml

    out: dict[str, HardwareEntry] = {}
    for path in sorted(Path(directory or registry_dir()).glob("*.yaml")):
        if path.stem in SELECTORS:
            continue
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        name = data.get("name", path.stem)
        if name != path.stem:
            raise ConfigError(f"hardware/{path.name}.name",
                              f"{name!r} must equal the file stem {path.stem!r}")
        out[path.stem] = entry_from_mapping(path.stem, data, f"hardware/{path.name}")
    return out


def lookup(
    device_name: str,
    device_kind: str | None = None,
    registry: dict[str, HardwareEntry] | None = None,
) -> HardwareEntry | None:
    """The entry for a device name as torch reports it, or None when nothing matches.

    Case-insensitive substring match; an ``exclude`` substring vetoes; an entry with no
    ``match`` patterns matches every device of its ``device_kind`` (the CPU entry). When
    several match, the longest matching pattern wins."""
    registry = load_registry() if registry is None else registry
    low = device_name.lower()
    best: tuple[int, HardwareEntry] | None = None
    for entry in registry.values():
        if device_kind is not None and entry.device_kind != device_kind:
            continue
        if any(x.lower() in low for x in entry.exclude):
            continue
        if not entry.match:
            score = 0 if device_kind == entry.device_kind else -1
        else:
            hits = [len(m) for m in entry.match if m.lower() in low]
            score = max(hits) if hits else -1
        if score >= 0 and (best is None or score > best[0]):
            best = (score, entry)
    return best[1] if best else None


def entry_from_config(hw: Any, registry: dict[str, HardwareEntry] | None = None) -> HardwareEntry | None:
    """The SKU a ``hardware=<sku>`` config names (its composed fields, overrides included);
    None for ``auto`` / ``measured``."""
    data = hw if isinstance(hw, dict) else asdict(hw)
    name = data.get("name", "auto")
    if name in SELECTORS:
        return None
    if data.get("peak_tflops") is None:  # hardware.name=<sku> without the group: read the file
        registry = load_registry() if registry is None else registry
        if name not in registry:
            raise ConfigError("hardware.name", _unknown_sku(name, registry))
        return registry[name]
    fields = {k: v for k, v in data.items() if k in ENTRY_FIELDS}
    return entry_from_mapping(name, fields)


def _unknown_sku(name: str, registry: dict[str, HardwareEntry]) -> str:
    return (f"unknown hardware {name!r}; choose auto, measured, or one of: "
            f"{', '.join(sorted(registry))} (or add conf/hardware/{name}.yaml)")


def validate_hardware(hw: Any) -> None:
    """Pre-flight checks of ``cfg.hardware`` (raises ConfigError naming the key)."""
    if hw.calibration_size < 0:
        raise ConfigError("hardware.calibration_size", f"must be >= 0 (0 = by device), got {hw.calibration_size}")
    if hw.calibration_min_s <= 0:
        raise ConfigError("hardware.calibration_min_s", f"must be > 0, got {hw.calibration_min_s}")
    if hw.name in SELECTORS:
        return
    registry = load_registry()
    if hw.name not in registry and hw.peak_tflops is None:
        raise ConfigError("hardware.name", _unknown_sku(hw.name, registry))
    entry_from_config(hw, registry)


# --------------------------------------------------------------------------- peaks


@dataclass
class PeakRef:
    """One peak a utilization figure is relative to; ``peak_tflops`` None comes with a reason."""

    label: str  # "measured", or the registry key ("h100")
    kind: str  # "measured" | "datasheet"
    hardware: str  # what the figure describes
    dtype: str
    peak_tflops: float | None
    source: str
    reason: str | None = None  # why there is no figure, or a caveat that goes with it
    calibration: Calibration | None = None

    def to_dict(self) -> PeakRefDict:
        return cast("PeakRefDict", asdict(self))


def matmul_dtype(precision: str, device_kind: str) -> tuple[str, str]:
    """(registry dtype key, why): the matmul precision a workload's precision runs at here."""
    if precision in ("bf16", "fp16"):
        return precision, f"{precision} autocast"
    import torch

    if device_kind == "musa":
        tf32 = bool(getattr(getattr(torch.backends, "mudnn", None), "allow_tf32", False))
        why = "torch.backends.mudnn.allow_tf32"
    else:
        tf32 = torch.get_float32_matmul_precision() != "highest"
        why = f"torch.get_float32_matmul_precision()={torch.get_float32_matmul_precision()!r}"
    if tf32 and device_kind != "cpu":
        return "tf32", f"fp32 with TF32 matmuls allowed: {why}"
    return "fp32", f"fp32 matmuls: {why}"


def calibrate_peak(dev: Any, dtype: str, size: int = 0, min_s: float = 0.2) -> Calibration:
    """Measure the best achieved throughput of a square matmul at ``dtype`` on ``dev``.

    Runs in the calling (trial) process with its precision settings, device synchronised around
    every matmul. Returns ``tflops`` (the best run), the median and the set-up."""
    import torch

    torch_dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
                   "fp16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"no calibration matmul for dtype {dtype!r}")
    n = size or CALIBRATION_SIZE.get(dev.kind, 4096)
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(dev.torch_device, torch_dtype)
    b = torch.randn(n, n, generator=gen).to(dev.torch_device, torch_dtype)
    flop = 2.0 * n**3
    a @ b  # warm-up: kernel selection, allocator, thread pool
    devmod.synchronize(dev)
    rates: list[float] = []
    deadline = time.perf_counter() + min_s
    while len(rates) < 3 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        a @ b
        devmod.synchronize(dev)
        rates.append(flop / (time.perf_counter() - t0) / 1e12)
        if len(rates) >= 1000:
            break
    rates.sort()
    return {
        "tflops": rates[-1],
        "median_tflops": rates[len(rates) // 2],
        "runs": len(rates),
        "matmul": f"{n}x{n} @ {n}x{n} {dtype}",
        "device": dev.name,
    }


def resolve_peaks(
    hw: Any,
    device_kind: str,
    device_name: str,
    dtype: str,
    measure: Callable[[], Calibration] | None,
    registry: dict[str, HardwareEntry] | None = None,
) -> list[PeakRef]:
    """The peaks a trial's utilization is reported against (pure but for ``measure``).

    ``hw`` is the HardwareConfig (or its dict); ``measure`` runs the calibration."""
    data = hw if isinstance(hw, dict) else asdict(hw)
    name = data.get("name", "auto")
    refs: list[PeakRef] = []
    want_measured = name == "measured" or bool(data.get("measure_peak")) or (
        data.get("measure_peak") is None and device_kind == "cpu")
    entry: HardwareEntry | None = None
    if name == "auto":
        registry = load_registry() if registry is None else registry
        entry = lookup(device_name, device_kind, registry)
        if entry is None:
            refs.append(PeakRef(
                "auto", "datasheet", device_name, dtype, None, "hardware registry",
                reason=(f"device {device_name!r} ({device_kind}) is not in the hardware registry "
                        "(conf/hardware/); MFU is null rather than relative to a guessed peak: "
                        "add an entry, name one with hardware=<sku>, or use hardware=measured"),
            ))
    elif name != "measured":
        entry = entry_from_config(data, registry)
    if entry is not None and entry.calibrate:  # no fixed peak (a CPU): measure it here
        want_measured, entry = True, None
    if entry is not None:
        peak = entry.peak(dtype)
        src = entry.sources.get("peak_tflops", "registry")
        reason = None
        if peak is None:
            reason = (f"the registry has no {dtype} peak for {entry.name} (no public datasheet "
                      f"figure): {src}; use hardware=measured")
        elif entry.device_kind != device_kind or (
                name != "auto" and lookup(device_name, device_kind, {entry.name: entry}) is None):
            reason = (f"hardware={entry.name} was named explicitly; the detected device is "
                      f"{device_name!r} ({device_kind}), so this MFU is relative to another "
                      "device's peak")
        refs.append(PeakRef(entry.name, entry.kind_of("peak_tflops"), entry.description, dtype,
                            peak, src, reason))
    if want_measured:
        if measure is None:
            refs.append(PeakRef("measured", "measured", device_name, dtype, None, "calibration",
                                reason="no calibration was run"))
        else:
            try:
                cal = measure()
                refs.append(PeakRef(
                    "measured", "measured", device_name, dtype, float(cal["tflops"]),
                    f"best of {cal['runs']} runs of a {cal['matmul']} matmul in the trial process",
                    calibration=cal,
                ))
            except Exception as exc:  # noqa: BLE001 - a failed calibration is a reason, not a lost trial
                refs.append(PeakRef("measured", "measured", device_name, dtype, None, "calibration",
                                    reason=f"calibration failed: {type(exc).__name__}: {exc}"))
    return refs
