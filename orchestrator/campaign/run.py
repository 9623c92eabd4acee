"""One campaign = one sweep on one workload: plan, launch, collect, analyze, decide, render.

Works on the plain dataclasses of :mod:`orchestrator.spec.config`; no omegaconf below this line.
Completed trials already in the run directory are kept (resume): re-running on the same run
directory only runs what is missing.
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core.section import Section
from orchestrator.core import paired
from orchestrator.campaign import provenance, revisions
from orchestrator.platform import rundir
from orchestrator.core import stats
from orchestrator.analysis.analyze import (
    Analysis,
    analyze,
    comparison_rows,
    paired_blocks,
    reference_times_by_trial,
    step_times_by_trial,
)
from orchestrator.spec.ledger import LINEAGE_FILE, Ledger, lineage, lineage_lines
from orchestrator.spec.config import Config
from orchestrator.core.convert import to_dict
from orchestrator.campaign.gate import load_gates, run_gate
from orchestrator.campaign.gate import section as correctness_section
from orchestrator.analysis.decide import (MIN_STEPS_UNDER_LOAD, Rule, Verdict, aa_calibration,
                                          decide)
from orchestrator.core.errors import ConfigError
from orchestrator.platform.slices import duet_slices
from orchestrator.platform.interference import core_speed_problem, core_speeds, machine_load
from orchestrator.spec.jobs import TrialSpec, make_specs, paired_members
from orchestrator.launch.factory import make_launcher
from orchestrator.launch.base import INFRA_STATUS, Launcher, record_or_failure
from orchestrator.analysis.levers import lever_sections
from orchestrator.analysis.loss_gate import loss_trajectory_gates
from orchestrator.campaign.microbench import (
    direction_checks,
    direction_section,
    run_microbenchmarks,
)
from orchestrator.campaign.profiles import profiles_section, run_profiled_trials
from orchestrator.platform.children import COMMAND_SESSION, kill_recorded
from orchestrator.campaign.progress import Progress, trial_log
from orchestrator.core.reference import normalise
from orchestrator.spec.plan import (
    ArmProgress,
    PlannedTrial,
    control_arm,
    more_rounds_reason,
    next_rounds,
    plan_rounds,
)
from orchestrator.analysis.decisions_md import render_decisions, start_method_line, terminal_summary
from orchestrator.report.load import load_campaign
from orchestrator.report.summary import render_summary
from orchestrator.core.results import (
    SCHEMA_VERSION,
    atomic_write_json,
    atomic_write_text,
    load_trials,
    read_json,
    trial_record,
    write_csv,
)
from orchestrator.campaign.resume import check_same_plan, completed_on_disk, sigterm_as_interrupt
from orchestrator.core.sanitize import Sanitizer
from orchestrator.analysis.sensitivity import sensitivity_lines
from orchestrator.spec.sweep import ResolvedArm, choose_pairing, like, resolve_arms, selected_buckets
from orchestrator.worker.trial import MAX_MEASURED_STEPS
from orchestrator.campaign.sizing import size_trials, sized_steps, sizing_section
from orchestrator.analysis import contamination
from orchestrator.analysis.utilization import add_utilization_columns, campaign_utilization, utilization_section
from recipes.registry import report_sections

log = logging.getLogger(__name__)

# a trial with one of these statuses is final and is not re-run on resume
from orchestrator.core.results import FINAL_STATUSES as FINAL_STATUSES  # noqa: E402
from orchestrator.core.results import Status


@dataclass
class CampaignResult:
    run_dir: Path
    analysis: Analysis
    verdicts: list[Verdict]


def completed_trials(run_dir: Path) -> dict[str, dict[str, Any]]:
    return completed_on_disk(run_dir)


def _first_text(records: list[dict[str, Any]], key: str) -> str | None:
    """The first record's ``key`` that is text: a record may lack it (a table's missing cell
    is NaN, not None), e.g. an arm's record written by the paired process that ran it."""
    return next((v for r in records if isinstance(v := r.get(key), str) and v), None)


def env_line(trials: list[dict[str, Any]]) -> str:
    """decisions.md's environment: device, torch and python from the ok trials that say them;
    what no trial says is left out rather than printed as a placeholder."""
    ok = [t for t in trials if t.get("status") == Status.OK]
    if not ok:
        return f"python {platform.python_version()}; no successful trial reported its device"
    d: dict[str, Any] = next((t["device"] for t in ok if isinstance(t.get("device"), dict)
                              and isinstance(t["device"].get("kind"), str)), {})
    count = d.get("count")
    if d.get("kind") == "external":  # a command workload: its trainer's device is its own
        head = "external command (its device and torch are not probed)"
    elif d:
        shown = isinstance(count, (int, float)) and math.isfinite(count) and count > 0
        head = f"{d['kind']}: {d.get('name') or 'unnamed device'}" + (
            f" (x{int(count or 0)})" if shown else "")
    else:
        head = "no trial reported its device"
    torch = _first_text(ok, "torch_version")
    python = _first_text(ok, "python_version") or platform.python_version()
    return ", ".join([head, *([f"torch {torch}"] if torch else []), f"python {python}"])


def with_control(cfg: Config, arms: list[ResolvedArm]) -> list[ResolvedArm]:
    """The arms that run: baseline, the A/A control when the protocol asks for it (the
    baseline's workload under another arm id), variants."""
    if not cfg.protocol.aa_arm:
        return list(arms)
    return [arms[0], like(control_arm(arms[0]), arms[0]), *arms[1:]]


def _progress(verdicts: list[Verdict]) -> list[ArmProgress]:
    return [ArmProgress(v.arm_id, v.verdict, v.timing_based, v.rounds_to_resolve,
                        v.futility_judged) for v in verdicts]


def run_campaign(cfg: Config, run_dir: Path, launcher: Launcher | None = None,
                 overrides: list[str] | None = None,
                 arms: list[ResolvedArm] | None = None,
                 claim: rundir.Claim | None = None,
                 start: Start | None = None) -> CampaignResult:
    """Plan, launch, collect, analyze, decide, render. ``arms``: the sweep's arms already
    resolved (:func:`orchestrator.spec.sweep.resolve_arms`), else they are resolved here, once.
    ``claim``: the run directory already claimed (:func:`orchestrator.platform.rundir.claim`), else it
    is claimed here; ``start``: what :func:`prepare` found under that claim, else it runs here. Every check of the run directory (another campaign holding it, a resume
    planned differently or measured elsewhere, a busy machine under protocol.require_quiet)
    happens before anything is written to it: a refusal leaves it as it was."""
    assert cfg.sweep is not None, "a campaign needs a sweep (+sweep=NAME)"
    arms = arms if arms is not None else resolve_arms(cfg)
    own = claim is None
    if claim is None:
        claim = rundir.claim(run_dir, resume=bool(cfg.resume))
    try:
        start = start if start is not None else prepare(cfg, run_dir, arms)
        try:
            if launcher is not None:
                return _campaign(cfg, run_dir, launcher, overrides, arms, start)
            launcher = make_launcher(cfg.launcher, device=cfg.device, run_dir=run_dir)
            try:
                return _campaign(cfg, run_dir, launcher, overrides, arms, start)
            finally:
                launcher.close()  # the local launcher's fork server stops with its campaign
        finally:
            revisions.cleanup(cfg, run_dir)  # the arms' worktrees (source.revision), if any
    except ConfigError:
        if own:  # refused before the first write: a directory made for it goes again
            claim.release(undo=True)
        raise
    finally:
        if own:
            claim.release()


@dataclass
class Start:
    """What :func:`prepare` found before the first write: the pairing the planner chose, the
    initial plan (already checked against a resumed run directory's), the trials on disk and
    the machine's load."""

    pairing: dict[str, Any]
    running: list[ResolvedArm]
    buckets: list[dict[str, Any]]
    planned: list[PlannedTrial]
    done: dict[str, dict[str, Any]]
    machine: dict[str, Any] | None
    spending: list[list[float]] | None = None  # the looks' error-rate shares (plan.json)


