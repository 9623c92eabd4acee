"""The timing protocol's machinery, shared by every way a trial measures its arms in this
process (orchestrator.worker.pairing): the stepper that runs and times one training step the
orchestrator's way, the trainer built once per process, and the trial record of one arm's
steps (steps.csv, FLOPs and utilization, memory, the recipe's facts).

Recipes never time themselves: warm-up steps are run and excluded, the device is synchronised
at every step boundary (on a GPU, measured steps run in blocks timed by device events, one
synchronisation at each block's end, each block timed by the clock that bounds its steps:
orchestrator.platform.block_timing), each step's time, data wait, loss and tokens are kept
raw in steps.csv so trimming can be redone in analysis.
"""

from __future__ import annotations

import math
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.core import reference as refmod
from orchestrator.core.errors import BackendUnavailable
from orchestrator.core.records import Status
from orchestrator.core.results import excluded_tags, trial_record, write_csv
from orchestrator.core.steady import WarmupPolicy, warmup_complete
from orchestrator.platform import compile_stats
from orchestrator.platform import device as devmod
from orchestrator.platform import distributed as distmod
from orchestrator.platform.block_timing import DEVICE_EVENTS, HOST_CLOCK, BlockTimer
from orchestrator.platform.flops import TrialFlops, trial_flops
from orchestrator.platform.interference import CpuWindow, CpuWindowFigures
from orchestrator.spec.jobs import TrialSpec

# the most measured steps protocol.measured_min_s may ask for
MAX_MEASURED_STEPS = 2000


class StepFields(TypedDict):
    """An in-process trial's measured-window fields of its trial.json (median and spread, the
    clock, the speed reference, the warm-up and the excluded steps)."""

    step_time_median_s: float
    step_time_mad_s: float
    clock: str
    measured_steps_run: int
    speed_reference: bool
    speed_reference_why: str
    reference_median_s: float | None
    warmup_policy: str
    warmup_steps_used: int
    warmup_settled: bool
    excluded_steps: int
    excluded_tags: dict[str, int]
    compile_steps: int


def one_line(exc: BaseException) -> str:
    """The exception in one line; one without a message (a bare ``assert``) says where it
    was raised: file, line, function and the line's source."""
    text = str(exc).strip().splitlines()
    if text:
        return f"{type(exc).__name__}: {text[0]}"
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    f = frames[-1]
    return (f"{type(exc).__name__} at {Path(f.filename).name}:{f.lineno} in {f.name}"
            + (f": {f.line.strip()}" if f.line else ""))


def compile_hint(exc: BaseException, error: str) -> str:
    """torch.compile(fullgraph=True) raises dynamo's Unsupported at a graph break: add its
    explanation line and the fix to the one-line error."""
    if type(exc).__name__ != "Unsupported" or not type(exc).__module__.startswith("torch._dynamo"):
        return error
    why = next((ln.strip() for ln in str(exc).splitlines() if ln.strip().startswith("Explanation:")), "")
    return (f"{error} ({why + '; ' if why else ''}fullgraph=True makes a graph break an error: "
            "remove the break, or compile with fullgraph off)")


def _mad(values: list[float]) -> float:
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values)


