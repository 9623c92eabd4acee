"""One operation timed the way ``triton.testing.do_bench`` and nvbench time kernels.

Every call is timed on its own, by the device's events where it has them (``DeviceTimer``:
CUDA / MUSA events recorded around the call on the current stream, read after one
synchronisation per batch of calls, so no host sync sits between the calls of a batch), by the
host clock around the call and a synchronisation elsewhere (the CPU; labelled). Before each
call a buffer larger than the device's last-level cache is written, so every call starts with
a cold cache as it would inside a training step that streams far more data than the cache
holds (do_bench writes 256 MB; here twice the cache the device reports, or do_bench's figure
where it reports none). Calls repeat until the relative standard error of their median is
below a target (nvbench's stopping rule, on the median), or a time cap, or a call cap; the
result keeps the quantiles do_bench reports (20 %, 50 %, 80 %), how many calls ran and why it
stopped.

On the CPU the same loop runs with host timing, and the buffer is sized from the largest CPU
cache ``/sys`` reports.

With ``graph=True`` (a sweep's ``microbench_graph``) the op is captured once into a CUDA graph
after its warm-up calls (on a side stream, as ``torch.cuda.graph`` wants) and each timed call is
a replay, so launch overhead leaves the figure as it would under a trainer that replays graphs
(``torch.compile(mode="reduce-overhead")``). An op that cannot be captured (a host sync, a
dynamic shape, an allocation the capture refuses) is timed eagerly, and the record says why
(``call_mode``); so is a device without CUDA graphs (the CPU, MUSA here).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.platform import device as devmod

DO_BENCH_FLUSH_BYTES = 256 * 1024 * 1024  # what do_bench writes, whatever the device
QUANTILES = (0.2, 0.5, 0.8)  # do_bench's
BATCH = 10  # calls whose events are read after one synchronisation


@dataclass(frozen=True)
class CacheSize:
    bytes: int | None
    source: str


def gpu_cache(props: Any) -> CacheSize:
    """The L2 a device's properties report (``torch.cuda.get_device_properties(i)``:
    ``L2_cache_size``; MUSA's where its build names it the same)."""
    for name in ("L2_cache_size", "l2_cache_size"):
        size = getattr(props, name, None)
        if isinstance(size, int) and size > 0:
            return CacheSize(size, f"device properties ({name})")
    return CacheSize(None, "the device reports no L2 size")


def cpu_cache(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> CacheSize:
    """The largest cache of CPU 0 ``/sys`` lists (``index*/size``: ``32768K``, ``8M``)."""
    best = 0
    for size_file in sorted(root.glob("index*/size")):
        try:
            text = size_file.read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * unit)
    return CacheSize(best or None, f"{root} (largest level)" if best else "no CPU cache sizes "
                     "under /sys")


def flush_bytes(cache: CacheSize) -> int:
    """Bytes written before each call: twice the cache (every line of it evicted), do_bench's
    256 MB where the size is unknown."""
    return 2 * cache.bytes if cache.bytes else DO_BENCH_FLUSH_BYTES


def device_cache(dev: devmod.DeviceInfo) -> CacheSize:
    if dev.kind == "cpu":
        return cpu_cache()
    try:
        import torch

        backend: Any = devmod.musa_module() if dev.kind == "musa" else getattr(torch, dev.kind)
        return gpu_cache(backend.get_device_properties(dev.index or 0))
    except Exception as exc:  # noqa: BLE001 - a backend without properties: do_bench's size
        return CacheSize(None, f"device properties unavailable: {type(exc).__name__}")


@dataclass(frozen=True)
class KernelTiming:
    times_s: list[float]
    quantiles_s: dict[str, float]  # "p20", "p50", "p80"
    rel_se: float  # the median's relative standard error when it stopped
    stopped_by: str  # "spread" | "time cap" | "call cap"
    clock: str  # "device events" | "host clock around a synchronisation"
    mode: str  # "eager" | "graph replay" | "eager (graph replay ...: why not)"
    flush_bytes: int
    cache_bytes: int | None
    cache_source: str

    @property
    def median_s(self) -> float:
        return self.quantiles_s["p50"]

    def fields(self) -> dict[str, float | int | str | list[float] | None]:
        """The record's fields (``call_*``; named after the quantiles and dataclass fields)."""
        d = asdict(self)
        return {"call_times_s": d.pop("times_s"), "call_time_median_s": self.median_s,
                **{f"call_time_{k}_s": v for k, v in self.quantiles_s.items()},
                **{f"call_{k}": v for k, v in d.items() if k != "quantiles_s"}}