def prepare(cfg: Config, run_dir: Path, arms: list[ResolvedArm]) -> Start:
    """Every check before the campaign's first write, and nothing written: the pairing
    (``protocol.pairing=auto`` becomes the planner's choice), a run directory planned for
    other trials (another sweep, arms, buckets, repeats or pairing), a resume on a different
    environment, and a busy machine (refused under protocol.require_quiet)."""
    p = cfg.protocol
    pairing_choice, pairing_why = choose_pairing(cfg, with_control(cfg, arms))
    p.pairing = pairing_choice
    pairing_doc = {"mode": pairing_choice, "why": pairing_why,
                   **({"block_steps": p.block_steps, "switch_warmup_steps": p.switch_warmup_steps}
                      if pairing_choice == "steps" else {}),
                   **({"slices": duet_slices(p, len(with_control(cfg, arms)),
                                             cfg.launcher.cpu_affinity),
                       "placement": "arm i of a round on slice (i + round) mod slices"}
                      if pairing_choice == "duet" else {})}
    running = with_control(cfg, arms)
    buckets = selected_buckets(cfg)
    planned = plan_rounds(
        [a.arm_id for a in running], [b["name"] for b in buckets], range(p.repeats),
        reverse_every_other_round=p.reverse_every_other_round, order=p.order, seed=str(p.seed),
    )
    check_same_plan(run_dir, json.loads(json.dumps(
        _plan_doc(cfg, arms, running, buckets, planned, [], pairing_doc))))
    done = completed_trials(run_dir)
    provenance.check_resume_environment(cfg, run_dir, list(done.values()))
    machine = None if cfg.launcher.name == "slurm" else check_quiet(cfg)  # Slurm: elsewhere
    return Start(pairing_doc, running, buckets, planned, done, machine,
                 planned_spending(cfg, run_dir, done))


def _campaign(cfg: Config, run_dir: Path, launcher: Launcher, overrides: list[str] | None,
              arms: list[ResolvedArm], start: Start) -> CampaignResult:
    p = cfg.protocol
    max_rounds = max(p.max_rounds, p.repeats)  # validate() refuses max_rounds < repeats
    log.info("pairing: %s (%s)", start.pairing["mode"], start.pairing["why"])
    launcher.recover()  # a resume: trials of a killed earlier invocation stop before replanning
    if cfg.launcher.name != "slurm":  # Slurm's trials ran on other machines (recover() above)
        kill_orphans(run_dir)
    if start.machine is not None:
        record_machine_load(run_dir, start.machine)
    running, buckets, planned = start.running, start.buckets, start.planned
    bucket_names = [b["name"] for b in buckets]
    adaptive_log: list[dict[str, Any]] = []
    # first: a campaign stopped from here resumes; a resume's extended spending is written now
    _write_plan(cfg, run_dir, arms, running, buckets, planned, adaptive_log,
                pairing=start.pairing, spending=start.spending)
    # the user's code: each arm's revision in its worktree (source.revision), its state
    arms, running = revisions.materialize(cfg, run_dir, arms, running)
    session = provenance.start(cfg, run_dir, arms, list(start.done.values()), overrides,
                               code_lines=revisions.source_lines(running))
    atomic_write_json(run_dir / "config.json", {"schema_version": SCHEMA_VERSION, **to_dict(cfg)})
    write_lineage(cfg, run_dir)
    run_gate(cfg, run_dir, arms, buckets, launcher)  # once per campaign, through its launcher
    # a command's trials sized by time from a pilot per bucket (before the first round)
    sizing = size_trials(cfg, run_dir, running, buckets, planned, launcher, start.done)
    if sizing is not None:
        _write_plan(cfg, run_dir, arms, running, buckets, planned, adaptive_log,
                    pairing=start.pairing, spending=start.spending, sizing=sizing)
    rounds_done = p.repeats
    # one display for the whole invocation: the total is the plan (done trials included),
    # raised as adaptive rounds extend it
    progress = Progress(cfg.sweep.name, len(planned))
    try:
        _run_rounds(cfg, run_dir, arms, running, buckets, bucket_names, planned, adaptive_log,
                    launcher, session, progress, rounds_done, max_rounds, start.pairing)
    finally:
        progress.close()
    # profiled trials: a separate step after the timed ones, never in timing statistics
    run_profiled_trials(cfg, run_dir, arms, launcher, set(completed_trials(run_dir)))
    # the sweep's microbenchmark per arm (sweep.microbench): its direction against the verdict
    run_microbenchmarks(cfg, run_dir, arms, launcher, set(completed_trials(run_dir)))
    session.sanitizer.add_hostnames(launcher.seen_hostnames)  # before the seal
    return finalize(cfg, run_dir, arms, session)


def _run_rounds(cfg: Config, run_dir: Path, arms: list[ResolvedArm], running: list[ResolvedArm],
                buckets: list[dict[str, Any]], bucket_names: list[str],
                planned: list[PlannedTrial], adaptive_log: list[dict[str, Any]],
                launcher: Launcher, session: provenance.Session, progress: Any,
                rounds_done: int, max_rounds: int,
                pairing: dict[str, Any] | None = None) -> None:
    """The initial rounds, then adaptive ones while a variant is undecided (``planned`` and
    ``adaptive_log`` grow in place)."""
    p = cfg.protocol
    while True:
        _write_plan(cfg, run_dir, arms, running, buckets, planned, adaptive_log,
                    check=not adaptive_log, pairing=pairing)
        session.sanitize_files(run_dir, ("config.json", "plan.json"))
        _run_missing(cfg, run_dir, running, planned, launcher, session, progress)
        if rounds_done >= max_rounds:
            break
        analysis, verdicts = _analyze_decide(cfg, run_dir, arms, final=False)
        calibration = aa_calibration(analysis, cfg.protocol.aa_alpha)
        reasons = {
            pr.arm_id: r for pr in _progress(verdicts)
            if (r := more_rounds_reason(pr, rounds_done, max_rounds, calibration))
        }
        if not reasons:
            break
        rounds = next_rounds(rounds_done, max_rounds, p.adaptive_step_rounds)
        keep = [a.arm_id for a in running if a.is_baseline or a.arm_id in reasons
                or (p.aa_arm and a.arm_id == running[1].arm_id)]
        if p.pairing in ("process", "duet"):  # one arm per process (side by side: duet)
            steps, planner = (trial_length(cfg, run_dir, analysis) if p.plan_trial_length
                              else ({}, {}))
        else:
            steps, planner = (cycles_per_round(cfg, run_dir, analysis) if p.plan_cycles
                              else ({}, {"why": "protocol.plan_cycles is off: every round keeps "
                                            "measured_steps / measured_min_s per arm"}))
            # alternated commands are asked for their steps: every round keeps the pilot's
            steps = {**sized_steps(read_sizing(run_dir)), **steps}
        planned += plan_rounds(keep, bucket_names, rounds,
                               reverse_every_other_round=p.reverse_every_other_round,
                               start_position=len(planned), steps=steps, order=p.order,
                               seed=str(p.seed))
        adaptive_log.append({"after_rounds": rounds_done, "added_rounds": rounds,
                             "arms": keep, "reasons": reasons, "planner": planner})
        log.info("adaptive: adding rounds %s for %s", rounds, ", ".join(sorted(reasons)))
        rounds_done = rounds[-1] + 1