class Stepper:
    """Runs and times training steps the orchestrator's way: the host-speed reference before
    the clock starts, the device synchronised at the step boundary (:meth:`step`), or a block
    of steps timed by device events with one synchronisation at its end (:meth:`block`), the
    recipe's tags and any compile activity noted, and (distributed) the slowest rank's time and
    every rank's tags agreed on after the clock stopped."""

    def __init__(self, spec: TrialSpec, worker: Any, trainer: Any, batches: Any) -> None:
        dev = worker.device
        self.dev, self.trainer, self.batches = dev, trainer, batches
        self.clock = time.perf_counter
        if spec.clock == "cpu":
            if dev.kind != "cpu":
                raise BackendUnavailable(
                    f"protocol.clock=cpu times host CPU work only, not {dev.kind}")
            self.clock = time.process_time
        torch_mod = None if worker.host_only else sys.modules.get("torch")
        pool = torch_mod.get_num_threads() if torch_mod is not None else 1
        self.ref_on, self.ref_why = refmod.resolve(spec.speed_reference, dev.kind,
                                                   worker.world_size, pool)
        self.ref = refmod.host_reference(self.clock) if self.ref_on else None
        self.agree = (distmod.StepAgreement(dev.torch_device) if worker.group is not None
                      else None)
        self.compiled_before = compile_stats.activity()
        # GPU: the device-side span of train_step (Event timing), beside the host's times
        self.timer = devmod.device_timer(dev)
        # GPU: measured steps in blocks timed by events (no host sync inside a block)
        backend = devmod.event_backend(dev)
        # where blocks is None: why the host clock times every step
        self.host_why = (f"no device events on {dev.kind}" if backend is None
                         else "protocol.clock=cpu" if spec.clock == "cpu"
                         else "the host-speed reference runs before every step" if self.ref_on
                         else "")
        self.blocks = (BlockTimer(backend, lambda: devmod.synchronize(dev), lambda: self.clock())
                       if not self.host_why else None)
        self.block_count = 0
        self.launched = 0  # steps launched (a block's rows are kept at its end)
        self.rows: list[dict[str, Any]] = []
        self.losses: list[Any] = []
        self.first_step_at: float | None = None
        devmod.synchronize(dev)

    def step(self, **fields: Any) -> tuple[float, list[str], dict[str, Any]]:
        """(the time decisions use, the agreed tags, the row) of one step, the device
        synchronised at its end; the caller sets the row's phase. ``fields`` go into the row
        (e.g. the arm and block)."""
        ref_s = self.ref() if self.ref is not None else None  # outside the timed window
        timer = self.timer
        t0, t1, t_launched, batch, loss = self._launch(timer)
        devmod.synchronize(self.dev)
        t2 = self.clock()
        tags = self._tags()
        decide_s, tags = self.agree(t2 - t0, tags) if self.agree is not None else (t2 - t0, tags)
        row = self._row(t2 - t0, t1 - t0, batch, tags, fields)
        if ref_s is not None:
            row["reference_s"] = ref_s
        if timer is not None:  # read after the clock stopped (the device is synchronised)
            row["host_launch_s"], row["device_time_s"] = t_launched - t1, timer.elapsed_s()
        self.rows.append(row)
        self.losses.append(loss)
        return decide_s, tags, row

    def block(self, n: int, **fields: Any) -> list[tuple[float, list[str], dict[str, Any]]]:
        """:meth:`step` for ``n`` steps. With device events (a GPU) they run as one block: an
        event at each step boundary, no synchronisation until the block's end, each step timed
        by the clock that bounds the block (orchestrator.platform.block_timing), the host's
        time kept beside it (``host_step_s``), the ranks' agreement taken after the end."""
        bt = self.blocks
        if bt is None:  # the CPU: synchronised step by step, as ever
            return [self.step(**fields) for _ in range(n)]
        bt.begin()
        ran = []
        for _ in range(n):
            t0, t1, t_launched, batch, loss = self._launch(None)
            bt.mark()
            ran.append((t1 - t0, t_launched - t1, batch, loss, self._tags()))
        times = bt.end()
        own, word = times.step_s, times.timed_by
        agreed = (self.agree.many(own, [r[4] for r in ran]) if self.agree is not None
                  else [(t, r[4]) for t, r in zip(own, ran)])
        out = []
        for j, ((wait_s, launch_s, batch, loss, _), (decide_s, tags)) in enumerate(
                zip(ran, agreed)):
            row = self._row(own[j], wait_s, batch, tags, fields)
            row.update(host_step_s=times.host_step_s[j], host_launch_s=launch_s,
                       device_time_s=times.device_step_s[j], timed_by=word,
                       device_block=self.block_count)
            self.rows.append(row)
            self.losses.append(loss)
            out.append((decide_s, tags, row))
        self.block_count += 1
        return out

    def _launch(self, timer: Any) -> tuple[float, float, float, Any, Any]:
        """One step's batch and launch, no synchronisation: (start, batch in hand, launch
        returned, the batch, the loss)."""
        clock, first = self.clock, self.launched == 0
        self.launched += 1
        t0 = clock()
        if self.first_step_at is None:
            self.first_step_at = time.time()
        batch = next(self.batches)
        t1 = clock()
        if timer is not None:
            timer.start()
        loss = self.trainer.train_step(batch)
        if first:  # e.g. workload.model.compile.visit_buckets: the other buckets' shapes
            self.trainer.visit_shapes()
        if timer is not None:
            timer.stop()
        t_launched = clock()  # the host is done launching; the device may still run
        return t0, t1, t_launched, batch, loss

    def _tags(self) -> list[str]:
        """The step's tags, read after its clock stopped: the recipe's, and ``compile``."""
        tags = list(self.trainer.step_tags())
        compiled_now = compile_stats.activity()  # this step compiled or recompiled: not steady
        if compiled_now != self.compiled_before:
            self.compiled_before = compiled_now
            if "compile" not in tags:
                tags.append("compile")
        return tags

    def _row(self, step_s: float, wait_s: float, batch: Any, tags: list[str],
             fields: dict[str, Any]) -> dict[str, Any]:
        i = len(self.rows)
        return {"step": i, "phase": "", "step_time_s": step_s, "data_wait_s": wait_s,
                "tokens": self.trainer.tokens_per_step, "samples": self.trainer.samples_per_step,
                "batch_index": getattr(batch, "index", i), "tags": ";".join(tags), **fields}

    def finish(self, ctx: Any) -> distmod.DistSummary:
        """After the last timed step: losses read, and (distributed) every rank's step times
        gathered into rank 0's rows (the slowest rank's time per step); the distributed
        summary fields."""
        for row, loss in zip(self.rows, self.losses):  # read outside the timed window
            row["loss"] = float(loss.float().item()) if hasattr(loss, "item") else float(loss)
        if ctx is None:
            return {}
        rows = self.rows
        per_rank = distmod.gather_step_times(ctx, [r["step_time_s"] for r in rows])
        nodes = distmod.gather_nodes(ctx)
        if per_rank is None or nodes is None:
            return {}
        slowest, skew, who = distmod.combine(per_rank)  # rank 0
        across = distmod.node_skew(per_rank, nodes)
        for i, row in enumerate(rows):
            for r, times in enumerate(per_rank):
                row[f"step_time_rank{r}_s"] = times[i]
            row["step_time_s"], row["rank_skew_s"] = slowest[i], skew[i]
            row["slowest_rank"] = who[i]
            if len(set(nodes)) > 1:
                row["node_skew_s"] = across[i]
        measured_idx = [i for i, r in enumerate(rows) if r["phase"] == "measured"]
        return distmod.summary(ctx, [skew[i] for i in measured_idx],
                               [who[i] for i in measured_idx],
                               self.agree.cost_s if self.agree is not None else None,
                               nodes, [across[i] for i in measured_idx])


