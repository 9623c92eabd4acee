"""torch.compile bookkeeping for a trial: compile time, graph breaks, recompiles.

Read from torch._dynamo's own counters, and only when torch._dynamo is already imported (an
eager trial never pays for importing it; nothing was compiled then, so every figure is 0).
``compile_time_s`` is torch's ``total_wall_time``: whole-frame compile plus backward compile
(dynamo tracing, AOTAutograd, inductor codegen and autotuning).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.core.envvars import env_overrides
from orchestrator.core.records import CACHES
from orchestrator.core.trial_record import CompileFields  # noqa: F401  (moved to core; importers follow)

# protocol.compile_cache: arm = each arm its own cache folder under the run directory, warm
# across that arm's trials (its first trial fills it); cold = every trial compiles with a fresh,
# empty inductor/Triton cache (compile_time_s is then what a first run on a machine pays); warm =
# the user's own caches, shared by every arm (compile_time_s is what a rerun pays, and depends
# on what ran before on this machine); auto = arm, or cold for a sweep over compile settings
CACHE_MODES = ("auto", "arm", "cold", "warm")
# the variables that name torch's compile caches; protocol.cache_env adds a command's own
CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
CACHES_DIR = CACHES  # in a run directory: one folder per arm under compile_cache=arm
# a trial's record: whether its arm's caches held anything when it started (compile_cache=arm)
FILLS = "fills"  # empty: this trial compiled into them (the arm's first trial, or a re-run)
REUSES = "reuses"  # something compiled by an earlier trial of the arm was there


def resolve_mode(mode: str, sweeps_compile: bool) -> str:
    """``auto`` made concrete: ``cold`` for a sweep over compile settings (its compile times
    are compared), else ``arm``; any other mode is itself."""
    if mode in CACHE_MODES[1:]:  # arm, cold, warm: as asked
        return mode
    return "cold" if sweeps_compile else "arm"


def cache_env(root: str | os.PathLike[str], extra: tuple[str, ...] | list[str] = ()
              ) -> dict[str, str]:
    """The variables that point torch's compile caches (and ``extra``'s) at ``root``:
    inductor's at ``root`` itself, Triton's at ``root/triton`` (torch's own layout), every other
    variable at a folder of its own."""
    base = os.fspath(root)
    env = {"TORCHINDUCTOR_CACHE_DIR": base, "TRITON_CACHE_DIR": os.path.join(base, "triton")}
    for name in extra:
        env.setdefault(name, os.path.join(base, name.lower()))
    return env


def arm_cache_root(run_dir: str | os.PathLike[str], arm_id: str) -> str:
    """compile_cache=arm with protocol.arm_cache_store off: the arm's own cache folder in the
    run directory (scratch, removed with the campaign's end)."""
    return os.path.join(os.fspath(run_dir), CACHES_DIR, arm_id)


# compile_cache=arm, protocol.arm_cache_store on (the default): each arm's folder lives in the
# user's compile store, named by the arm's identity (:func:`arm_key`), and a later campaign that
# runs the same arm finds it warm. A folder's use is noted beside it (``<key>.json``: never inside,
# where it would read as a compiled artifact), for the least-recently-used eviction.
STORE_VAR = "ORCH_COMPILE_CACHE_DIR"


def store_dir() -> Path:
    """The user's compile store (``$ORCH_COMPILE_CACHE_DIR``, else
    ``~/.cache/orchestrator/compile``), outside every run directory."""
    # start-up cost: every worker imports this module, and only the campaign needs the store
    from orchestrator.core.sanitize import user_store

    return user_store("compile", STORE_VAR)


def arm_key(identity: Mapping[str, object]) -> str:
    """The folder name of an arm's caches in the store: a hash of what it compiles from (its
    id, resolved workload, environment switches, code revision, device and torch's version:
    spec.jobs.arm_identity); no host or user name in it."""
    blob = json.dumps(identity, sort_keys=True, default=str)
    return "arm-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def stored_arm_root(store: Path, key: str) -> str:
    return os.fspath(store / key)


def note_use(store: Path, key: str, about: Mapping[str, object]) -> None:
    """Write ``<key>.json`` beside the arm's folder: when a campaign last used it, and which arm
    it is (its id, label, whether it is a baseline), for eviction and for a reader."""
    store.mkdir(parents=True, exist_ok=True)
    doc = {**about, "used_at": time.time()}
    tmp = store / f".{key}.json.{os.getpid()}"
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, store / f"{key}.json")


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def evict(store: Path, max_bytes: int, keep: set[str]) -> list[str]:
    """Remove the least recently used arm folders (their ``<key>.json``'s ``used_at``; a
    folder without one counts as oldest) until the store holds at most ``max_bytes``; never
    one of ``keep`` (the arms of the campaign that is ending). Returns the keys removed."""
    if not store.is_dir():
        return []
    folders = [d for d in store.iterdir() if d.is_dir() and d.name.startswith("arm-")]
    sizes = {d.name: folder_bytes(d) for d in folders}
    total = sum(sizes.values())
    if total <= max_bytes:
        return []

    def used(d: Path) -> float:
        try:
            return float(json.loads((store / f"{d.name}.json").read_text(encoding="utf-8"))
                         .get("used_at") or 0.0)
        except (OSError, ValueError, AttributeError):
            return 0.0

    removed = []
    for d in sorted(folders, key=used):
        if total <= max_bytes:
            break
        if d.name in keep:
            continue
        shutil.rmtree(d, ignore_errors=True)
        (store / f"{d.name}.json").unlink(missing_ok=True)
        total -= sizes[d.name]
        removed.append(d.name)
    return removed


def fill_state(env: dict[str, str], names: tuple[str, ...] | list[str] = ()) -> str:
    """:data:`REUSES` when one of the cache folders ``env`` names (CACHE_VARS and ``names``)
    already holds a file, else :data:`FILLS`."""
    for name in (*CACHE_VARS, *names):
        folder = env.get(name)
        if folder and os.path.isdir(folder) and _holds_a_file(folder):
            return REUSES
    return FILLS


def _holds_a_file(folder: str) -> bool:
    for _root, _dirs, files in os.walk(folder):
        if files:
            return True
    return False


@contextlib.contextmanager
def cache_scope(mode: str, extra: tuple[str, ...] | list[str] = ()) -> Iterator[None]:
    """For ``cold``: point torch's compile caches (and the variables ``extra`` names) at a
    fresh temporary directory for the trial, then restore the variables and delete it. Nothing
    to do otherwise (``arm``: the trial's environment already names its arm's folders)."""
    if mode != "cold":
        yield
        return
    tmp = tempfile.mkdtemp(prefix="orch-compile-cache-")
    try:
        with env_overrides(cache_env(tmp, extra)):
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
                 end: CompileSnapshot) -> CompileFields:
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