def trial_length(cfg: Config, run_dir: Path, analysis: Analysis) -> tuple[
        dict[str, int], dict[str, Any]]:
    """Measured steps per trial for the next rounds, per bucket, from the variance components
    of the rounds so far (orchestrator.core.paired.optimal_steps), and the planner's record for
    plan.json: the components, the measured fixed cost and step time, the choice and why."""
    trials_df, steps_df = load_trials(run_dir)
    by_trial = step_times_by_trial(steps_df)
    if analysis.speed_normalised:
        by_trial = normalise(by_trial, reference_times_by_trial(steps_df))
    ok = trials_df[(trials_df["status"] == Status.OK) & (trials_df.get("kind", "timed") == "timed")]
    sizing = read_sizing(run_dir) or {}
    steps: dict[str, int] = {}
    doc: dict[str, Any] = {}
    for bucket in analysis.buckets:
        fit = analysis.fits.get(bucket)
        rows = ok[ok["bucket"] == bucket]
        series = [by_trial.get(str(t), []) for t in rows["trial_id"]]
        if fit is None or fit.resid_sd is None or rows.empty or not any(len(x) > 1 for x in series):
            doc[bucket] = {"choice": None, "why": "no residual variance yet"}
            continue
        measured = [sum(x) for x in series]
        wall = (rows["finished_at"] - rows["started_at"]).astype(float).tolist()
        start = rows.get("startup_to_first_step_s")
        starts = [float(v) if v == v and v is not None else 0.0
                  for v in (start.tolist() if start is not None else [0.0] * len(wall))]
        fixed = stats.median([w + s0 - m for w, s0, m in zip(wall, starts, measured)])
        comp = paired.variance_components(fit.resid_sd, series, max(fixed, 0.0))
        floor = paired.window_floor(cfg.protocol.measured_steps, cfg.protocol.measured_min_s,
                                    comp.step_s)
        # a command's trials keep at least the length its pilot sized (with its margin)
        floor = max(floor, int(((sizing.get("buckets") or {}).get(bucket) or {}).get(
            "measured_steps") or 0))
        n, why = paired.optimal_steps(comp, min(floor, MAX_MEASURED_STEPS), MAX_MEASURED_STEPS)
        steps[bucket] = n
        doc[bucket] = {"choice": n, "why": why, **comp.__dict__}
        log.info("planner: %s: %d measured steps per trial (%s)", bucket, n, why)
    return steps, doc


# pairing=steps: the most measured time per arm one process gets from the cycles planner
MAX_PAIRED_MEASURED_S = 60.0


def cycles_per_round(cfg: Config, run_dir: Path, analysis: Analysis) -> tuple[
        dict[str, int], dict[str, Any]]:
    """pairing=steps: measured steps per arm (a whole number of cycles) for the next rounds,
    per bucket, by Kalibera and Jones over the paired design. A round's effect is the median of
    its cycles' log ratios (arm / baseline), so its variance is sigma_b^2 + (pi/2) sigma_w^2 / n
    for n cycles: sigma_w the SD of one cycle's log ratio within a process, sigma_b what varies
    between processes beyond it (the block fit's residual less the cycles' share). A cycle
    costs its arms' blocks, a process its start and warm-ups; n* = sqrt(fixed x (pi/2) x
    sigma_w^2 / (cycle x sigma_b^2)), at least the cycles run so far, at most
    MAX_PAIRED_MEASURED_S of measured time per arm (orchestrator.core.paired.optimal_steps)."""
    trials_df, steps_df = load_trials(run_dir)
    by_trial = step_times_by_trial(steps_df)
    if analysis.speed_normalised:
        by_trial = normalise(by_trial, reference_times_by_trial(steps_df))
    ok = trials_df[(trials_df["status"] == Status.OK) & (trials_df.get("kind", "timed") == "timed")]
    if "pairing" in ok:
        ok = ok[ok["pairing"] == "steps"]
    base = analysis.arms[0].arm_id
    k = cfg.protocol.block_steps
    steps: dict[str, int] = {}
    doc: dict[str, Any] = {}
    for bucket in analysis.buckets:
        fit = analysis.fits.get(bucket)
        rows = ok[ok["bucket"] == bucket]
        blocks_of = paired_blocks(trials_df, steps_df, by_trial, bucket)
        spreads, ncyc = [], []
        for (r, arm), cyc in blocks_of.items():
            b = blocks_of.get((r, base))
            if arm == base or not b:
                continue
            d = [math.log(cyc[c] / b[c]) for c in sorted(set(cyc) & set(b))]
            if len(d) >= 2:
                spreads.append(1.4826 * stats.median([abs(x - stats.median(d)) for x in d]))
                ncyc.append(len(d))
        if fit is None or fit.resid_sd is None or not spreads:
            doc[bucket] = {"choice": None, "why": "no cycle-level spread yet"}
            continue
        within, n_now = stats.median(spreads), int(stats.median(ncyc))
        between2 = max(fit.resid_sd ** 2 - (math.pi / 2) * within ** 2 / n_now, 0.0)
        procs = rows.drop_duplicates("paired_process") if "paired_process" in rows else rows
        arms_n = max(1, rows["arm_id"].nunique())
        measured = [sum(by_trial.get(str(t), [])) for t in rows["trial_id"]]
        arm_cycle_s = sum(measured) / max(len(measured), 1) / n_now  # one arm's block
        wall = (procs["finished_at"] - procs["started_at"]).astype(float).tolist()
        # a cycle: every arm's block, its switch steps too
        cycle_s = arm_cycle_s * arms_n * (1 + cfg.protocol.switch_warmup_steps / k)
        fixed = max(stats.median(wall) - cycle_s * n_now, 0.0) if wall else 0.0
        comp = paired.Components(within, math.sqrt(between2), n_now, cycle_s, fixed)
        # at most 4x longer per extension (a between-process SD read as 0 from a few rounds
        # would otherwise send every trial to the cap), at most MAX_PAIRED_MEASURED_S per arm
        cap = max(n_now, min(4 * n_now, int(MAX_PAIRED_MEASURED_S / max(arm_cycle_s, 1e-9))))
        n, why = paired.optimal_steps(comp, n_now, cap)
        n += n % 2  # an even number of cycles: every arm as often first as last
        steps[bucket] = n * k
        doc[bucket] = {"choice_cycles": n, "choice": n * k, "why": why.replace(
            "step ", "cycle ").replace("steps do not", "cycles do not"), **comp.__dict__}
        log.info("planner: %s: %d cycles of %d steps per arm (%s)", bucket, n, k, doc[bucket]["why"])
    return steps, doc


def kill_orphans(run_dir: Path) -> None:
    """A resume: kill what a dead campaign's commands left running (their watchdogs do it
    unless they were killed too; each running command's session is recorded in its trial
    directory, orchestrator.platform.children.SessionGuard)."""
    for record in sorted(run_dir.glob(f"trials/*/{COMMAND_SESSION}")):
        found = kill_recorded(record)
        if found:
            log.warning("resume: killed %d process(es) an earlier invocation's command left "
                        "running in %s", len(found), record.parent.name)


def _plan_doc(cfg: Config, arms: list[ResolvedArm], running: list[ResolvedArm],
              buckets: list[dict[str, Any]], planned: list[PlannedTrial],
              adaptive_log: list[dict[str, Any]],
              pairing: dict[str, Any] | None = None,
              spending: list[list[float]] | None = None,
              sizing: dict[str, Any] | None = None) -> dict[str, Any]:
    assert cfg.sweep is not None
    p = cfg.protocol
    control = [a for a in running if a not in arms]
    return {
            "schema_version": SCHEMA_VERSION,
            "sweep": cfg.sweep.name,
            "arms": [a.plan_dict() for a in arms],
            "control_arm": control[0].plan_dict() if control else None,
            "buckets": buckets,
            "rounds": {"initial": p.repeats, "max": max(p.max_rounds, p.repeats),
                       "adaptive_step": p.adaptive_step_rounds},
            "adaptive": adaptive_log,
            "pairing": pairing or {"mode": p.pairing, "why": "set by protocol.pairing"},
            # frozen at the first plan; a resume extends it with what is left (planned_spending)
            "spending": {"alpha": 1 - p.confidence, "rho": p.alpha_spending,
                         "looks": spending or fresh_spending(cfg)},
            # a command's trial length from its pilots (orchestrator.campaign.sizing)
            **({"sizing": sizing} if sizing else {}),
            "trials": [t.to_dict() for t in planned],
    }


def _write_plan(cfg: Config, run_dir: Path, arms: list[ResolvedArm], running: list[ResolvedArm],
                buckets: list[dict[str, Any]], planned: list[PlannedTrial],
                adaptive_log: list[dict[str, Any]], check: bool = False,
                pairing: dict[str, Any] | None = None,
                spending: list[list[float]] | None = None,
                sizing: dict[str, Any] | None = None) -> None:
    plan_doc = _plan_doc(cfg, arms, running, buckets, planned, adaptive_log, pairing,
                         spending or read_spending(run_dir), sizing or read_sizing(run_dir))
    if check:  # checked by prepare() before the first write; here for callers that skip it
        check_same_plan(run_dir, json.loads(json.dumps(plan_doc)))
    atomic_write_json(run_dir / "plan.json", plan_doc)