def window_block(st: Stepper, measured_n: int, measured_s: float, steps: int, min_s: float,
                 cap: int) -> int:
    """How many steps the next :meth:`Stepper.block` of a one-arm trial's measured window
    runs: one where steps are synchronised one by one (the CPU: the window ends on the very
    step that fills it); with device events, the rest of ``steps``, then the steps the time
    floor ``min_s`` still needs at the pace so far (at most ``cap`` in all)."""
    if st.blocks is None:
        return 1
    if measured_n < steps:
        return steps - measured_n
    pace = measured_s / measured_n if measured_n else 0.0
    need = math.ceil((min_s - measured_s) / pace) if pace > 0 else 1
    return max(1, min(need, cap - measured_n))


def run_warmup(step: Callable[[], tuple[float, list[str], dict[str, Any]]],
               check: Callable[[], None], policy: WarmupPolicy) -> tuple[list[float], bool]:
    """Warm-up steps (``step``: :meth:`Stepper.step` with the caller's fields) until the
    policy has seen enough: a step the recipe tags is excluded, the others' times feed the
    rule; ``check`` before each (a bound on the steps run). (their times, settled)."""
    times: list[float] = []
    done, settled = warmup_complete(times, policy)
    while not done:
        check()
        decide_s, tags, row = step()
        if tags:
            row["phase"] = "excluded"
        else:
            row["phase"] = "warmup"
            times.append(decide_s)
            done, settled = warmup_complete(times, policy)
    return times, settled


def build_trainer(spec: TrialSpec, worker: Any) -> tuple[Any, Any, float]:
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:  # inline trials share a process: compile cold, as a fresh one does
        dynamo.reset()
    build_t0 = time.perf_counter()
    trainer = worker.trainer(spec.bucket)
    build_s = time.perf_counter() - build_t0
    devmod.reset_peak_memory(worker.device)
    return trainer, trainer.batches(), build_s


def fold_memory(acc: dict[str, int], figures: dict[str, int] | None) -> None:
    """One block's allocator figures into its arm's: the peaks' maximum, the latest reserved."""
    for k, v in (figures or {}).items():
        acc[k] = v if k == "reserved_mem_bytes" else max(acc.get(k, 0), v)


