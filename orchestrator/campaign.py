"""One campaign = one sweep on one workload: plan, launch, collect, analyze, decide, render.

Works on the plain dataclasses of :mod:`orchestrator.config`; no omegaconf below this line.
Completed trials already in the run directory are kept (resume): re-running on the same run
directory only runs what is missing.
"""

from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.analyze import Analysis, analyze, comparison_rows
from orchestrator.config import Config, SCHEMA_VERSION, to_dict
from orchestrator.decide import Verdict, decide
from orchestrator.launch import make_launcher
from orchestrator.launch.base import Launcher
from orchestrator.levers import lever_sections, loss_trajectory_gates
from orchestrator.plan import PlannedTrial, plan
from orchestrator.render import render_decisions, terminal_summary
from orchestrator.results import atomic_write_json, atomic_write_text, load_trials, write_csv
from orchestrator.sweep import Arm, apply_overrides, expand_arms
from orchestrator.trial import TrialSpec
from orchestrator.utilization import add_utilization_columns, campaign_utilization, utilization_section

log = logging.getLogger(__name__)

# a trial with one of these statuses is final and is not re-run on resume
from orchestrator.launch.base import FINAL_STATUSES as FINAL_STATUSES  # noqa: E402


@dataclass
class CampaignResult:
    run_dir: Path
    analysis: Analysis
    verdicts: list[Verdict]


def selected_buckets(cfg: Config) -> list[dict[str, Any]]:
    buckets = [to_dict(b) for b in cfg.workload.buckets]
    if cfg.sweep is not None and cfg.sweep.buckets is not None:
        buckets = [b for b in buckets if b["name"] in cfg.sweep.buckets]
    return buckets


def make_specs(cfg: Config, run_dir: Path, arms: list[Arm], planned: list[PlannedTrial]) -> list[TrialSpec]:
    workload = to_dict(cfg.workload)
    by_arm = {a.arm_id: a for a in arms}
    buckets = {b["name"]: b for b in selected_buckets(cfg)}
    specs = []
    for p in planned:
        arm = by_arm[p.arm_id]
        specs.append(
            TrialSpec(
                trial_id=p.trial_id,
                trial_dir=str(run_dir / "trials" / p.trial_id),
                bucket=buckets[p.bucket],
                arm_id=arm.arm_id,
                arm_label=arm.label,
                is_baseline=arm.is_baseline,
                round=p.round,
                position=p.position,
                workload=apply_overrides(workload, arm.overrides),
                device=cfg.device,
                warmup_steps=cfg.protocol.warmup_steps,
                measured_steps=cfg.protocol.measured_steps,
                env=dict(arm.env),
                hardware=to_dict(cfg.hardware),
                timeout_s=cfg.protocol.trial_timeout_s,
            )
        )
    return specs


def completed_trials(run_dir: Path) -> dict[str, dict[str, Any]]:
    from orchestrator.resume import completed_on_disk

    return completed_on_disk(run_dir)


def env_line(trials: list[dict[str, Any]]) -> str:
    ok = [t for t in trials if t.get("status") == "ok"]
    if not ok:
        return f"python {platform.python_version()}; no successful trial reported its device"
    t = ok[0]
    d = t.get("device", {})
    return (f"{d.get('kind')}: {d.get('name')} (x{d.get('count')}), torch {t.get('torch_version')}, "
            f"python {t.get('python_version')}")


def run_campaign(cfg: Config, run_dir: Path, launcher: Launcher | None = None) -> CampaignResult:
    assert cfg.sweep is not None, "a campaign needs a sweep (+sweep=NAME)"
    run_dir.mkdir(parents=True, exist_ok=True)
    arms = expand_arms(cfg)
    buckets = selected_buckets(cfg)
    planned = plan(
        [a.arm_id for a in arms],
        [b["name"] for b in buckets],
        cfg.protocol.repeats,
        reverse_every_other_round=cfg.protocol.reverse_every_other_round,
    )
    atomic_write_json(run_dir / "config.json", {"schema_version": SCHEMA_VERSION, **to_dict(cfg)})
    plan_doc = {
        "schema_version": SCHEMA_VERSION,
        "sweep": cfg.sweep.name,
        "arms": [a.__dict__ for a in arms],
        "buckets": buckets,
        "trials": [p.to_dict() for p in planned],
    }
    from orchestrator.resume import check_same_plan, sigterm_as_interrupt

    check_same_plan(run_dir, json.loads(json.dumps(plan_doc)))
    atomic_write_json(run_dir / "plan.json", plan_doc)
    done = completed_trials(run_dir)
    todo = [p for p in planned if p.trial_id not in done]
    if done:
        log.info("resuming %s: %d of %d trials already complete", run_dir, len(planned) - len(todo),
                 len(planned))
    specs = make_specs(cfg, run_dir, arms, todo)
    launcher = launcher or make_launcher(cfg.launcher, device=cfg.device, run_dir=run_dir)
    from orchestrator.progress import Progress

    progress = Progress(cfg.sweep.name, len(specs))
    try:
        with sigterm_as_interrupt():
            launcher.run(specs, progress.on_done, cfg.protocol.trial_timeout_s,
                         on_start=progress.on_start)
    finally:
        progress.close()
    return finalize(cfg, run_dir, arms)