def _run_missing(cfg: Config, run_dir: Path, running: list[ResolvedArm],
                 planned: list[PlannedTrial],
                 launcher: Launcher, session: provenance.Session, progress: Any = None) -> None:
    """Run the planned trials not yet on disk (under pairing by steps a round's arms are
    measured together or not at all), then re-run what a harness failure or interference
    spoiled; an interrupt seals what is on disk."""
    todo = _todo(cfg, run_dir, planned)
    own_progress = progress is None
    if own_progress:
        progress = Progress(cfg.sweep.name if cfg.sweep else "campaign", len(planned))
    progress.plan(len(planned), len(planned) - len(todo))
    try:
        if todo:
            _TrialPass(cfg, run_dir, launcher, session, progress).run(
                make_specs(cfg, run_dir, running, todo), planned, running)
    except BaseException:  # interrupted: what is on disk stays, sanitized
        session.seal(run_dir)
        raise
    finally:
        if own_progress:
            progress.close()


def _todo(cfg: Config, run_dir: Path, planned: list[PlannedTrial]) -> list[PlannedTrial]:
    done = completed_trials(run_dir)
    todo = [t for t in planned if t.trial_id not in done]
    if cfg.protocol.pairing in ("steps", "duet"):  # a round's arms are measured together
        open_sessions = {(t.round, t.bucket) for t in todo}
        todo = [t for t in planned if (t.round, t.bucket) in open_sessions]
        for t in todo:  # a session's records are all re-measured
            (run_dir / "trials" / t.trial_id / "trial.json").unlink(missing_ok=True)
    if done and todo:
        log.info("%s: %d of %d planned trials already complete", run_dir,
                 len(planned) - len(todo), len(planned))
    return todo


class _TrialPass:
    """One pass over trials through the launcher: each record sanitized and shown as it
    comes; a trial spoiled by a harness failure (ranks out of step, a lost peer: nothing of
    the variant's) or measured under interference runs again after the others, its earlier
    attempts kept beside it, up to protocol.infra_retries / interference_retries times."""

    def __init__(self, cfg: Config, run_dir: Path, launcher: Launcher,
                 session: provenance.Session, progress: Any) -> None:
        self.cfg, self.run_dir, self.p = cfg, run_dir, cfg.protocol
        self.launcher, self.session, self.progress = launcher, session, progress
        self.retry: list[TrialSpec] = []
        self.attempts: dict[str, int] = {}
        self.earlier: dict[str, list[dict[str, Any]]] = {}
        self.interfered_now: list[float | None] = []  # other processes' cores, each trial
        self.finished: dict[str, dict[str, Any]] = completed_trials(run_dir)  # to rely on
        self.why: dict[str, str] = {}  # trial id -> why it is re-run, where not its record's

    def run(self, specs: list[TrialSpec], planned: list[PlannedTrial],
            running: list[ResolvedArm]) -> None:
        if specs:  # the first trial of each invocation also writes the full environment report
            specs[0].env_report = True
        # the specs' own limit (jobs.pair_specs gives a paired process the per-trial limit
        # times its arms)
        self.timeout_s = max((s.timeout_s or self.p.trial_timeout_s for s in specs),
                             default=self.p.trial_timeout_s)
        with sigterm_as_interrupt():
            for wave in waves(self.cfg, specs):  # a round's baseline first: it may stop the rest
                if self.p.pairing == "process":  # a paired process stops with its baseline
                    wave = skip_without_baseline(planned, running, wave, self.finished,
                                                 self.on_done)
                if wave:
                    self.launcher.run(wave, self.on_first_done, self.timeout_s,
                                      on_start=self.progress.on_start)
            self.retry_spoiled()
            # contamination is suspected interference, so interference_retries=0 turns its
            # re-runs off too; a paired round (steps, duet) is re-run whole
            if self.p.interference_retries > 0:
                again = self.contaminated(planned, running)
                self.retry.extend(again)
                self.retry_spoiled()
                self.first_stands(planned, again)

    def retry_spoiled(self) -> None:
        while self.retry:
            if persistent_load(self.cfg, self.run_dir, self.retry, self.interfered_now):
                # the load was there before, during and after: a re-run meets it again
                self.retry[:] = [r for r in self.retry if _last_infra(r)
                                 or r.trial_id in self.why]
                if not self.retry:
                    break
            self.rerun()

    def contaminated(self, planned: list[PlannedTrial],
                     running: list[ResolvedArm]) -> list[TrialSpec]:
        """The trials of the plan so far whose median sits far outside their arm's others
        (orchestrator.analysis.contamination), each re-run once: their specs."""
        ids = {t.trial_id for t in planned}
        records = {tid: r for tid, r in completed_trials(self.run_dir).items() if tid in ids}
        flags, notes = contamination.screen_any(records.values(), self.p.min_effect)
        for note in notes:
            log.warning("contamination check: %s", note)
        flags = [f for f in flags
                 if not any(a.get("reason") == "contamination"  # once per trial
                            for a in records[f.trial_id].get("earlier_attempts") or [])]
        if not flags:
            return []
        for f in flags:
            self.why[f.trial_id] = f.why()
            log.warning("%s (%s, %s): %s: re-running it once", f.trial_id, f.arm_id, f.bucket,
                        f.why())
        again = {f.trial_id for f in flags}
        if self.p.pairing != "process":  # its round's arms were measured together: all again
            rounds = {(t.round, t.bucket): self.why[t.trial_id] for t in planned
                      if t.trial_id in again}
            for t in planned:
                if (t.round, t.bucket) in rounds and t.trial_id not in again:
                    self.why[t.trial_id] = (f"re-run with its round (another arm's trial: "
                                            f"{rounds[(t.round, t.bucket)]})")
                    again.add(t.trial_id)
        return make_specs(self.cfg, self.run_dir, running,
                          [t for t in planned if t.trial_id in again])

    def first_stands(self, planned: list[PlannedTrial], again: list[TrialSpec]) -> None:
        """A contaminated trial (a paired round) is left out only where its re-run is clean:
        where the screen flags the re-run too, the flagged trial was no accident of the
        host, so the first attempt stands again and the re-run is kept aside in its place."""
        if not again:
            return
        ids = {t.trial_id for t in planned}
        records = {tid: r for tid, r in completed_trials(self.run_dir).items() if tid in ids}
        flags, _ = contamination.screen_any(records.values(), self.p.min_effect)
        off = {f.trial_id: f.why() for f in flags}
        for spec in again:
            group = [m.trial_id for m in paired_members(spec)]
            why = next((off[t] for t in group if t in off), None)
            if why is None:
                continue
            log.warning("%s: its re-run was off too (%s): the first attempt stands",
                        ", ".join(group), why)
            for tid in group:
                _first_attempt_stands(self.run_dir / "trials" / tid, why)

    def on_first_done(self, spec: TrialSpec, record: dict[str, Any]) -> None:
        self.finished[spec.trial_id] = record
        self.on_done_retrying(spec, record)

    def on_done(self, spec: TrialSpec, record: dict[str, Any]) -> None:
        # a compute node's host name (Slurm) is replaced like this machine's own
        self.session.sanitizer.add_hostnames(self.launcher.seen_hostnames)
        for member, rec in paired_records(spec, record):
            self.session.sanitize_trial(Path(member.trial_dir))  # stderr tails sanitized
            self.progress.on_done(member, self.session.sanitizer.data(rec))

    def needs_rerun(self, spec: TrialSpec, record: dict[str, Any]) -> bool:
        n = self.attempts.get(spec.trial_id, 0)
        if record.get("status") == INFRA_STATUS:
            return n < self.p.infra_retries
        return interfered(record, self.p.interference_cores) and n < self.p.interference_retries

    def on_done_retrying(self, spec: TrialSpec, record: dict[str, Any]) -> None:
        if self.needs_rerun(spec, record):
            self.retry.append(spec)
        self.interfered_now.append(_interference(record).get("others_cores"))
        self.on_done(spec, record)

    def rerun(self) -> None:
        again, self.retry[:] = list(self.retry), []
        self.earlier = {}
        for s in again:
            self.attempts[s.trial_id] = self.attempts.get(s.trial_id, 0) + 1
            for m in paired_members(s):
                self.earlier[m.trial_id] = _keep_attempt(Path(m.trial_dir),
                                                         self.why.pop(m.trial_id, None))
        log.warning("re-running %d trial(s) (%s): %s", len(again),
                    "; ".join(sorted({str(e[-1].get("why")) for e in self.earlier.values()})),
                    ", ".join(s.trial_id for s in again))
        self.progress.plan(self.progress.total + sum(len(paired_members(s)) for s in again),
                           self.progress.done)
        self.launcher.run(again, self.on_retry_done, self.timeout_s,
                          on_start=self.progress.on_start)

    def on_retry_done(self, spec: TrialSpec, record: dict[str, Any]) -> None:
        for m in paired_members(spec)[1:]:  # the arms a paired process also ran
            path = Path(m.trial_dir) / "trial.json"
            if path.exists():
                _with_attempts(Path(m.trial_dir), read_json(path), self.earlier[m.trial_id])
        record = _with_attempts(Path(spec.trial_dir), record, self.earlier[spec.trial_id])
        self.on_done_retrying(spec, record)


