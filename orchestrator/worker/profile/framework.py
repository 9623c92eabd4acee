"""The framework layer: a profiled trial under torch.profiler, and its summary.

Runs in the trial's own process (``python -m orchestrator.worker.trial SPEC.json`` with
``kind == "profile"``), like a timed trial: the same recipe, bucket and warm-up, then a
``torch.profiler.schedule`` of wait, warm-up and active steps. The gzipped Chrome trace and a
JSON summary go to ``profiles/framework/`` of the run directory. Step times taken here are
profiled times: they are written to ``profile_steps.csv``, never to ``steps.csv``, and never
enter timing statistics.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.platform import device as devmod
from orchestrator.core.errors import BackendUnavailable
from orchestrator.platform.flops import (
    DEFINITIONS,
    PROFILER,
    USEFUL,
    ProfiledFlopsDict,
    profile_trainer_flops,
)
from orchestrator.analysis.profile.trace import events_frame, load_trace, save_trace
from orchestrator.core.results import SCHEMA_VERSION, atomic_write_json, trial_record, write_csv, Status
from orchestrator.worker.bootstrap import start_worker

# the summary's record types; mypy takes no keywords in a TypedDict's update(), so that call
# below says type: ignore[call-arg]
if TYPE_CHECKING:  # start-up cost: pandas is imported when a trace is summarised
    from orchestrator.analysis.profile.trace_stats import FlopsSummary, FrameworkSummary

log = logging.getLogger(__name__)


class _StepRowBase(TypedDict):
    """The columns every row of ``profile_steps.csv`` has."""

    step: int
    profiler: str  # wait | warmup | active
    step_time_s: float


class ProfileStepRow(_StepRowBase, total=False):
    """A row of a profiled trial's ``profile_steps.csv`` (``rank``: a distributed trial's)."""

    rank: int

# the named phases must cover at least 1 - this share of the profiled step
PHASE_TOLERANCE = 0.10
TOP_OPS = 15


def trace_name(trial_id: str, rank: int = 0) -> str:
    """Rank 0's trace (or a single-process trial's) keeps the plain name; rank r > 0 of a
    distributed trial gets ``.rank<r>`` so every rank's trace is kept."""
    return f"{trial_id}.pt.trace.json.gz" if rank == 0 else f"{trial_id}.rank{rank}.pt.trace.json.gz"


def run_framework(spec: Any, base: TrialBase) -> TrialRecordDict:
    """Run the profiled trial; returns its record (the caller writes trial.json)."""
    import torch

    p = spec.profile
    out_dir = Path(p["out_dir"])
    # one device per rank and the process group, as in a timed trial
    worker = start_worker(spec.workload, spec.device)
    dev, ctx, rank = worker.device, worker.group, worker.rank
    if dev is None:
        raise BackendUnavailable(f"recipe {worker.workload.recipe!r} runs an external command: "
                                 "torch.profiler has no trainer in this process to profile")
    trainer = worker.trainer(spec.bucket)
    batches = trainer.batches()
    for _ in range(spec.warmup_steps):  # the protocol's warm-up, outside the profiler
        trainer.train_step(next(batches))
    devmod.synchronize(dev)
    tmp = out_dir / f".{spec.trial_id}.rank{rank}.raw.json"
    rows, loss = _profiled_steps(p, trainer, batches, dev, out_dir, tmp)
    losses_ok = bool(torch.isfinite(loss).all())
    captured: dict[str, ProfiledFlopsDict] = {}  # "flops": the profiler's count, if asked
    active = int(p["active_steps"])
    if p["with_flops"]:  # the FLOPs issue's counter, in its own untimed window after the trace
        captured["flops"] = profile_trainer_flops(trainer, dev, steps=active, warmup=0).to_dict()
    trace = load_trace(tmp)
    trace_path = save_trace(trace, out_dir / trace_name(spec.trial_id, rank))
    os.unlink(tmp)
    if ctx is not None:  # every rank's trace is on disk before rank 0 compares them
        import torch.distributed as dist

        gathered: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(gathered, rows)
        if rank != 0:  # only rank 0 writes the trial's summary and record
            # the ranks leave together: a rank that exits while another still holds the
            # group open can make gloo abort that one (a SIGABRT seen on a loaded host)
            dist.barrier()
            return trial_record(**base, status=Status.OK,
                                artifacts=[str(Path("profiles", "framework", trace_path.name))])
        rows = cast("list[ProfileStepRow]",  # every rank's rows, each with its rank
                    [{**r, "rank": k} for k, rr in enumerate(gathered) for r in rr])
    write_csv(Path(spec.trial_dir) / "profile_steps.csv", rows)
    summary, rank_traces, summary_path = _summary(spec, trainer, trace, trace_path, rows,
                                                  captured, ctx, dev, out_dir)
    if ctx is not None:
        import torch.distributed as dist

        dist.barrier()  # with the other ranks, which wait here before they leave
    return trial_record(
        **base, status=Status.OK,
        device={"kind": dev.kind, "name": dev.name, "count": dev.count},
        torch_version=torch.__version__,
        profiled_step_median_s=summary["profiled_step_median_s"],
        # labelled by kind: never an MFU numerator (the Profiles section divides it by the
        # timed median step and the Utilization section's peak)
        profiler_attributed_flops_per_step=(summary["flops"]["profiler_attributed"] or {}).get(
            "per_step"),
        phases_ok=summary["phase_check"]["ok"], finite_loss=losses_ok,
        artifacts=[*(str(Path("profiles", "framework", t.name)) for t in rank_traces),
                   str(Path("profiles", "framework", summary_path.name))],
    )