def speedup_table(analysis: Analysis, arm_id: str) -> dict[str, Any]:
    """Per bucket (and the mixture): speedup with its interval, for the decision log."""
    out: dict[str, Any] = {}
    for (bucket, aid), c in analysis.comparisons.items():
        if aid == arm_id:
            e = c.estimate
            out[bucket] = None if e is None else {
                "speedup": e.speedup, "low": e.low, "high": e.high, "confidence": e.confidence}
    return out


def _render_summary(run_dir: Path) -> None:
    """summary.md, summary.html and plots/ for this campaign; a failure here never loses the
    campaign's results (they are already on disk), it is logged."""
    try:
        from orchestrator.report.cli import render_summary
        from orchestrator.report.load import load_campaign

        render_summary(load_campaign(run_dir), with_plots=True, force=True)
    except Exception as exc:  # plotting must not take a finished campaign down
        log.warning("summary.md not rendered: %s: %s", type(exc).__name__, exc)


def finalize(cfg: Config, run_dir: Path, arms: list[Arm] | None = None) -> CampaignResult:
    """Collect the trials on disk, analyze, decide and write the campaign's artifacts."""
    assert cfg.sweep is not None
    arms = arms or expand_arms(cfg)
    buckets = selected_buckets(cfg)
    trials_df, steps_df = load_trials(run_dir)
    weights = {b["name"]: float(b["weight"]) for b in buckets}
    analysis = analyze(trials_df, steps_df, arms, [b["name"] for b in buckets], weights, cfg.protocol)
    verdicts = decide(analysis, cfg.protocol.min_effect,
                      loss_trajectory_gates(cfg, trials_df, steps_df, arms))
    records = trials_df.to_dict("records") if not trials_df.empty else []
    peaks, util = campaign_utilization(records, analysis)
    write_csv(run_dir / "results.csv", add_utilization_columns(comparison_rows(analysis), peaks, util))
    atomic_write_json(run_dir / "utilization.json", {
        "schema_version": SCHEMA_VERSION, "peaks": [p.__dict__ for p in peaks],
        "rows": [u.__dict__ for u in util]})
    base = arms[0]
    atomic_write_json(
        run_dir / "baseline.json",
        {
            "schema_version": SCHEMA_VERSION,
            "arm": base.label,
            "buckets": {
                b: analysis.summaries[(b, base.arm_id)].__dict__ for b in analysis.buckets
            },
        },
    )
    decided_at = time.time()
    lines = [json.dumps({"schema_version": SCHEMA_VERSION, "sweep": cfg.sweep.name,
                         "workload": cfg.workload.name, "variable": cfg.sweep.variable,
                         "decided_at": decided_at, **v.to_dict(),
                         "speedups": speedup_table(analysis, v.arm_id)}) for v in verdicts]
    atomic_write_text(run_dir / "decisions.jsonl", "\n".join(lines) + "\n")
    failures = [r for r in records if r.get("status") not in ("ok", None)]
    md = render_decisions(
        sweep=cfg.sweep,
        workload_name=cfg.workload.name,
        analysis=analysis,
        verdicts=verdicts,
        env_line=env_line(records),
        protocol=cfg.protocol,
        launcher=cfg.launcher.name,
        failures=failures,
        extra_sections=[("Utilization (MFU / HFU)", utilization_section(records, peaks, util)),
                        *lever_sections(cfg, trials_df, steps_df, analysis)],
    )
    atomic_write_text(run_dir / "decisions.md", md)
    _render_summary(run_dir)
    log.info("%s", terminal_summary(cfg.sweep.name, verdicts, str(run_dir)))
    return CampaignResult(run_dir, analysis, verdicts)