def waves(cfg: Config, specs: list[TrialSpec]) -> list[list[TrialSpec]]:
    """The specs in order, cut after each round's baseline trial that its round's variants
    follow, so a failed baseline stops them (:func:`skip_without_baseline`). Trials one at a
    time by process only: a parallel or Slurm launcher gets every spec at once, and a process
    paired by steps runs its round's arms together."""
    if cfg.protocol.pairing != "process" or cfg.launcher.name == "slurm" or (
            cfg.launcher.max_parallel > 1):
        return [list(specs)]
    out: list[list[TrialSpec]] = [[]]
    for i, s in enumerate(specs):
        out[-1].append(s)
        if s.is_baseline and s.kind == "timed" and any(
                not t.is_baseline and (t.round, t.bucket["name"]) == (s.round, s.bucket["name"])
                for t in specs[i + 1:]):
            out.append([])
    return [w for w in out if w]


def skip_without_baseline(planned: list[PlannedTrial], running: list[ResolvedArm],
                          wave: list[TrialSpec], finished: dict[str, dict[str, Any]],
                          on_done: Any) -> list[TrialSpec]:
    """The wave's specs less the variants (and the A/A control) whose round's baseline trial
    ended without a measurement (failed, crashed, out of memory, timed out): they have nothing
    to be compared with in that round. Each gets a record that says so (status ``skipped``,
    not final: a resume runs it again with its baseline) instead of running."""
    base_of = {(t.round, t.bucket): t.trial_id for t in planned if t.arm_id == running[0].arm_id}
    keep: list[TrialSpec] = []
    said: set[tuple[int, str]] = set()
    for s in wave:
        key = (s.round, s.bucket["name"])
        base = finished.get(base_of.get(key, ""), {})
        if s.is_baseline or s.kind != "timed" or base.get("status") in (None, Status.OK, INFRA_STATUS):
            keep.append(s)
            continue
        why = (f"not run: the baseline's trial of round {s.round} at {key[1]} "
               f"({base.get('trial_id')}) ended {base.get('status')}, so this round has "
               "nothing to compare it with")
        if key not in said:
            said.add(key)
            log.warning("round %d, %s: the baseline's trial %s ended %s (%s): that round's "
                        "variants are not run", s.round, key[1], base.get("trial_id"),
                        base.get("status"), base.get("error"))
        record = record_or_failure(s, "skipped", why, "")
        Path(s.trial_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(s.trial_dir) / "trial.json", record)
        on_done(s, record)
    return keep


def _last_infra(spec: TrialSpec) -> bool:
    """The trial's last record is a harness failure (re-run whatever the load)."""
    rec = _read_optional(Path(spec.trial_dir) / "trial.json") or {}
    return rec.get("status") == INFRA_STATUS


MAX_LATER_SAMPLES = 100  # resumes whose load machine_load.json keeps one by one


def record_machine_load(run_dir: Path, sample: dict[str, Any]) -> None:
    """machine_load.json: the load before the campaign's first invocation, at its top level;
    a resume's (or a rerun into a finished directory: nothing may be left to run) goes under
    ``later``, beside it and never over it, so the load the first trials met is kept."""
    sample = {**sample, "at": time.time()}
    path = run_dir / "machine_load.json"
    doc = _read_optional(path)
    if doc is None:
        atomic_write_json(path, sample)
        return
    later = [x for x in doc.get("later") or [] if isinstance(x, dict)]
    doc["later"] = (later + [sample])[-MAX_LATER_SAMPLES:]
    atomic_write_json(path, doc)


def _latest_load(doc: dict[str, Any]) -> dict[str, Any]:
    """The sample taken before this invocation (a resume's, else the first)."""
    later = [x for x in doc.get("later") or [] if isinstance(x, dict)]
    return later[-1] if later else doc


def _load_line(m: dict[str, Any]) -> str:
    return "; ".join(m.get("problems") or []) or (
        f"quiet (other processes {m.get('others_cores') or 0:.2f} cores, load average "
        f"{m.get('load_average', 0):.2f} on {m.get('cores')} cores)")


def _load_lines(records: list[dict[str, Any]], machine: dict[str, Any] | None) -> list[str]:
    """The Interference section's load: before the campaign and before each resume
    (machine_load.json), the cores' speeds, and other processes' CPU during the trials."""
    shares = [c for r in records if (c := _interference(r).get("others_cores")) is not None]
    load = [f"other processes' CPU during the measured steps: median {stats.median(shares):.2f}"
            f", max {max(shares):.2f} cores over {len(shares)} trials"] if shares else []
    if machine is None:
        return load
    before = ["before the campaign: " + _load_line(machine)]
    at0 = machine.get("at")
    for i, m in enumerate([x for x in machine.get("later") or [] if isinstance(x, dict)], 2):
        after = (f", {(m['at'] - at0) / 60:.0f} min after the first"
                 if isinstance(m.get("at"), (int, float)) and isinstance(at0, (int, float))
                 else "")
        before.append(f"before invocation {i} (a resume{after}): {_load_line(m)}")
    if machine.get("core_speed"):
        before.append(f"before the campaign: {machine['core_speed']}")
    return before + load


def persistent_load(cfg: Config, run_dir: Path, retry: list[TrialSpec],
                    during: list[float | None]) -> bool:
    """Whether the load that interfered with trials is persistent: other processes were busy
    before the campaign (machine_load.json), during this pass's trials (most of them over
    protocol.interference_cores) and still are now (sampled again). Re-runs then meet the
    same load and cannot help: said once (a warning, and machine_load.json's ``persistent``
    for decisions.md), and from then on trials are not re-run for interference."""
    doc = _read_optional(run_dir / "machine_load.json")
    if doc is None or not any(not _last_infra(s) for s in retry):
        return False
    if doc.get("persistent"):
        return True
    cores = cfg.protocol.interference_cores
    busy = [c for c in during if c is not None]
    if not _latest_load(doc).get("problems") or not busy or sum(c > cores for c in busy) * 2 < len(busy):
        return False
    now = machine_load(0.5)
    if now.others_cores is None or now.others_cores <= cores:
        return False  # gone: a re-run may find the machine quiet
    doc["persistent"] = {"during_median_cores": stats.median(busy), "trials": len(busy),
                         "after_cores": now.others_cores, "at": time.time()}
    atomic_write_json(run_dir / "machine_load.json", doc)
    log.warning("the load is persistent (before the campaign: %s; during %d trial(s): median "
                "%.2f cores; now %.2f cores): trials measured under it are not re-run, since a "
                "re-run meets the same load; they are pooled (quiet the machine, or "
                "protocol.require_quiet=true to refuse to start on a busy one)",
                "; ".join(doc.get("problems") or []), len(busy), stats.median(busy),
                now.others_cores)
    return True