def _profiled_steps(p: dict[str, Any], trainer: Any, batches: Any, dev: Any, out_dir: Path,
                    tmp: Path) -> tuple[list[ProfileStepRow], Any]:
    """The profiler's schedule (wait, warm-up, active steps), each step timed; the trace goes
    to ``tmp``. Returns the step rows and the last loss."""
    from torch.profiler import profile, schedule

    wait, warm, active = int(p["wait_steps"]), int(p["warmup_steps"]), int(p["active_steps"])

    def ready(prof: Any) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(tmp))

    rows: list[ProfileStepRow] = []
    sync, clock = devmod.synchronize, time.perf_counter
    with profile(
        activities=devmod.profiler_activities_for(dev),
        schedule=schedule(wait=wait, warmup=warm, active=active, repeat=1),
        on_trace_ready=ready,
        record_shapes=bool(p["record_shapes"]),
        profile_memory=bool(p["profile_memory"]),
        with_stack=bool(p["with_stack"]),
    ) as prof:
        for i in range(wait + warm + active):
            state = "wait" if i < wait else "warmup" if i < wait + warm else "active"
            t0 = clock()
            loss = trainer.train_step(next(batches))
            sync(dev)
            rows.append({"step": i, "profiler": state, "step_time_s": clock() - t0})
            prof.step()
    return rows, loss


def _summary(spec: Any, trainer: Any, trace: Any, trace_path: Path, rows: list[ProfileStepRow],
             captured: dict[str, ProfiledFlopsDict], ctx: Any, dev: Any,
             out_dir: Path) -> tuple[FrameworkSummary, list[Path], Path]:
    """The trial's framework summary (written beside its traces), the rank traces, its path."""
    p = spec.profile
    active = int(p["active_steps"])
    summary = summarize(trace, active, captured.get("flops"), trainer.useful_flops_per_step(),
                        trainer.useful_flops_definition)
    # the slowest rank's time per step, as timed trials define a distributed step
    per_step: dict[int, float] = {}
    for r in rows:
        if r["profiler"] == "active":
            per_step[r["step"]] = max(per_step.get(r["step"], 0.0), r["step_time_s"])
    rank_traces = [trace_path]
    if ctx is not None:
        rank_traces = [out_dir / trace_name(spec.trial_id, k) for k in range(ctx.world_size)]
        summary["per_rank"] = per_rank_summary(rank_traces)
        summary["world_size"] = ctx.world_size
    summary.update(  # type: ignore[call-arg]
        schema_version=SCHEMA_VERSION, trial_id=spec.trial_id, arm_id=spec.arm_id,
        arm_label=spec.arm_label, bucket=spec.bucket["name"], layer="framework",
        device={"kind": dev.kind, "name": dev.name},
        schedule={"protocol_warmup_steps": spec.warmup_steps, "wait": int(p["wait_steps"]),
                  "warmup": int(p["warmup_steps"]), "active": active},
        trace=trace_path.name, profiled_step_median_s=statistics.median(per_step.values()),
    )
    summary_path = out_dir / f"{spec.trial_id}.summary.json"
    atomic_write_json(summary_path, summary)
    return summary, rank_traces, summary_path


