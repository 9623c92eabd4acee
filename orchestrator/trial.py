"""The trial runner: one arm on one bucket, in its own process (or in-process for tests).

The orchestrator owns the timing protocol here: warm-up steps are run and excluded, the device
is synchronised at every step boundary, each step's wall time, data wait, loss and tokens are
kept raw in steps.csv so trimming can be redone in analysis. Recipes never time themselves.

Run as ``python -m orchestrator.trial SPEC.json``. The process imports torch, the recipe and
this module only, so its fixed cost stays close to ``python -c "import torch"``.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from orchestrator import compile_stats
from orchestrator import device as devmod
from orchestrator import distributed as distmod
from orchestrator import reference as refmod
from orchestrator.environment import record_facts
from orchestrator.errors import BackendUnavailable
from orchestrator.external import measure_external
from orchestrator.flops import trial_flops
from orchestrator.interference import CpuWindow
from orchestrator.jobs import LAUNCH_T0_VAR, TrialSpec
from orchestrator.processes import die_with_parent
from orchestrator.microbench.worker import run_microbench
from orchestrator.profiling.runner import run_profiled
from orchestrator.results import atomic_write_json, trial_record, write_csv
from orchestrator.steady import warmup_complete
from orchestrator.worker import start_worker

# the most measured steps protocol.measured_min_s may ask for
MAX_MEASURED_STEPS = 2000


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")


def _compile_hint(exc: BaseException, error: str) -> str:
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


def run_trial(spec: TrialSpec, launch_t0: float | None = None) -> dict[str, Any]:
    """Run the trial and write trial.json and steps.csv atomically. Never raises for a failure
    of the workload itself: the failure becomes the record's status."""
    t_start = time.time()
    tdir = Path(spec.trial_dir)
    tdir.mkdir(parents=True, exist_ok=True)
    base: dict[str, Any] = {
        "trial_id": spec.trial_id,
        "kind": spec.kind,
        "bucket": spec.bucket["name"],
        "seq_len": spec.bucket["seq_len"],
        "micro_batch": spec.bucket["micro_batch"],
        "bucket_weight": spec.bucket.get("weight", 1.0),
        "arm_id": spec.arm_id,
        "arm_label": spec.arm_label,
        "is_baseline": spec.is_baseline,
        "round": spec.round,
        "position": spec.position,
        "pid": os.getpid(),
        "started_at": t_start,
        "warmup_steps": spec.warmup_steps,
        "measured_steps": spec.measured_steps,
    }
    rank, world, _ = distmod.env_rank()
    if world > 1:
        base["rank"] = rank
    if spec.kind == "profile":
        base["layer"] = spec.profile.get("layer")
    try:
        if spec.kind == "profile":
            record = run_profiled(spec, base)
        elif spec.kind == "microbench":
            record = run_microbench(spec, base)
        else:
            with compile_stats.cache_scope(spec.compile_cache):
                record = _measure(spec, base, launch_t0)
            record["compile_cache"] = spec.compile_cache
    except BackendUnavailable as exc:
        record = trial_record(**base, status="unavailable", error=str(exc))
    except BaseException as exc:  # the workload failed: a status, not a lost row
        if isinstance(exc, KeyboardInterrupt):
            raise
        base["failed_at"] = time.time()  # distributed: the earliest failing rank is the cause
        status = "oom" if devmod.is_oom(exc) else "failed"
        tb = traceback.format_exc(limit=8)
        record = trial_record(**base, status=status, error=_compile_hint(exc, one_line(exc)),
                              traceback=tb)
    finally:
        if world > 1:
            distmod.shutdown()
    # after the timed steps, so neither the timing nor start-to-first-step pays for it
    if rank == 0:
        record_facts(record, spec.device, tdir, full=spec.env_report)
    record["finished_at"] = time.time()
    if rank == 0:  # distributed: rank 0 is the only writer; other ranks leave only failures
        atomic_write_json(tdir / "trial.json", record)
    elif record["status"] != "ok":
        atomic_write_json(tdir / f"trial.rank{rank}.json", record)
    return record