def _memory_fields(dev: Any, memory: dict[str, int] | None,
                   paired: bool) -> tuple[int, str, dict[str, int]]:
    """(peak bytes, its source, the other allocator figures) of a record: the arm's own figures
    in a paired process (``memory``), else the process's since the trainer was built. On the
    CPU the peak is the process's peak RSS, which cannot be reset per arm."""
    figures = memory if memory else devmod.memory_figures(dev)
    peak, source = devmod.peak_memory_bytes(dev)
    if figures and "peak_mem_bytes" in figures:
        peak = figures["peak_mem_bytes"]
        source = f"{dev.kind} allocator peak" + (" (this arm's blocks)" if paired else "")
    elif paired:
        source += " (the paired process, all arms)"
    return peak, source, {k: v for k, v in (figures or {}).items() if k != "peak_mem_bytes"}


def interference_fields(window: CpuWindow, world: int) -> CpuWindowFigures:
    if world <= 1:
        return window.stop()
    return {"others_cpu_s": None, "others_cores": None,
            "note": "not measured for multi-rank trials (the other ranks are not others)"}


@dataclass
class Built:
    """One process's trainer and what built it: shared by every arm the process measures."""

    spec: TrialSpec
    worker: Any
    st: Stepper
    trainer: Any
    batches: Any
    launch_t0: float | None
    build_s: float
    policy: Any


@dataclass
class ArmSteps:
    """One arm's measurement in that process: its steps and what was sampled around them."""

    rows: list[dict[str, Any]]
    warm_times: list[float]
    settled: bool
    compile_fields: compile_stats.CompileFields
    interference: CpuWindowFigures
    dist_fields: distmod.DistSummary
    close: bool  # the batch stream is done with (stops DataLoader workers)
    trial_dir: str | None = None
    memory: dict[str, int] | None = None  # this arm's allocator figures in a paired process


def measured_record(b: Built, base: TrialBase, arm: ArmSteps, **more: Any) -> TrialRecordDict:
    """The trial record of ``arm.rows`` (one arm's steps; all of them for a one-arm trial),
    after the timed steps: steps.csv, FLOPs and utilization (an extra counted step), the
    recipe's extra facts."""
    spec, worker, st, trainer = b.spec, b.worker, b.st, b.trainer
    dev, ctx = worker.device, worker.group
    rows = arm.rows
    peak, peak_source, mem_more = _memory_fields(dev, arm.memory, "pairing" in more)
    measured = [r["step_time_s"] for r in rows if r["phase"] == "measured"]
    mem_more = {**mem_more, **_device_time_fields(rows), **clock_fields(st, rows)}
    median = statistics.median(measured)
    # one-off cost: warm-up steps and the steps that compiled (excluded from the steady state)
    warmup = [r["step_time_s"] for r in rows if r["phase"] == "warmup"
              or (r["phase"] == "excluded" and "compile" in r["tags"].split(";"))]
    writer = ctx is None or ctx.is_writer  # other ranks' times live in rank 0's steps.csv
    if writer:
        write_csv(Path(arm.trial_dir or spec.trial_dir) / "steps.csv", rows)
    flops = trainer.useful_flops_per_step()
    utilization = _utilization(b, flops, median)  # an extra counted step
    stream_close = getattr(b.batches, "close", None)
    if arm.close and stream_close is not None:  # after the FLOP count's extra step
        stream_close()
    extra = _extra_facts(trainer)
    if not writer:  # every rank ran the counted step above (it may hold collectives)
        return trial_record(**base, status=Status.OK)
    nonfinite = [r["step"] for r in rows if r["loss"] != r["loss"] or abs(r["loss"]) == float("inf")]
    torch_mod = sys.modules.get("torch")  # recorded only when the recipe really used torch
    first = st.first_step_at
    return trial_record(
        **base,
        status=Status.OK,
        device={"kind": dev.kind, "name": dev.name, "count": dev.count},
        torch_version=getattr(torch_mod, "__version__", None),
        python_version=platform.python_version(),
        startup_to_first_step_s=(first - b.launch_t0) if b.launch_t0 and first else None,
        trainer_build_s=b.build_s,
        **_step_fields(b, arm, measured, median),
        tokens_per_step=trainer.tokens_per_step,
        tokens_per_s=trainer.tokens_per_step / median,
        peak_mem_bytes=peak,
        peak_mem_source=peak_source,
        **mem_more,
        useful_flops_per_step=flops,
        final_loss=rows[-1]["loss"],
        nonfinite_loss_steps=nonfinite,
        env=spec.shown_env(),
        **utilization,
        torch_threads=torch_mod.get_num_threads() if torch_mod is not None else None,
        # one-off cost of the warm-up steps above steady state (compile, autotune, workers ...)
        warmup_excess_s=sum(warmup) - len(warmup) * median,
        data_wait_share=sum(r["data_wait_s"] for r in rows if r["phase"] == "measured")
        / sum(measured),
        **arm.compile_fields,
        interference=arm.interference,
        **arm.dist_fields,
        **extra,
        **more,
    )


