"""The timing protocol's machinery, shared by every way a trial measures its arms in this
process (orchestrator.worker.pairing): the stepper that runs and times one training step the
orchestrator's way, the trainer built once per process, and the trial record of one arm's
steps (steps.csv, FLOPs and utilization, memory, the recipe's facts).

Recipes never time themselves: warm-up steps are run and excluded, the device is synchronised
at every step boundary, each step's wall time, data wait, loss and tokens are kept raw in
steps.csv so trimming can be redone in analysis.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core import reference as refmod
from orchestrator.core.errors import BackendUnavailable
from orchestrator.core.records import Status
from orchestrator.core.results import excluded_tags, trial_record, write_csv
from orchestrator.platform import compile_stats
from orchestrator.platform import device as devmod
from orchestrator.platform import distributed as distmod
from orchestrator.platform.flops import trial_flops
from orchestrator.platform.interference import CpuWindow
from orchestrator.spec.jobs import TrialSpec

# the most measured steps protocol.measured_min_s may ask for
MAX_MEASURED_STEPS = 2000


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
    """Runs and times one training step at a time, the orchestrator's way: the host-speed
    reference before the clock starts, the device synchronised at the step boundary, the
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
        self.rows: list[dict[str, Any]] = []
        self.losses: list[Any] = []
        self.first_step_at: float | None = None
        devmod.synchronize(dev)

    def step(self, **fields: Any) -> tuple[float, list[str], dict[str, Any]]:
        """(the time decisions use, the agreed tags, the row) of one step; the caller sets the
        row's phase. ``fields`` go into the row (e.g. the arm and block)."""
        clock, i = self.clock, len(self.rows)
        ref_s = self.ref() if self.ref is not None else None  # outside the timed window
        t0 = clock()
        if self.first_step_at is None:
            self.first_step_at = time.time()
        batch = next(self.batches)
        t1 = clock()
        timer = self.timer
        if timer is not None:
            timer.start()
        loss = self.trainer.train_step(batch)
        if i == 0:  # e.g. workload.model.compile.visit_buckets: the other buckets' shapes
            self.trainer.visit_shapes()
        if timer is not None:
            timer.stop()
            t_launched = clock()  # the host is done launching; the device may still run
        devmod.synchronize(self.dev)
        t2 = clock()
        tags = list(self.trainer.step_tags())
        compiled_now = compile_stats.activity()  # this step compiled or recompiled: not steady
        if compiled_now != self.compiled_before:
            self.compiled_before = compiled_now
            if "compile" not in tags:
                tags.append("compile")
        decide_s, tags = self.agree(t2 - t0, tags) if self.agree is not None else (t2 - t0, tags)
        row = {"step": i, "phase": "", "step_time_s": t2 - t0, "data_wait_s": t1 - t0,
               "tokens": self.trainer.tokens_per_step, "samples": self.trainer.samples_per_step,
               "batch_index": getattr(batch, "index", i), "tags": ";".join(tags), **fields,
               **({"reference_s": ref_s} if self.ref is not None else {})}
        if timer is not None:  # read after the clock stopped (the device is synchronised)
            row["host_launch_s"], row["device_time_s"] = t_launched - t1, timer.elapsed_s()
        self.rows.append(row)
        self.losses.append(loss)
        return decide_s, tags, row

    def finish(self, ctx: Any) -> dict[str, Any]:
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


def interference_fields(window: CpuWindow, world: int) -> dict[str, Any]:
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
    compile_fields: dict[str, Any]
    interference: dict[str, Any]
    dist_fields: dict[str, Any]
    close: bool  # the batch stream is done with (stops DataLoader workers)
    trial_dir: str | None = None
    memory: dict[str, int] | None = None  # this arm's allocator figures in a paired process


def measured_record(b: Built, base: dict[str, Any], arm: ArmSteps, **more: Any) -> dict[str, Any]:
    """The trial record of ``arm.rows`` (one arm's steps; all of them for a one-arm trial),
    after the timed steps: steps.csv, FLOPs and utilization (an extra counted step), the
    recipe's extra facts."""
    spec, worker, st, trainer = b.spec, b.worker, b.st, b.trainer
    dev, ctx = worker.device, worker.group
    rows = arm.rows
    peak, peak_source, mem_more = _memory_fields(dev, arm.memory, "pairing" in more)
    measured = [r["step_time_s"] for r in rows if r["phase"] == "measured"]
    mem_more = {**mem_more, **_device_time_fields(rows)}
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


def _step_fields(b: Built, arm: ArmSteps, measured: list[float], median: float) -> dict[str, Any]:
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


def _utilization(b: Built, flops: float | None, median: float) -> dict[str, Any]:
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