def _measure(spec: TrialSpec, base: dict[str, Any], launch_t0: float | None) -> dict[str, Any]:
    worker = start_worker(spec.workload, spec.device)
    if worker.external:  # another program trains; its log gives the steps
        return measure_external(spec, base, worker.trainer(spec.bucket))
    workload, dev, ctx, world = worker.workload, worker.device, worker.group, worker.world_size
    assert dev is not None
    # a host-only recipe (the synthetic load) needs no torch device and never imports torch
    host_only = worker.host_only
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:  # inline trials share a process: compile cold, as a fresh one does
        dynamo.reset()
    build_t0 = time.perf_counter()
    trainer = worker.trainer(spec.bucket)
    build_s = time.perf_counter() - build_t0  # the recipe's own cost, in start-to-first-step
    devmod.reset_peak_memory(dev)
    batches = trainer.batches()
    policy = spec.warmup()
    step_tags = trainer.step_tags  # the recipe's hooks (recipes.base.TrainerHooks)
    # e.g. workload.model.compile.visit_buckets: the other buckets' shapes, run in step 0
    visit_shapes = trainer.visit_shapes
    # a bound on tagged (excluded) steps, so a recipe that tags every step cannot loop forever
    # time-based floor on the measured window (protocol.measured_min_s): short steps get more
    # of them, up to a cap. Distributed: every decision below that changes how many steps run
    # is taken on the numbers all ranks agree on after each step (distmod.StepAgreement)
    min_s = spec.measured_min_s
    agree = distmod.StepAgreement(dev.torch_device) if ctx is not None else None
    cap = max(spec.measured_steps, MAX_MEASURED_STEPS) if min_s > 0 else spec.measured_steps
    max_steps = policy.max_steps + 3 * spec.measured_steps + cap + 10
    rows: list[dict[str, Any]] = []
    losses = []
    warm_times: list[float] = []
    warm_done, settled = warmup_complete(warm_times, policy)
    measured_n = 0
    first_step_at = None
    sync = devmod.synchronize
    clock = time.perf_counter
    if spec.clock == "cpu":
        if dev.kind != "cpu":
            raise BackendUnavailable(f"protocol.clock=cpu times host CPU work only, not {dev.kind}")
        clock = time.process_time
    torch_mod = None if host_only else sys.modules.get("torch")
    pool = torch_mod.get_num_threads() if torch_mod is not None else 1
    ref_on, ref_why = refmod.resolve(spec.speed_reference, dev.kind, world, pool)
    ref = refmod.host_reference(clock) if ref_on else None
    cs_start = cs_warm = compile_stats.snapshot()
    compiled_before = compile_stats.activity()
    warm_snapped = False
    window = CpuWindow()
    sync(dev)
    i = 0
    measured_s = 0.0
    while measured_n < spec.measured_steps or (measured_s < min_s and measured_n < cap):
        if i >= max_steps:
            raise RuntimeError(
                f"{i} steps run but only {measured_n} of {spec.measured_steps} measured: the "
                "recipe tags too many steps for exclusion"
            )
        if warm_done and not warm_snapped:  # compile counters at the end of the warm-up
            cs_warm, warm_snapped = compile_stats.snapshot(), True
            window.start()  # other processes' CPU time over the measured steps
        ref_s = ref() if ref is not None else None  # host speed now, outside the timed window
        t0 = clock()
        if first_step_at is None:
            first_step_at = time.time()
        batch = next(batches)
        t1 = clock()
        loss = trainer.train_step(batch)
        if i == 0:
            visit_shapes()
        sync(dev)
        t2 = clock()
        losses.append(loss)
        tags = list(step_tags())
        # this step compiled or recompiled: not steady
        compiled_now = compile_stats.activity()
        if compiled_now != compiled_before:
            compiled_before = compiled_now
            if "compile" not in tags:
                tags.append("compile")
        # the time the decisions use: distributed, the slowest rank's, with every rank's tags
        # (one all-reduce after the clock stopped), so all ranks run the same steps
        decide_s, tags = agree(t2 - t0, tags) if agree is not None else (t2 - t0, tags)
        if tags:
            phase = "excluded"
        elif not warm_done:
            phase = "warmup"
            warm_times.append(decide_s)
            warm_done, settled = warmup_complete(warm_times, policy)
        else:
            phase = "measured"
            measured_n += 1
            measured_s += decide_s
        rows.append(
            {
                "step": i,
                "phase": phase,
                "step_time_s": t2 - t0,
                "data_wait_s": t1 - t0,
                "tokens": trainer.tokens_per_step,
                "samples": trainer.samples_per_step,
                "batch_index": getattr(batch, "index", i),
                "tags": ";".join(tags),
                **({"reference_s": ref_s} if ref is not None else {}),
            }
        )
        i += 1
    cs_end = compile_stats.snapshot()
    interference = window.stop() if world <= 1 else {
        "others_cpu_s": None, "others_cores": None,
        "note": "not measured for multi-rank trials (the other ranks are not others)"}
    for row, loss in zip(rows, losses):  # read outside the timed window
        row["loss"] = float(loss.float().item()) if hasattr(loss, "item") else float(loss)
    dist_fields: dict[str, Any] = {}
    if ctx is not None:
        per_rank = distmod.gather_step_times(ctx, [r["step_time_s"] for r in rows])
        if per_rank is not None:  # rank 0: the slowest rank's time per step
            slowest, skew, who = distmod.combine(per_rank)
            for i, row in enumerate(rows):
                for r, times in enumerate(per_rank):
                    row[f"step_time_rank{r}_s"] = times[i]
                row["step_time_s"], row["rank_skew_s"] = slowest[i], skew[i]
                row["slowest_rank"] = who[i]
            measured_idx = [i for i, r in enumerate(rows) if r["phase"] == "measured"]
            dist_fields = distmod.summary(ctx, [skew[i] for i in measured_idx],
                                          [who[i] for i in measured_idx],
                                          agree.cost_s if agree is not None else None)
    peak, peak_source = devmod.peak_memory_bytes(dev)
    measured = [r["step_time_s"] for r in rows if r["phase"] == "measured"]
    median = statistics.median(measured)
    # one-off cost: warm-up steps and the steps that compiled (excluded from the steady state)
    warmup = [r["step_time_s"] for r in rows if r["phase"] == "warmup"
              or (r["phase"] == "excluded" and "compile" in r["tags"].split(";"))]
    writer = ctx is None or ctx.is_writer  # other ranks' times live in rank 0's steps.csv
    if writer:
        write_csv(Path(spec.trial_dir) / "steps.csv", rows)
    flops = trainer.useful_flops_per_step()
    # FLOPs after the timed steps: an extra counted step
    if host_only:  # numpy work: torch's FLOP counter and peak table do not apply, torch stays out
        utilization: dict[str, Any] = {
            "flops": {"useful_per_step": flops,
                      "useful_definition": trainer.useful_flops_definition,
                      "executed_per_step": None,
                      "executed_note": "not counted: host-only recipe (no torch)"},
            "matmul_dtype": None, "matmul_dtype_why": "host-only recipe (no torch)",
            "peaks": [], "utilization": []}
    else:
        utilization = trial_flops(trainer, batches, dev, spec.hardware, workload.precision, median)
    close = getattr(batches, "close", None)
    if close is not None:  # after the FLOP count's extra step; stops DataLoader workers now
        close()
    # recipe-specific data for the report (never timings): e.g. muon_tp's auto choices
    extra = trainer.extra_record()
    if not writer:  # every rank ran the counted step above (it may hold collectives)
        return trial_record(**base, status="ok")
    nonfinite = [r["step"] for r in rows if r["loss"] != r["loss"] or abs(r["loss"]) == float("inf")]
    torch_mod = sys.modules.get("torch")  # recorded only when the recipe really used torch
    return trial_record(
        **base,
        status="ok",
        device={"kind": dev.kind, "name": dev.name, "count": dev.count},
        torch_version=getattr(torch_mod, "__version__", None),
        python_version=platform.python_version(),
        startup_to_first_step_s=(first_step_at - launch_t0) if launch_t0 and first_step_at else None,
        trainer_build_s=build_s,
        step_time_median_s=median,
        step_time_mad_s=_mad(measured),
        clock=spec.clock,
        measured_steps_run=sum(1 for r in rows if r["phase"] == "measured"),
        speed_reference=ref_on,
        speed_reference_why=ref_why,
        reference_median_s=(statistics.median(r["reference_s"] for r in rows if r["phase"] == "measured")
                            if ref_on else None),
        warmup_policy=policy.policy,
        warmup_steps_used=len(warm_times),
        warmup_settled=settled,
        excluded_steps=sum(1 for r in rows if r["phase"] == "excluded"),
        compile_steps=sum(1 for r in rows if "compile" in r["tags"].split(";")),
        tokens_per_step=trainer.tokens_per_step,
        tokens_per_s=trainer.tokens_per_step / median,
        peak_mem_bytes=peak,
        peak_mem_source=peak_source,
        useful_flops_per_step=flops,
        final_loss=rows[-1]["loss"],
        nonfinite_loss_steps=nonfinite,
        env=dict(spec.env),
        **utilization,
        torch_threads=torch_mod.get_num_threads() if torch_mod is not None else None,
        # one-off cost of the warm-up steps above steady state (compile, autotune, workers ...)
        warmup_excess_s=sum(warmup) - len(warmup) * median,
        data_wait_share=sum(r["data_wait_s"] for r in rows if r["phase"] == "measured")
        / sum(measured),
        **compile_stats.trial_fields(cs_start, cs_warm, cs_end),
        interference=interference,
        **dist_fields,
        **extra,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m orchestrator.trial SPEC.json", file=sys.stderr)
        return 2
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker: die with the agent
        die_with_parent()
    import logging

    # warnings from anything, and the recipes' one-off INFO facts (e.g. muon_tp's "tp_mode
    # auto:" choice per shape, rank 0) reach the trial's stderr.log
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("recipes").setLevel(logging.INFO)
    spec = TrialSpec.from_file(argv[0])
    t0 = os.environ.get(LAUNCH_T0_VAR)
    record = run_trial(spec, float(t0) if t0 else None)
    if record["status"] != "ok":
        print(f"trial {spec.trial_id}: {record['status']}: {record.get('error')}", file=sys.stderr)
        if record.get("traceback"):
            print(record["traceback"], file=sys.stderr)
    return 0 if record["status"] in ("ok", "unavailable") else 1


if __name__ == "__main__":
    sys.exit(main())
