"""torch.compile bookkeeping for a trial: compile time, graph breaks, recompiles.

Read from torch._dynamo's own counters, and only when torch._dynamo is already imported (an
eager trial never pays for importing it; nothing was compiled then, so every figure is 0).
``compile_time_s`` is torch's ``total_wall_time``: whole-frame compile plus backward compile
(dynamo tracing, AOTAutograd, inductor codegen and autotuning).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.envvars import env_overrides

# protocol.compile_cache: cold = every trial compiles with a fresh, empty inductor/Triton cache
# (compile_time_s is then what a first run on a machine pays); warm = the user's own caches
# (compile_time_s is what a rerun pays, and depends on what ran before on this machine)
CACHE_MODES = ("cold", "warm")


@contextlib.contextmanager
def cache_scope(mode: str) -> Iterator[None]:
    """For ``cold``: point torch's compile caches at a fresh temporary directory for the trial,
    then restore the variables and delete it. Nothing to do for ``warm``."""
    if mode != "cold":
        yield
        return
    tmp = tempfile.mkdtemp(prefix="orch-compile-cache-")
    try:
        with env_overrides({"TORCHINDUCTOR_CACHE_DIR": tmp,
                            "TRITON_CACHE_DIR": os.path.join(tmp, "triton")}):
            yield
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class CompileSnapshot:
    compile_time_s: float = 0.0
    graph_breaks: int = 0
    recompiles: int = 0
    compiled_frames: int = 0
    # (reason, times seen so far): a reason already seen by an earlier trial of this process
    # (an in-process re-run) counts again when its count grows
    break_reasons: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    cache_hits: int = 0  # inductor FX-graph and AOTAutograd cache hits
    cache_misses: int = 0

    def minus(self, other: CompileSnapshot) -> CompileSnapshot:
        before = dict(other.break_reasons)
        return CompileSnapshot(
            self.compile_time_s - other.compile_time_s,
            self.graph_breaks - other.graph_breaks,
            self.recompiles - other.recompiles,
            self.compiled_frames - other.compiled_frames,
            tuple((r, n - before.get(r, 0)) for r, n in self.break_reasons
                  if n > before.get(r, 0)),
            self.cache_hits - other.cache_hits,
            self.cache_misses - other.cache_misses,
        )


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:160]


def _reason_counts(breaks: Any) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for k, n in breaks.items():
        line = _first_line(k)
        counts[line] = counts.get(line, 0) + int(n)
    return tuple(sorted(counts.items()))


def snapshot() -> CompileSnapshot:
    """The counters so far in this process (all zero when dynamo was never imported)."""
    if "torch._dynamo" not in sys.modules:
        return CompileSnapshot()
    from torch._dynamo import utils as dyn

    counters: Any = dyn.counters
    breaks = counters.get("graph_break", {})
    metrics = dyn.get_compilation_metrics() if hasattr(dyn, "get_compilation_metrics") else []
    recompiles = sum(1 for m in metrics if getattr(m, "recompile_reason", None))
    spent = dyn.calculate_time_spent() if hasattr(dyn, "calculate_time_spent") else {}
    return CompileSnapshot(
        compile_time_s=float(spent.get("total_wall_time", 0.0)),
        graph_breaks=int(sum(breaks.values())),
        recompiles=recompiles,
        compiled_frames=int(counters.get("frames", {}).get("ok", 0)),
        break_reasons=_reason_counts(breaks),
        cache_hits=int(counters.get("inductor", {}).get("fxgraph_cache_hit", 0)
                       + counters.get("aot_autograd", {}).get("autograd_cache_hit", 0)),
        cache_misses=int(counters.get("inductor", {}).get("fxgraph_cache_miss", 0)
                         + counters.get("aot_autograd", {}).get("autograd_cache_miss", 0)),
    )


def activity() -> tuple[float, ...]:
    """A cheap fingerprint of compile work so far (frames traced, AOTAutograd graphs, compile
    wall time): when it moves across a step, that step compiled or recompiled, and the trial
    tags it ``compile`` (excluded from the steady state). Empty when dynamo was never imported."""
    if "torch._dynamo" not in sys.modules:
        return ()
    from torch._dynamo import utils as dyn

    counters: Any = dyn.counters
    spent = dyn.calculate_time_spent() if hasattr(dyn, "calculate_time_spent") else {}
    return (float(counters.get("frames", {}).get("total", 0)),
            float(counters.get("aot_autograd", {}).get("total", 0)),
            float(spent.get("total_wall_time", 0.0)))


def trial_fields(start: CompileSnapshot, after_warmup: CompileSnapshot,
                 end: CompileSnapshot) -> dict[str, Any]:
    """Fields for trial.json: totals over the trial, and what leaked into the measured steps."""
    total = end.minus(start)
    measured = end.minus(after_warmup)
    return {
        "compile_time_s": total.compile_time_s,
        "compile_time_in_measured_s": measured.compile_time_s,
        "graph_breaks": total.graph_breaks,
        "graph_break_reasons": [r for r, _ in total.break_reasons][:5],
        "recompiles": total.recompiles,
        "recompiles_in_measured": measured.recompiles,
        "compiled_frames": total.compiled_frames,
        "compile_cache_hits": total.cache_hits,
        "compile_cache_misses": total.cache_misses,
    }