def paired_records(spec: TrialSpec, record: dict[str, Any]) -> list[tuple[TrialSpec, dict[str, Any]]]:
    """Each arm's record after a process ran (one arm; or every arm, protocol.pairing=steps).
    A paired process that died (crash, kill, timeout) left records only for what it finished:
    the arm whose block was running (running.json) gets the process's status, every other arm
    an infrastructure failure (not on its account)."""
    members = paired_members(spec)
    if len(members) == 1:
        return [(spec, record)]
    running = Path(spec.trial_dir) / "running.json"
    try:  # written without fsync by the paired process before each arm's block
        culprit = read_json(running).get("arm_id") if running.exists() else None
    except (OSError, ValueError, AttributeError):
        culprit = None
    out = [(members[0], record)]
    for m in members[1:]:
        path = Path(m.trial_dir) / "trial.json"
        if path.exists():
            out.append((m, read_json(path)))
            continue
        Path(m.trial_dir).mkdir(parents=True, exist_ok=True)
        own = {k: record.get(k) for k in ("kind", "bucket", "seq_len", "micro_batch",
                                           "bucket_weight", "round", "started_at",
                                           "finished_at")}
        own.update(trial_id=m.trial_id, arm_id=m.arm_id, arm_label=m.arm_label,
                   is_baseline=m.is_baseline, position=spec.position, pairing="steps",
                   paired_process=spec.trial_id)
        if culprit == m.arm_id:
            rec = trial_record(**own, status=record.get("status"), error=record.get("error"),
                               stderr_tail=record.get("stderr_tail"))
        else:
            why = (f"the paired process ended {record.get('status')} in arm {culprit}'s block"
                   if culprit else f"the paired process ended {record.get('status')}")
            rec = trial_record(**own, status=INFRA_STATUS, infra_reason=why,
                               error=f"not measured: {why} ({record.get('error')})")
        atomic_write_json(path, rec)
        out.append((m, rec))
    if culprit is not None and culprit != members[0].arm_id and record.get("status") != Status.OK \
            and record.get("pairing") != "steps":  # the launcher's record: the culprit's status
        rec = {**record, "status": INFRA_STATUS, "raw_status": record.get("status"),
               "infra_reason": f"the paired process ended {record.get('status')} in arm "
                               f"{culprit}'s block"}
        atomic_write_json(Path(spec.trial_dir) / "trial.json", rec)
        out[0] = (members[0], rec)
    return out


def check_quiet(cfg: Config) -> dict[str, Any]:
    """Sample the machine's load before any trial: other processes busy on the CPU or the GPUs
    are a warning, or with protocol.require_quiet a refusal (exit 2). Returns the record the
    campaign keeps in machine_load.json for decisions.md (written only once nothing refuses)."""
    ml = machine_load(0.5)
    problems = ml.problems(cfg.protocol.interference_cores)
    doc = {**ml.__dict__, "problems": problems}
    if cfg.launcher.cpu_affinity is None:  # where the OS may put a trial: are they alike?
        speeds = core_speeds()
        doc["core_probe_s"] = {str(c): t for c, t in (speeds or {}).items()} or None
        if (warn := core_speed_problem(speeds)):
            doc["core_speed"] = warn
            log.warning("%s", warn)
    if not problems:
        return doc
    what = "; ".join(problems)
    if cfg.protocol.require_quiet:
        raise ConfigError("protocol.require_quiet", f"the machine is busy ({what}): wait until "
                          "it is quiet, or run with protocol.require_quiet=false (trials "
                          "measured under interference are then re-run)")
    log.warning("the machine is busy before the campaign (%s): timings will be noisier; "
                "trials measured under interference are re-run", what)
    return doc


def _interference(record: dict[str, Any]) -> dict[str, Any]:
    """The trial's interference record ({} when absent: a failure, or NaN from a DataFrame)."""
    got = record.get("interference")
    return got if isinstance(got, dict) else {}


def interfered(record: dict[str, Any], cores: float) -> bool:
    """A timed trial during whose measured steps other processes took more than ``cores``."""
    got = _interference(record).get("others_cores")
    return record.get("status") == Status.OK and got is not None and got > cores


def rerun_section(records: list[dict[str, Any]], cores: float = 0.25,
                  machine: dict[str, Any] | None = None,
                  min_effect: float | None = None) -> list[Section]:
    """decisions.md: the trials re-run after a harness failure, under interference or as
    contaminated, and why; the trials still under interference after their last attempt; a
    host whose spread is too wide to call its outliers contamination (none: no section)."""
    rows = [r for r in records if isinstance(r.get("earlier_attempts"), list)
            and r["earlier_attempts"]]
    spread = contamination.screen_any(records, min_effect)[1] if min_effect is not None else []
    still = [r for r in records if interfered(r, cores)]
    load = _load_lines(records, machine) + spread
    if not rows and not still:
        return [Section("Interference", [f"- {x}" for x in load])] if load else []
    persistent = (machine or {}).get("persistent")
    if persistent and still:  # said once: the same load before, during and after
        load.append(f"persistent load: there before the campaign, during its trials (median "
                    f"{persistent['during_median_cores']:.2f} cores over {persistent['trials']}) "
                    f"and after them ({persistent['after_cores']:.2f} cores): {len(still)} "
                    "trial(s) measured under it were not re-run (a re-run meets the same load) "
                    "and are pooled; quiet the machine for cleaner timings")
        still = []
        if not rows:
            return [Section("Interference", [f"- {x}" for x in load])]
    infra = sum(1 for r in rows if any(a.get("status") == INFRA_STATUS
                                       for a in r["earlier_attempts"]))
    dirty = sum(1 for r in rows if any(a.get("reason") == "contamination"
                                       for a in r["earlier_attempts"]))
    lines = [f"{len(rows)} trial(s) re-run: {infra} after a harness failure (ranks out of step, "
             "a lost peer: not on the variant's account; protocol.infra_retries; still failing "
             "so makes the verdict invalid, never reject), "
             f"{dirty} whose median (paired by steps: whose round's contrast with the "
             "baseline, the round re-run whole) sat far outside its arm's others beyond what "
             "its own steps' spread explains (contamination: re-run once; a clean re-run "
             "stands and the contaminated attempt is left out, a re-run off too leaves the "
             "first standing; the other is kept as attempt<N>.json and .steps.csv), "
             f"{len(rows) - infra - dirty} measured while other processes took more than "
             f"{cores:g} cores (protocol.interference_cores; the earlier attempt is not pooled).",
             ""]
    for r in sorted(rows, key=lambda r: str(r["trial_id"])):
        why = "; ".join(sorted({str(a.get("why")) for a in r["earlier_attempts"]}))
        lines.append(f"- `{r['trial_id']}` ({r.get('arm_label')}, {r.get('bucket')}): "
                     f"{len(r['earlier_attempts'])} earlier attempt(s) ({why}); now "
                     f"**{r.get('status')}**")
    for r in sorted(still, key=lambda r: str(r["trial_id"])):
        lines.append(f"- `{r['trial_id']}` ({r.get('arm_label')}, {r.get('bucket')}): still "
                     f"under interference ({_interference(r)['others_cores']:.2f} cores) "
                     "after its last attempt: pooled; quiet the machine")
    return [Section("Interference", [f"- {x}" for x in load]),
            Section("Trials re-run (harness failures, interference, contamination)", lines)]