def rel_se_of_median(times: list[float]) -> float:
    """The median's relative standard error: 1.2533 x the robust SD (1.4826 x MAD) / sqrt(n),
    over the median (inf for fewer than 3 calls)."""
    if len(times) < 3:
        return math.inf
    med = statistics.median(times)
    mad = statistics.median([abs(t - med) for t in times])
    return 1.2533 * 1.4826 * mad / math.sqrt(len(times)) / med if med > 0 else math.inf


def _quantile(sorted_times: list[float], q: float) -> float:
    pos = q * (len(sorted_times) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_times[lo] + (sorted_times[hi] - sorted_times[lo]) * (pos - lo)


def bench(fn: Callable[[], Any], dev: devmod.DeviceInfo, *, warmup_calls: int = 3,
          min_calls: int = 10, max_calls: int = 1000, target_rel_se: float = 0.005,
          time_cap_s: float = 2.0, flush: bool = True, graph: bool = False,
          clock: Callable[[], float] = time.perf_counter, cuda: Any = None) -> KernelTiming:
    """Time ``fn`` call by call (see the module): at least ``min_calls``, then until the
    median's relative standard error is below ``target_rel_se``, ``time_cap_s`` of wall time
    has passed, or ``max_calls``. ``graph``: time replays of a CUDA graph of ``fn`` where it
    can be captured (``cuda``: the module that captures, ``torch.cuda`` by default)."""
    import torch

    cache = device_cache(dev)
    nbytes = flush_bytes(cache) if flush else 0
    buf = torch.empty(nbytes, dtype=torch.int8, device=dev.torch_device) if nbytes else None
    for _ in range(warmup_calls):
        fn()
    devmod.synchronize(dev)
    mode = "eager"
    if graph:
        fn, mode = graphed(fn, dev, cuda if cuda is not None else torch.cuda)
        devmod.synchronize(dev)
    events = devmod.device_timer(dev) is not None
    times: list[float] = []
    t_end = clock() + time_cap_s
    stopped = "call cap"
    while len(times) < max_calls:
        n = min(BATCH, max_calls - len(times))
        times += _batch(fn, dev, buf, n, events, clock)
        if len(times) >= min_calls and rel_se_of_median(times) <= target_rel_se:
            stopped = "spread"
            break
        if len(times) >= min_calls and clock() >= t_end:
            stopped = "time cap"
            break
    ordered = sorted(times)
    return KernelTiming(times, {f"p{round(q * 100)}": _quantile(ordered, q) for q in QUANTILES},
                        rel_se_of_median(times), stopped,
                        "device events" if events else "host clock around a synchronisation",
                        mode, nbytes, cache.bytes, cache.source)


def graphed(fn: Callable[[], Any], dev: devmod.DeviceInfo, cuda: Any
            ) -> tuple[Callable[[], Any], str]:
    """(what to time, the mode): the replay of a CUDA graph of ``fn`` (captured after a few
    calls on a side stream, as ``torch.cuda.graph`` asks), or ``fn`` itself with why not."""
    if dev.kind != "cuda":
        return fn, f"eager (graph replay not offered on {dev.kind}: CUDA graphs only)"
    try:
        side = cuda.Stream()
        side.wait_stream(cuda.current_stream())
        with cuda.stream(side):
            for _ in range(3):
                fn()
        cuda.current_stream().wait_stream(side)
        g = cuda.CUDAGraph()
        with cuda.graph(g):
            fn()
    except Exception as exc:  # noqa: BLE001 - not capturable: timed eagerly, and said so
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return fn, f"eager (graph capture failed: {type(exc).__name__}: {first[:200]})"
    return g.replay, "graph replay"


def _batch(fn: Callable[[], Any], dev: devmod.DeviceInfo, buf: Any, n: int, events: bool,
           clock: Callable[[], float]) -> list[float]:
    """``n`` calls, each after the cache flush: by events, read after one synchronisation;
    else by the host clock around the call and a synchronisation."""
    if events:
        timers = [devmod.device_timer(dev) for _ in range(n)]
        for t in timers:
            if buf is not None:
                buf.zero_()
            assert t is not None
            t.start()
            fn()
            t.stop()
        devmod.synchronize(dev)
        return [t.elapsed_s() for t in timers if t is not None]
    out = []
    for _ in range(n):
        if buf is not None:
            buf.zero_()
        devmod.synchronize(dev)
        t0 = clock()
        fn()
        devmod.synchronize(dev)
        out.append(clock() - t0)
    return out