def per_rank_summary(traces: list[Path]) -> list[dict[str, float | str | None]]:
    """One row per rank from its own trace: the temporal breakdown and the rank's profiled
    step relative to the fastest rank (skew)."""
    # start-up cost: pandas is imported when a trace is summarised, not by every trial process
    from orchestrator.analysis.profile import trace_stats as A

    frames = {k: events_frame(load_trace(t)) for k, t in enumerate(traces)}
    table = A.per_rank(frames)
    return json.loads(json.dumps(table.to_dict("records"), default=_jsonable))


def summarize(trace: dict[str, Any], active_steps: int, flops: ProfiledFlopsDict | None,
              analytic_flops_per_step: float | None,
              useful_definition: str | None = None) -> FrameworkSummary:
    """The summary of one framework trace (pure apart from pandas)."""
    # start-up cost: pandas is imported when a trace is summarised, not by every trial process
    from orchestrator.analysis.profile import trace_stats as A

    df = events_frame(trace)
    steps = A.step_windows(df)
    n = max(len(steps), 1)
    phases = A.phase_breakdown(df, steps)
    ops = A.op_breakdown(df, n)
    step_us = float(phases.loc[phases["phase"] == "step", "time_us"].iloc[0])
    out: FrameworkSummary = {
        "steps_in_trace": len(steps),
        # named phases plus `unattributed`: they add up to the step (seconds per profiled step)
        "phases": {r.phase: {"time_s": r.time_us / 1e6, "share": r.share}
                   for r in phases.itertuples() if r.phase != "step"},
        "trace_step_s": step_us / 1e6,
        "phase_check": A.phase_sum_check(phases, PHASE_TOLERANCE),
        "top_ops": ops.head(TOP_OPS).to_dict("records"),
        "temporal": A.temporal_breakdown(df, steps),
        "host_gaps": A.host_gaps(df, steps),
        # one operation's time (forward and backward), e.g. attention: overlaps the phases
        "regions": A.region_breakdown(df, steps),
        "allocator": A.allocator_calls(df, steps),
        "synchronisations": A.synchronisations(df).to_dict("records"),
        "memory_by_phase": A.memory_by_phase(df).to_dict("records"),
    }
    out["flops"] = flops_summary(flops, analytic_flops_per_step, useful_definition)
    return json.loads(json.dumps(out, default=_jsonable))


def flops_summary(flops: ProfiledFlopsDict | None, analytic_flops_per_step: float | None,
                  useful_definition: str | None = None) -> FlopsSummary:
    """The profiled trial's FLOPs, each labelled by its kind (orchestrator.platform.flops): the
    recipe's ``useful`` (analytic) count and the ``profiler-attributed`` count with its
    coverage. Keyed by kind, so no figure is ever read without its definition."""
    out: FlopsSummary = {
        "useful": {"kind": USEFUL, "per_step": analytic_flops_per_step,
                   "definition": useful_definition or DEFINITIONS[USEFUL]},
        "profiler_attributed": None,
    }
    if flops is not None:  # orchestrator.platform.flops.ProfiledFlops as a dict
        per_step = flops["flops_per_step"]
        out["profiler_attributed"] = {
            "kind": PROFILER,
            "per_step": per_step,
            "definition": flops["definition"],
            "utilization_name": "profiler-attributed utilization",  # never an MFU
            "ratio_to_useful": (per_step / analytic_flops_per_step
                                if analytic_flops_per_step else None),
            # coverage: the share of aten op self time in ops the profiler has a formula for
            "coverage_time": flops["coverage_time"],
            "coverage_time_basis": flops["time_basis"],
            "ops_with_formula": sorted(flops["by_op"]),
            "steps": flops["steps"],
        }
    else:
        out["profiler_attributed_note"] = "not counted (profile.with_flops=false)"
    return out


def _jsonable(x: Any) -> Any:
    try:
        return x.item()  # numpy scalars
    except AttributeError:
        return str(x)