def _read_optional(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _keep_attempt(tdir: Path, contaminated: str | None = None) -> list[dict[str, Any]]:
    """Before a re-run: the earlier attempt's record and steps move aside
    (``attempt<N>.json`` and ``attempt<N>.steps.csv``, never read as a trial); returns the
    summaries of every earlier attempt, each with why (``contaminated``: the contamination
    check's reason, for a trial re-run because its median stood out)."""
    rec = read_json(tdir / "trial.json")
    prior = list(rec.get("earlier_attempts") or [])
    attempt = len(prior) + 1  # numbered over every pass and look: none is overwritten
    (tdir / "trial.json").replace(tdir / f"attempt{attempt}.json")
    if (tdir / "steps.csv").exists():  # nothing measured is lost
        (tdir / "steps.csv").replace(tdir / f"attempt{attempt}.steps.csv")
    cores = _interference(rec).get("others_cores")
    reason = ("contamination" if contaminated else
              "infra" if rec.get("status") == INFRA_STATUS else
              "interference" if cores is not None else str(rec.get("status")))
    why = (contaminated or
           (rec.get("infra_reason") if rec.get("status") == INFRA_STATUS else
            f"interference: other processes took {cores:.2f} cores" if cores is not None else
            rec.get("status")))
    return prior + [{"status": rec.get("status"), "raw_status": rec.get("raw_status"),
                     "infra_reason": rec.get("infra_reason"), "error": rec.get("error"),
                     "others_cores": cores, "reason": reason, "why": why,
                     "step_time_median_s": rec.get("step_time_median_s")}]


def _first_attempt_stands(tdir: Path, why: str) -> None:
    """Swap a contamination re-run with the attempt it replaced: that attempt is the trial
    again, the re-run sits in its numbered place (attempt<N>.json, .steps.csv) and its summary
    says why."""
    rerun = read_json(tdir / "trial.json")
    earlier = list(rerun.get("earlier_attempts") or [])
    k = max((i for i, a in enumerate(earlier) if a.get("reason") == "contamination"),
            default=None)
    if k is None or not (tdir / f"attempt{k + 1}.json").exists():
        return
    first = read_json(tdir / f"attempt{k + 1}.json")
    for a, b in ((f"attempt{k + 1}.json", "trial.json"),
                 (f"attempt{k + 1}.steps.csv", "steps.csv")):
        if (tdir / a).exists() or (tdir / b).exists():
            tmp = tdir / f"{b}.swap"
            if (tdir / b).exists():
                (tdir / b).replace(tmp)
            if (tdir / a).exists():
                (tdir / a).replace(tdir / b)
            if tmp.exists():
                tmp.replace(tdir / a)
    summary = {**earlier[k], "status": rerun.get("status"), "raw_status": rerun.get("raw_status"),
               "error": rerun.get("error"), "step_time_median_s": rerun.get("step_time_median_s"),
               "why": f"re-run as {earlier[k].get('why')}; the re-run was off too ({why}), so "
                      "the first attempt stands"}
    first = {**first, "earlier_attempts": earlier[:k] + [summary] + earlier[k + 1:]}
    atomic_write_json(tdir / "trial.json", first)
    atomic_write_json(tdir / f"attempt{k + 1}.json", {**rerun, "earlier_attempts": earlier[:k]})


def _with_attempts(tdir: Path, record: dict[str, Any],
                   earlier: list[dict[str, Any]]) -> dict[str, Any]:
    record = {**record, "earlier_attempts": earlier}
    atomic_write_json(tdir / "trial.json", record)
    return record


def rule_for(cfg: Config, final: bool = True,
             spending: list[list[float]] | None = None, load: str = "") -> Rule:
    """The verdict rule of this protocol; ``load``: what :func:`detected_load` found."""
    p = cfg.protocol
    cap = max(p.max_rounds, p.repeats)
    plan = paired.looks(p.repeats, cap, p.adaptive_step_rounds)
    last = (paired.spend_at(spending, cap) if spending else
            paired.alpha_spent(1 - p.confidence, plan, cap, p.alpha_spending))
    return Rule(min_effect=p.min_effect, ni_margin=p.ni_margin, max_rounds=cap, final=final,
                alpha_last=last or None, aa_alpha=p.aa_alpha, load=load,
                short_trials=short_trials(cfg))


def short_trials(cfg: Config) -> str:
    """The trials are a few steps with no time floor (the quick protocol's), in one line;
    "" otherwise. Under load such a trial is at the mercy of one burst."""
    p = cfg.protocol
    floor = p.measured_min_s > 0 or (p.pairing != "process" and p.paired_min_s > 0)
    if p.measured_steps >= MIN_STEPS_UNDER_LOAD or floor:
        return ""
    return (f"{p.measured_steps} measured step(s) a trial and no time floor "
            "(protocol.measured_steps, protocol.measured_min_s: the quick protocol's)")


def detected_load(cfg: Config, run_dir: Path, trials: Any) -> str:
    """The load this campaign's timings met, in one line ("" when none was detected): an ok
    trial still measured under more than protocol.interference_cores after its re-runs, or a
    load found persistent; where no trial measures its own interference (a command's trials),
    a busy sample before an invocation (machine_load.json). A busy sample alone does not count
    where the trials measured their own load and found it gone."""
    records = trials.to_dict("records") if hasattr(trials, "to_dict") else list(trials)
    cores = cfg.protocol.interference_cores
    said = []
    under = [_interference(r)["others_cores"] for r in records if interfered(r, cores)]
    if under:
        said.append(f"{len(under)} trial(s) measured while other processes took more than "
                    f"{cores:g} cores (up to {max(under):.2f})")
    doc = _read_optional(run_dir / "machine_load.json") or {}
    measured = any(r.get("status") == Status.OK and
                   _interference(r).get("others_cores") is not None for r in records)
    if doc.get("persistent") or not measured:
        for m in [doc, *[x for x in doc.get("later") or [] if isinstance(x, dict)]]:
            said += [f"before the campaign: {x}" for x in m.get("problems") or []
                     if f"before the campaign: {x}" not in said]
    return "; ".join(said)


def planned_spending(cfg: Config, run_dir: Path, done: dict[str, dict[str, Any]]
                     ) -> list[list[float]]:
    """The error-rate spending over the looks, frozen in plan.json at the first plan: a resume
    keeps what the looks already on disk spent and gives later looks only what is left
    (orchestrator.core.paired.extend_spending), so an extension never re-spends alpha."""
    p = cfg.protocol
    frozen = read_spending(run_dir)
    if not frozen:
        return fresh_spending(cfg)
    taken = 1 + max((int(r.get("round", -1)) for r in done.values()), default=-1)
    plan = paired.looks(p.repeats, max(p.max_rounds, p.repeats), p.adaptive_step_rounds)
    return paired.extend_spending(frozen, 1 - p.confidence, plan, taken, p.alpha_spending)


def fresh_spending(cfg: Config) -> list[list[float]]:
    """The protocol's own schedule over its planned looks (a campaign's first plan)."""
    p = cfg.protocol
    plan = paired.looks(p.repeats, max(p.max_rounds, p.repeats), p.adaptive_step_rounds)
    return paired.spending_schedule(1 - p.confidence, plan, p.alpha_spending)


def _plan_section(run_dir: Path, key: str) -> dict[str, Any] | None:
    """plan.json's ``key`` where it is a mapping (None: no plan, unreadable, or absent)."""
    try:
        doc = read_json(run_dir / "plan.json")
    except (OSError, ValueError):
        return None
    got = doc.get(key) if isinstance(doc, dict) else None
    return got if isinstance(got, dict) else None


def read_sizing(run_dir: Path) -> dict[str, Any] | None:
    """plan.json's ``sizing`` (a command's trials sized by time), or None."""
    return _plan_section(run_dir, "sizing")


def read_spending(run_dir: Path) -> list[list[float]] | None:
    got = _plan_section(run_dir, "spending")
    return [[int(r), float(a)] for r, a in got["looks"]] if got is not None else None


def _analyze_decide(cfg: Config, run_dir: Path, arms: list[ResolvedArm],
                    final: bool = True) -> tuple[Analysis, list[Verdict]]:
    buckets = selected_buckets(cfg)
    trials_df, steps_df = load_trials(run_dir)
    weights = {b["name"]: float(b["weight"]) for b in buckets}
    running = with_control(cfg, arms)
    control = running[1] if cfg.protocol.aa_arm else None
    spending = read_spending(run_dir)
    analysis = analyze(trials_df, steps_df, arms, [b["name"] for b in buckets], weights,
                       cfg.protocol, control=control, spending=spending)
    gates = loss_trajectory_gates(cfg, trials_df, steps_df, arms)
    rule = rule_for(cfg, final, spending, detected_load(cfg, run_dir, trials_df))
    return analysis, decide(analysis, rule, gates)


def speedup_table(analysis: Analysis, arm_id: str) -> dict[str, Any]:
    """Per bucket (and the mixture): speedup with its interval, for the decision log."""
    out: dict[str, Any] = {}
    for (bucket, aid), c in analysis.comparisons.items():
        if aid == arm_id:
            e = c.estimate
            out[bucket] = None if e is None else {
                "speedup": e.speedup, "low": e.low, "high": e.high, "confidence": e.confidence}
    return out


def noise_table(analysis: Analysis) -> dict[str, Any]:
    """Per bucket (and the mixture): the A/A noise floor and the A/A interval it comes from;
    empty without an A/A control arm. Written to decisions.jsonl for the reports."""
    out: dict[str, Any] = {}
    for scope, c in analysis.noise.items():
        e = c.estimate
        out[scope] = {"noise_floor": c.noise_floor, "paired_rounds": c.paired_rounds,
                      "aa": None if e is None else {"speedup": e.speedup, "low": e.low,
                                                     "high": e.high, "confidence": e.confidence}}
    return out


def write_lineage(cfg: Config, run_dir: Path) -> None:
    """baseline=vN: lineage.json records the version the campaign runs against and its
    lineage (v0 ... vN, each step's measured speedup, the verified cumulative one). A resume
    keeps the first record: the campaign ran against that version."""
    if not cfg.baseline or (run_dir / LINEAGE_FILE).exists():
        return
    atomic_write_json(run_dir / LINEAGE_FILE,
                      lineage(Ledger(cfg.baselines_dir, cfg.workload.name), cfg.baseline))


def lineage_section(run_dir: Path) -> list[Section]:
    doc = _read_optional(run_dir / LINEAGE_FILE)
    return [Section("Baseline lineage", lineage_lines(doc))] if doc else []


def _render_summary(run_dir: Path) -> None:
    """summary.md, summary.html and plots/ for this campaign; a failure here never loses the
    campaign's results (they are already on disk), it is logged."""
    try:
        render_summary(load_campaign(run_dir), with_plots=True, force=True)
    except Exception as exc:  # plotting must not take a finished campaign down
        log.warning("summary.md not rendered: %s: %s", type(exc).__name__, exc)


@dataclass
class Outcome:
    """What the campaign decided from the records on disk, and what its sections read."""

    analysis: Analysis
    verdicts: list[Verdict]
    trials_df: Any
    steps_df: Any
    records: list[dict[str, Any]]
    directions: dict[str, Any]
    peaks: list[Any]
    util: list[Any]


def finalize(cfg: Config, run_dir: Path, arms: list[ResolvedArm] | None = None,
             session: provenance.Session | None = None) -> CampaignResult:
    """Collect the trials on disk, analyze, decide and write the campaign's artifacts; the
    last step sanitizes every file of the run directory."""
    assert cfg.sweep is not None
    arms = arms if arms is not None else resolve_arms(cfg)
    if session is None:
        session = provenance.Session(Sanitizer.from_config(cfg.sanitize))
    out = decide_from_disk(cfg, run_dir, arms)
    write_tables(run_dir, arms, out)
    # applies the environment policy to the verdicts (in place) before they are written
    provenance_section = provenance.environment_section(cfg, run_dir, out.records, out.verdicts,
                                                        session.git, arms=arms)
    # the user's code per arm; a revision changing a frozen path invalidates its verdict
    code = revisions.code_section(cfg, run_dir, out.verdicts)
    write_decisions_jsonl(cfg, run_dir, out)
    atomic_write_text(run_dir / "decisions.md", decisions_md(cfg, run_dir, arms, out,
                                                             provenance_section, code))
    _render_summary(run_dir)
    # logged before the seal: campaign.log gets this line sanitized (the run dir's path names
    # the home directory and the user)
    log.info("%s", terminal_summary(cfg.sweep.name, out.verdicts, str(run_dir)))
    session.seal(run_dir)
    return CampaignResult(run_dir, out.analysis, out.verdicts)


def decide_from_disk(cfg: Config, run_dir: Path, arms: list[ResolvedArm]) -> Outcome:
    """The final look: the analysis of every record on disk, the gates (the correctness
    probes' and the logged-loss ones), the verdicts, the direction checks, the utilization."""
    buckets = selected_buckets(cfg)
    trials_df, steps_df = load_trials(run_dir)
    weights = {b["name"]: float(b["weight"]) for b in buckets}
    control = with_control(cfg, arms)[1] if cfg.protocol.aa_arm else None
    spending = read_spending(run_dir)
    analysis = analyze(trials_df, steps_df, arms, [b["name"] for b in buckets], weights,
                       cfg.protocol, control=control, spending=spending)
    gates = load_gates(run_dir, arms, cfg.protocol.correctness.mode)
    for arm_id, extra in loss_trajectory_gates(cfg, trials_df, steps_df, arms).items():
        gates[arm_id] = gates.get(arm_id, []) + extra
    verdicts = decide(analysis, rule_for(cfg, spending=spending,
                                         load=detected_load(cfg, run_dir, trials_df)), gates)
    records = trials_df.to_dict("records") if not trials_df.empty else []
    directions = direction_checks(cfg, arms, verdicts, records)
    peaks, util = campaign_utilization(records, analysis)
    return Outcome(analysis, verdicts, trials_df, steps_df, records, directions, peaks, util)


def write_tables(run_dir: Path, arms: list[ResolvedArm], out: Outcome) -> None:
    """results.csv (per bucket and arm, with utilization), utilization.json, baseline.json."""
    analysis = out.analysis
    write_csv(run_dir / "results.csv",
              add_utilization_columns(comparison_rows(analysis), out.peaks, out.util))
    atomic_write_json(run_dir / "utilization.json", {
        "schema_version": SCHEMA_VERSION, "peaks": [p.__dict__ for p in out.peaks],
        "rows": [u.__dict__ for u in out.util]})
    base = arms[0]
    atomic_write_json(run_dir / "baseline.json", {
        "schema_version": SCHEMA_VERSION, "arm": base.label,
        "buckets": {b: analysis.summaries[(b, base.arm_id)].__dict__ for b in analysis.buckets},
    })


def write_decisions_jsonl(cfg: Config, run_dir: Path, out: Outcome) -> None:
    """decisions.jsonl: one machine-readable verdict per variant, with its evidence."""
    assert cfg.sweep is not None
    decided_at = time.time()
    noise = noise_table(out.analysis)
    lines = [json.dumps({"schema_version": SCHEMA_VERSION, "sweep": cfg.sweep.name,
                         "workload": cfg.workload.name, "variable": cfg.sweep.variable,
                         "decided_at": decided_at, **v.to_dict(),
                         "speedups": speedup_table(out.analysis, v.arm_id),
                         # per bucket and the mixture: {scope: |A/A speedup - 1|}, and the A/A
                         # intervals; null / {} without an A/A control arm
                         "noise_floor": {k: n["noise_floor"] for k, n in noise.items()} or None,
                         "aa_control": noise,
                         # sweep.microbench: the op's direction against the verdict's, or null
                         "direction_check": (out.directions[v.arm_id].to_dict()
                                             if v.arm_id in out.directions else None)})
             for v in out.verdicts]
    atomic_write_text(run_dir / "decisions.jsonl", "\n".join(lines) + "\n")


def decisions_md(cfg: Config, run_dir: Path, arms: list[ResolvedArm], out: Outcome,
                 provenance_section: Section, code: Sequence[Section] = ()) -> str:
    """decisions.md: the verdicts, then every section of evidence, in reading order."""
    assert cfg.sweep is not None
    records, analysis = out.records, out.analysis
    failures = [r for r in records if r.get("status") not in (Status.OK, None)
                # profiled and microbenchmark trials: in their own sections
                and r.get("kind", "timed") not in ("profile", "microbench")]
    for f in failures:  # where the whole log is, beside its tail
        found = trial_log(run_dir / "trials" / str(f["trial_id"]), f)
        f["log_file"] = str(found.relative_to(run_dir)) if found is not None else None
    sections = [*lineage_section(run_dir),
                *sizing_section(read_sizing(run_dir), records),
                *direction_section(cfg, out.directions),
                Section("Utilization (MFU / HFU)", utilization_section(records, out.peaks, out.util)),
                *lever_sections(cfg, out.trials_df, out.steps_df, analysis),
                Section("Sensitivity", sensitivity_lines(analysis, cfg.protocol, cfg.sweep.variable)),
                *correctness_section(run_dir),
                provenance_section,
                *code,
                *report_sections(cfg.workload.kind, records),
                *profiles_section(cfg, run_dir, arms, analysis, records),
                *rerun_section(records, cfg.protocol.interference_cores,
                               min_effect=cfg.protocol.min_effect, machine=
                               _read_optional(run_dir / "machine_load.json"))]
    return render_decisions(
        sweep=cfg.sweep, workload_name=cfg.workload.name, analysis=analysis,
        verdicts=out.verdicts, env_line=env_line(records), protocol=cfg.protocol,
        launcher=cfg.launcher.name, start_line=start_method_line(records), failures=failures,
        paired_by=next((r["paired_by"] for r in records
                        if isinstance(r.get("paired_by"), str)), ""),
        extra_sections=sections)