def _step_fields(b: Built, arm: ArmSteps, measured: list[float], median: float) -> StepFields:
    """The measured window: its median and spread, the clock, the speed reference, the
    warm-up and the excluded steps."""
    rows, st = arm.rows, b.st
    return {
        "step_time_median_s": median, "step_time_mad_s": _mad(measured), "clock": b.spec.clock,
        "measured_steps_run": len(measured), "speed_reference": st.ref_on,
        "speed_reference_why": st.ref_why,
        "reference_median_s": (statistics.median(r["reference_s"] for r in rows
                                                 if r["phase"] == "measured")
                               if st.ref_on else None),
        "warmup_policy": b.policy.policy, "warmup_steps_used": len(arm.warm_times),
        "warmup_settled": arm.settled,
        "excluded_steps": sum(1 for r in rows if r["phase"] == "excluded"),
        "excluded_tags": excluded_tags(rows),
        "compile_steps": sum(1 for r in rows if "compile" in r["tags"].split(";")),
    }


def _device_time_fields(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """GPU: the device-side span and the host's launch time, beside the wall time."""
    timed = [r for r in rows if r["phase"] == "measured" and "device_time_s" in r]
    if not timed:
        return {}
    return {"device_time_median_s": statistics.median(r["device_time_s"] for r in timed),
            "host_launch_median_s": statistics.median(r["host_launch_s"] for r in timed)}


def clock_fields(st: Stepper, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Which clock timed the measured steps, why, and how the two clocks agreed: the device's
    events where the device was busy for a whole block, the host's clock where the host was
    the bottleneck (per block; the trial's word is the one most of its blocks took), or the
    host's clock where there are no device events (the CPU)."""
    timed = [r for r in rows if r["phase"] == "measured" and "timed_by" in r]
    if not timed:
        return {"timed_by": HOST_CLOCK, "timed_by_why": st.host_why,
                "device_host_agreement": None, "device_block_steps": None}
    blocks: dict[int, str] = {r["device_block"]: r["timed_by"] for r in timed}
    sizes = [sum(1 for r in rows if r.get("device_block") == b) for b in blocks]
    by_device = sum(1 for w in blocks.values() if w == DEVICE_EVENTS)
    word = DEVICE_EVENTS if 2 * by_device >= len(blocks) else HOST_CLOCK
    device = statistics.median(r["device_time_s"] for r in timed)
    host = statistics.median(r["host_step_s"] for r in timed)
    ms = (f"device {device * 1e3:.3g} ms per step, host {host * 1e3:.3g} ms to launch one "
          f"(medians of {len(timed)} measured steps)")
    why = (f"{by_device} of {len(blocks)} blocks device-bound: {ms}" if 0 < by_device < len(blocks)
           else f"{'device' if by_device else 'host'}-bound: {ms}")
    return {"timed_by": word, "timed_by_why": why,
            "device_host_agreement": device / host if host > 0 else None,
            "device_block_steps": max(sizes), "device_blocks": len(blocks)}


def _utilization(b: Built, flops: float | None, median: float) -> TrialFlops:
    """FLOPs and utilization after the timed steps (an extra counted step); a host-only
    (numpy) recipe: torch's FLOP counter and peak table do not apply, torch stays out."""
    if b.worker.host_only:
        return {"flops": {"useful_per_step": flops,
                          "useful_definition": b.trainer.useful_flops_definition,
                          "executed_per_step": None,
                          "executed_note": "not counted: host-only recipe (no torch)"},
                "matmul_dtype": None, "matmul_dtype_why": "host-only recipe (no torch)",
                "peaks": [], "utilization": []}
    return trial_flops(b.trainer, b.batches, b.worker.device, b.spec.hardware,
                       b.worker.workload.precision, median)


def _extra_facts(trainer: Any) -> dict[str, Any]:
    """Recipe-specific data for the report (never timings), e.g. muon_tp's auto choices, and
    what the step ran where the recipe resolves it at run time."""
    extra = trainer.extra_record()
    executes = trainer.executes()
    if executes is not None:
        extra = {**extra, "executes": executes, "executes_covers": list(trainer.executes_covers)}
    return dict(extra)


