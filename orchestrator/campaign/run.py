"""One campaign = one sweep on one workload: plan, launch, collect, analyze, decide, render.

Works on the plain dataclasses of :mod:`orchestrator.spec.config`; no omegaconf below this line.
Completed trials already in the run directory are kept (resume): re-running on the same run
directory only runs what is missing. The campaign's steps live beside it, one job a module:
:mod:`~orchestrator.campaign.lengths` (trial lengths, the looks' spending, the verdict rule),
:mod:`~orchestrator.campaign.load` (the machine's load), :mod:`~orchestrator.campaign.trials`
(one pass over the trials, their re-runs), :mod:`~orchestrator.campaign.attempts` (a trial's
earlier attempts) and :mod:`~orchestrator.campaign.render` (decisions.md and the tables).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from orchestrator.core.records import TrialKind, joint_rounds, trial_windows
from orchestrator.campaign import caches, calibration, cost, provenance, revisions
from orchestrator.campaign.plan_doc import (AdaptiveRound, CalibrationDoc, CostLogEntry, FirstPlan,
                                            PairingDoc, PlanDoc, PlannerBucket, Sizing)
from orchestrator.platform import rundir
from orchestrator.analysis.analyze import Analysis, analyze
from orchestrator.spec.ledger import LINEAGE_FILE, Ledger, lineage
from orchestrator.spec.config import Config
from orchestrator.core.convert import to_dict
from orchestrator.campaign.gate import load_gates, run_gate
from orchestrator.analysis.decide import Verdict, aa_calibration, decide
from orchestrator.core.errors import ConfigError
from orchestrator.spec.jobs import make_specs
from orchestrator.worker.pairing import plan_facts, plan_specs
from orchestrator.launch.factory import make_launcher
from orchestrator.launch.base import Launcher
from orchestrator.launch.slurm_alloc import plan_entry
from orchestrator.launch.device_probe import DeviceResolved, resolve_device
from orchestrator.analysis.loss_gate import loss_trajectory_gates
from orchestrator.campaign.microbench import direction_checks, run_microbenchmarks
from orchestrator.campaign.profiles import run_profiled_trials
from orchestrator.platform.children import COMMAND_SESSION, kill_recorded
from orchestrator.campaign.progress import Progress
from orchestrator.spec.plan import (
    ArmProgress,
    PlannedTrial,
    control_arm,
    more_rounds_reason,
    next_rounds,
    plan_rounds,
)
from orchestrator.analysis.decisions_md import terminal_summary
from orchestrator.report.load import load_campaign
from orchestrator.report.summary import render_summary
from orchestrator.core.results import (
    SCHEMA_VERSION,
    atomic_write_json,
    atomic_write_text,
    load_trials,
)
from orchestrator.campaign.resume import check_same_plan
from orchestrator.core.sanitize import Sanitizer
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.spec.sweep import (Bucket, ResolvedArm, choose_pairing, like, resolve_arms,
                                     selected_buckets)
from orchestrator.campaign.sizing import size_trials, sized_steps
from orchestrator.analysis.utilization import campaign_utilization
from orchestrator.campaign.lengths import (
    cycles_per_round,
    fresh_spending,
    planned_spending,
    read_sizing,
    read_spending,
    rule_for,
    trial_length,
    components_of,
    first_round_plan,
)
from orchestrator.campaign.load import check_quiet, detected_load, record_machine_load
from orchestrator.campaign.validate import attention_on_resolved_device
from orchestrator.campaign.render import Outcome, decisions_md, write_decisions_jsonl, write_tables
from orchestrator.campaign.trials import TrialPass, completed_trials

log = logging.getLogger(__name__)

# a trial with one of these statuses is final and is not re-run on resume
from orchestrator.core.results import FINAL_STATUSES as FINAL_STATUSES  # noqa: E402



@dataclass
class CampaignResult:
    run_dir: Path
    analysis: Analysis
    verdicts: list[Verdict]


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
            if start.device and hasattr(launcher, "device_kind"):  # Slurm's GPU defaults
                launcher.device_kind = str(start.device.get("kind") or "")
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

    pairing: PairingDoc
    running: list[ResolvedArm]
    buckets: list[Bucket]
    planned: list[PlannedTrial]
    done: dict[str, TrialRecordDict]
    machine: dict[str, Any] | None
    spending: list[list[float]] | None = None  # the looks' error-rate shares (plan.json)
    # what device= resolved to and where (plan.json's device_resolved; launch.device_probe)
    device: DeviceResolved | None = None
    # the calibration record relied on instead of an A/A arm (campaign.calibration)
    calibration: CalibrationDoc | None = None
    first_plan: FirstPlan | None = None  # the first rounds' lengths and why (plan.json)


@dataclass(frozen=True)
class CampaignContext:
    """What a campaign's steps share once it is planned, passed as one: the config, the run
    directory, the sweep's arms and those that run (the A/A control too), the buckets, the plan
    and the pairing the planner chose (None: protocol.pairing's own). Frozen: a step that
    changes the arms (the user's code in its worktree, revisions.materialize) makes another
    context; ``planned`` and ``adaptive_log`` are the campaign's lists, which the adaptive
    rounds extend in place."""

    cfg: Config
    run_dir: Path
    arms: list[ResolvedArm]
    running: list[ResolvedArm]
    buckets: list[Bucket]
    planned: list[PlannedTrial]
    adaptive_log: list[AdaptiveRound]
    pairing: PairingDoc | None = None
    device: DeviceResolved | None = None  # plan.json's device_resolved
    # what the campaign predicted it would spend, when, and a budget's stop (plan.json's cost)
    cost_log: list[CostLogEntry] = field(default_factory=list)
    calibration: CalibrationDoc | None = None  # relied on instead of an A/A arm
    first_plan: FirstPlan | None = None  # the first rounds' lengths and why


def prepare(cfg: Config, run_dir: Path, arms: list[ResolvedArm]) -> Start:
    """Every check before the campaign's first write, and nothing written: the pairing
    (``protocol.pairing=auto`` becomes the planner's choice), a run directory planned for
    other trials (another sweep, arms, buckets, repeats or pairing), a resume on a different
    environment, and a busy machine (refused under protocol.require_quiet). First, what
    ``device=auto`` resolves to where the trials run (a Slurm probe job on a compute node; a
    resume reuses its plan's), which the pairing and the attention pre-flight follow."""
    p = cfg.protocol
    device = resolve_device(cfg, run_dir, _planned_device(run_dir))
    attention_on_resolved_device(cfg, arms, device)
    pairing_choice, pairing_why = choose_pairing(cfg, with_control(cfg, arms),
                                                 device_kind=device.get("kind"))
    p.pairing = pairing_choice
    reused = _calibration(cfg, run_dir, arms, device)  # may turn protocol.aa_arm off
    # cast: the mode's own facts (pairing.plan_facts) are keys PairingDoc declares
    pairing_doc = cast(PairingDoc, {"mode": pairing_choice, "why": pairing_why,
                                    **plan_facts(cfg, len(with_control(cfg, arms)))})
    running = with_control(cfg, arms)
    buckets = selected_buckets(cfg)
    first_steps, first = _first_plan(cfg, run_dir, arms, device)
    planned = plan_rounds(
        [a.arm_id for a in running], [b["name"] for b in buckets], range(p.repeats),
        reverse_every_other_round=p.reverse_every_other_round, order=p.order, seed=str(p.seed),
        steps=first_steps,
    )
    check_same_plan(run_dir, json.loads(json.dumps(_plan_doc(
        CampaignContext(cfg, run_dir, arms, running, buckets, planned, [], pairing_doc,
                        device, calibration=reused, first_plan=first)))))
    done = completed_trials(run_dir)
    provenance.check_resume_environment(cfg, run_dir, list(done.values()))
    machine = None if cfg.launcher.name == "slurm" else check_quiet(cfg)  # Slurm: elsewhere
    return Start(pairing_doc, running, buckets, planned, done, machine,
                 planned_spending(cfg, run_dir, done), device, reused, first)


def _first_plan(cfg: Config, run_dir: Path, arms: list[ResolvedArm],
                device: DeviceResolved) -> tuple[dict[str, int], FirstPlan]:
    """The first rounds' measured steps per bucket, sized by cost from a calibration record's
    variance components (lengths.first_round_plan), and plan.json's record of it. A resume
    follows its plan's."""
    plan = _read_plan(run_dir)
    got = plan.get("first_plan")
    if "trials" in plan:  # a resume: its plan's first rounds, sized or not
        if not isinstance(got, dict):
            return {}, {"why": "a resume of a campaign planned without first_plan"}
        buckets = got.get("buckets") or {}
        return ({b: int(d["choice"]) for b, d in buckets.items()
                 if isinstance(d, dict) and d.get("choice")}, cast(FirstPlan, got))
    comps, line = calibration.components(cfg, calibration.key_of(cfg, arms, device))
    return first_round_plan(cfg, comps, line)


def _calibration(cfg: Config, run_dir: Path, arms: list[ResolvedArm],
                 device: DeviceResolved) -> CalibrationDoc | None:
    """protocol.aa_arm with a fresh calibration record of this machine, workload and pairing:
    the record (the A/A arm is turned off for this campaign), else None. A resume follows its
    plan: the record it relied on, or the control arm it planned."""
    try:
        doc = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if isinstance(doc, dict) and "trials" in doc:
        got = doc.get("calibration")
        if isinstance(got, dict) and not doc.get("control_arm"):
            cfg.protocol.aa_arm = False
            return cast(CalibrationDoc, got)
        return None
    rec, why = calibration.reusable(cfg, calibration.key_of(cfg, arms, device))
    if rec is None:
        if cfg.protocol.aa_arm:
            log.info("A/A control: runs (%s)", why)
        return None
    cfg.protocol.aa_arm = False
    log.info("A/A control: not run; relying on %s", rec.line())
    return cast(CalibrationDoc, {**asdict(rec), "line": rec.line()})


def _planned_device(run_dir: Path) -> DeviceResolved | None:
    """A resumed plan's ``device_resolved`` (None: none recorded, or no readable plan)."""
    try:
        doc = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    got = doc.get("device_resolved") if isinstance(doc, dict) else None
    return cast(DeviceResolved, got) if isinstance(got, dict) else None


def _campaign(cfg: Config, run_dir: Path, launcher: Launcher, overrides: list[str] | None,
              arms: list[ResolvedArm], start: Start) -> CampaignResult:
    p = cfg.protocol
    max_rounds = max(p.max_rounds, p.repeats)  # validate() refuses max_rounds < repeats
    log.info("pairing: %s (%s)", start.pairing["mode"], start.pairing["why"])
    launcher = cost.Meter(launcher, run_dir)  # every process's node time, in costs.jsonl
    launcher.recover()  # a resume: trials of a killed earlier invocation stop before replanning
    if cfg.launcher.name != "slurm":  # Slurm's trials ran on other machines (recover() above)
        kill_orphans(run_dir)
    if start.machine is not None:
        record_machine_load(run_dir, start.machine)
    running, buckets, planned = start.running, start.buckets, start.planned
    ctx = CampaignContext(cfg, run_dir, arms, running, buckets, planned, [], start.pairing,
                          start.device, _earlier_cost_log(run_dir), start.calibration,
                          start.first_plan)
    # first: a campaign stopped from here resumes; a resume's extended spending is written now
    _write_plan(ctx, spending=start.spending)
    # the user's code: each arm's revision in its worktree (source.revision), its state
    arms, running = revisions.materialize(cfg, run_dir, arms, running)
    ctx = replace(ctx, arms=arms, running=running)
    caches.note_arms(cfg, running)  # in use: no other campaign's eviction takes them
    session = provenance.start(cfg, run_dir, arms, list(start.done.values()), overrides,
                               code_lines=revisions.source_lines(running))
    atomic_write_json(run_dir / "config.json", {"schema_version": SCHEMA_VERSION, **to_dict(cfg)})
    write_lineage(cfg, run_dir)
    run_gate(cfg, run_dir, arms, buckets, launcher)  # once per campaign, through its launcher
    # a command's trials sized by time from a pilot per bucket (before the first round)
    sizing = size_trials(cfg, run_dir, running, buckets, planned, launcher, start.done,
                         start.first_plan)
    if sizing is not None:
        _write_plan(ctx, spending=start.spending, sizing=sizing)
    rounds_done = p.repeats
    # one display for the whole invocation: the total is the plan (done trials included),
    # raised as adaptive rounds extend it
    assert cfg.sweep is not None  # validate() refuses a campaign without one
    progress = Progress(cfg.sweep.name, len(planned))
    _predict_from_record(ctx, max_rounds)
    try:
        _run_rounds(ctx, launcher, session, progress, rounds_done, max_rounds)
    finally:
        progress.close()
    # profiled trials: a separate step after the timed ones, never in timing statistics
    run_profiled_trials(cfg, run_dir, arms, launcher, set(completed_trials(run_dir)))
    # the sweep's microbenchmark per arm (sweep.microbench): its direction against the verdict
    run_microbenchmarks(cfg, run_dir, arms, launcher, set(completed_trials(run_dir)))
    session.sanitizer.add_hostnames(launcher.seen_hostnames)  # before the seal
    return finalize(cfg, run_dir, arms, session)


def _run_rounds(ctx: CampaignContext, launcher: Launcher, session: provenance.Session,
                progress: Any, rounds_done: int, max_rounds: int) -> None:
    """The initial rounds, then adaptive ones while a variant is undecided (``ctx.planned`` and
    ``ctx.adaptive_log`` grow in place)."""
    cfg, run_dir, arms, running, planned = ctx.cfg, ctx.run_dir, ctx.arms, ctx.running, ctx.planned
    adaptive_log, bucket_names = ctx.adaptive_log, [b["name"] for b in ctx.buckets]
    p = cfg.protocol
    planner: dict[str, PlannerBucket] | dict[str, str]  # per bucket, or why none
    while True:
        _write_plan(ctx, check=not adaptive_log)
        session.sanitize_files(run_dir, ("config.json", "plan.json"))
        for i, upto in enumerate(_chunks(cfg, run_dir, planned)):
            fits, why = cost.affordable(cfg, run_dir, _todo(cfg, run_dir, planned[:upto],
                                                            drop=False))
            if not fits:
                _budget_stop(ctx, why)
                return
            _run_missing(cfg, run_dir, running, planned[:upto], launcher, session, progress,
                         say_done=i == 0)
            _predict(ctx, rounds_done, max_rounds)
        if rounds_done >= max_rounds:
            break
        analysis, verdicts = _analyze_decide(cfg, run_dir, arms, final=False)
        aa_check = aa_calibration(analysis, cfg.protocol.aa_alpha)
        reasons = {
            pr.arm_id: r for pr in _progress(verdicts)
            if (r := more_rounds_reason(pr, rounds_done, max_rounds, aa_check))
        }
        if not reasons:
            break
        rounds = next_rounds(rounds_done, max_rounds, p.adaptive_step_rounds)
        keep = [a.arm_id for a in running if a.is_baseline or a.arm_id in reasons
                or (p.aa_arm and a.arm_id == running[1].arm_id)]
        if trial_windows(p.pairing):  # one arm per process (side by side: duet)
            steps, planner = (trial_length(cfg, run_dir, analysis) if p.plan_trial_length
                              else ({}, {}))
        else:
            steps, planner = (cycles_per_round(cfg, run_dir, analysis) if p.plan_cycles
                              else ({}, cast("dict[str, str]", {
                                  "why": "protocol.plan_cycles is off: every round keeps "
                                         "measured_steps / measured_min_s per arm"})))
            # alternated commands are asked for their steps: every round keeps the pilot's
            steps = {**sized_steps(read_sizing(run_dir)), **steps}
        more = plan_rounds(keep, bucket_names, rounds,
                           reverse_every_other_round=p.reverse_every_other_round,
                           start_position=len(planned), steps=steps, order=p.order,
                           seed=str(p.seed))
        fits, why = cost.affordable(cfg, run_dir, more)
        if not fits:
            _budget_stop(ctx, why, rounds)
            return
        planned += more
        adaptive_log.append({"after_rounds": rounds_done, "added_rounds": rounds,
                             "arms": keep, "reasons": reasons, "planner": planner})
        log.info("adaptive: adding rounds %s for %s", rounds, ", ".join(sorted(reasons)))
        rounds_done = rounds[-1] + 1


def _chunks(cfg: Config, run_dir: Path, planned: list[PlannedTrial]) -> list[int]:
    """How much of the plan each pass runs (prefixes, cut at round boundaries): all of it at
    once when its cost is known and no budget holds it, or when trials run side by side;
    under a budget one round at a time (the first process alone while nothing has shown what
    one costs); otherwise the first round, then the rest, so the prediction comes after one
    round, before the others."""
    ends = [i + 1 for i, t in enumerate(planned)
            if i + 1 == len(planned) or planned[i + 1].round != t.round]
    known = any(x.kind == TrialKind.TIMED and x.node_s > 0 for x in cost.read_spent(run_dir))
    if cost.budget_s(cfg) > 0:
        first = [] if known or joint_rounds(cfg.protocol.pairing) else [1]
        return [*first, *ends]
    # trials side by side (Slurm's jobs per round, a parallel local launcher): one pass, as
    # before; the prediction then comes before the adaptive rounds
    together = cfg.launcher.name == "slurm" or cfg.launcher.max_parallel > 1
    return [len(planned)] if known or together or len(ends) < 2 else [ends[0], len(planned)]


def _predict(ctx: CampaignContext, rounds_done: int, max_rounds: int) -> None:
    """Log and record (plan.json's cost) what the campaign will have spent at its end."""
    cfg, run_dir = ctx.cfg, ctx.run_dir
    left = _todo(cfg, run_dir, ctx.planned, drop=False)
    more = cost.adaptive_processes(cfg, len(ctx.running), len(ctx.buckets), rounds_done)
    guess = cost.predict(cfg, run_dir, left, more if rounds_done < max_rounds else 0)
    _log_prediction(ctx, guess, len(cost.read_spent(run_dir)))


def _log_prediction(ctx: CampaignContext, guess: cost.Prediction | None, after: int,
                    from_record: bool = False) -> None:
    """A prediction made after ``after`` processes (``from_record``: from a calibration
    record's costs, before any timed process): logged and kept (plan.json's cost)."""
    if guess is None:
        return
    log.info("cost: %s; the protocol's margin: %g %%", guess.line(),
             100 * ctx.cfg.protocol.min_effect)
    ctx.cost_log.append(cast(CostLogEntry, {"after_processes": after, **(
        {"from_record": True} if from_record else {}), **guess.to_dict()}))
    _write_plan(ctx)


def _predict_from_record(ctx: CampaignContext, max_rounds: int) -> None:
    """Before the campaign's first process: its prediction from what the processes of the
    campaign that filed a fresh calibration record of this machine, workload, pairing and cache
    mode cost (none: the first prediction comes once a process of its own has ended)."""
    cfg, run_dir = ctx.cfg, ctx.run_dir
    spent = cost.read_spent(run_dir)  # a gate's probes or a sizing pilot may have run
    if any(s.kind == TrialKind.TIMED for s in spent):  # a resume: its own costs decide
        return
    got, line = calibration.costs(cfg, calibration.key_of(cfg, ctx.arms, ctx.device))
    if got is None:
        return
    left = _todo(cfg, run_dir, ctx.planned, drop=False)
    more = cost.adaptive_processes(cfg, len(ctx.running), len(ctx.buckets), cfg.protocol.repeats)
    guess = cost.predict_from_record(cfg, left, more if cfg.protocol.repeats < max_rounds else 0,
                                     got, line, _step_shift(ctx),
                                     sum(s.node_s for s in spent))
    _log_prediction(ctx, guess, len(spent), from_record=True)


def _step_shift(ctx: CampaignContext) -> tuple[float, float]:
    """How much longer (or shorter) this campaign's trials measure steps than the recorded
    campaign's did (its components: median measured steps and step time per bucket), from the
    steps the plan gives its trials (sized by cost or by time): the least and the most over
    its trials, in seconds ((0, 0): none known)."""
    comps = {b: d for b, d in ((ctx.first_plan or {}).get("buckets") or {}).items()
             if isinstance(d, dict) and all(isinstance(d.get(k), (int, float))
                                            for k in ("steps", "step_s"))}
    shifts = [(t.measured_steps - float(comps[t.bucket]["steps"]))
              * float(comps[t.bucket]["step_s"])
              for t in ctx.planned if t.measured_steps and t.bucket in comps]
    return (min(shifts), max(shifts)) if shifts else (0.0, 0.0)


def _budget_stop(ctx: CampaignContext, why: str, rounds: list[int] | None = None) -> None:
    """protocol.budget_node_hours reached: no more trials; the verdicts rest on those run."""
    what = f"rounds {rounds}" if rounds else "the rest of the initial rounds"
    log.warning("budget: %s: %s not run; the verdicts rest on the trials so far", why, what)
    ctx.cost_log.append({"budget_stop": why, "not_run": what,
                         "spent_node_s": cost.spent_node_s(ctx.run_dir)})
    _write_plan(ctx)


def _earlier_cost_log(run_dir: Path) -> list[CostLogEntry]:
    """A resume's: what earlier invocations predicted (plan.json's cost)."""
    try:
        doc = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
        got = doc.get("cost", {}).get("log", [])
    except (OSError, ValueError, AttributeError):
        return []
    return cast("list[CostLogEntry]",
                [x for x in got if isinstance(x, dict)] if isinstance(got, list) else [])


def kill_orphans(run_dir: Path) -> None:
    """A resume: kill what a dead campaign's commands left running (their watchdogs do it
    unless they were killed too; each running command's session is recorded in its trial
    directory, orchestrator.platform.children.SessionGuard)."""
    for record in sorted(run_dir.glob(f"trials/*/{COMMAND_SESSION}")):
        found = kill_recorded(record)
        if found:
            log.warning("resume: killed %d process(es) an earlier invocation's command left "
                        "running in %s", len(found), record.parent.name)


def _plan_doc(ctx: CampaignContext, spending: list[list[float]] | None = None,
              sizing: Sizing | None = None) -> PlanDoc:
    cfg, arms, running, pairing = ctx.cfg, ctx.arms, ctx.running, ctx.pairing
    assert cfg.sweep is not None
    p = cfg.protocol
    control = [a for a in running if a not in arms]
    return cast(PlanDoc, {
            "schema_version": SCHEMA_VERSION,
            "sweep": cfg.sweep.name,
            "arms": [a.plan_dict() for a in arms],
            "control_arm": control[0].plan_dict() if control else None,
            # no A/A arm: the calibration record relied on instead (campaign.calibration)
            **({"calibration": ctx.calibration} if ctx.calibration else {}),
            "buckets": ctx.buckets,
            "rounds": {"initial": p.repeats, "max": max(p.max_rounds, p.repeats),
                       "adaptive_step": p.adaptive_step_rounds},
            # the first rounds' trial length by cost (a calibration record's components)
            **({"first_plan": ctx.first_plan} if ctx.first_plan else {}),
            "adaptive": ctx.adaptive_log,
            "pairing": pairing or {"mode": p.pairing, "why": "set by protocol.pairing"},
            # how the trials run (Slurm: one job per round and bucket, or one allocation)
            "launcher": plan_entry(cfg.launcher),
            # what device= resolved to and where (a Slurm compute node's probe job, this host)
            **({"device_resolved": ctx.device} if ctx.device else {}),
            # frozen at the first plan; a resume extends it with what is left (planned_spending)
            "spending": {"alpha": 1 - p.confidence, "rho": p.alpha_spending,
                         "looks": spending or fresh_spending(cfg)},
            # a command's trial length from its pilots (orchestrator.campaign.sizing)
            **({"sizing": sizing} if sizing else {}),
            # node time: the budget, each prediction and a budget's stop (campaign.cost)
            "cost": {"budget_node_hours": p.budget_node_hours, "log": ctx.cost_log},
            "trials": [t.to_dict() for t in ctx.planned],
    })


def _write_plan(ctx: CampaignContext, check: bool = False,
                spending: list[list[float]] | None = None,
                sizing: Sizing | None = None) -> None:
    run_dir = ctx.run_dir
    plan_doc = _plan_doc(ctx, spending or read_spending(run_dir), sizing or read_sizing(run_dir))
    if check:  # checked by prepare() before the first write; here for callers that skip it
        check_same_plan(run_dir, json.loads(json.dumps(plan_doc)))
    atomic_write_json(run_dir / "plan.json", plan_doc)


def _run_missing(cfg: Config, run_dir: Path, running: list[ResolvedArm],
                 planned: list[PlannedTrial],
                 launcher: Launcher, session: provenance.Session, progress: Any = None,
                 say_done: bool = True) -> None:
    """Run the planned trials not yet on disk (under pairing by steps a round's arms are
    measured together or not at all), then re-run what a harness failure or interference
    spoiled; an interrupt seals what is on disk."""
    todo = _todo(cfg, run_dir, planned, say=say_done)
    own_progress = progress is None
    if own_progress:
        progress = Progress(cfg.sweep.name if cfg.sweep else "campaign", len(planned))
    # a prefix of the plan (campaign chunks): the display keeps the whole plan's total
    progress.plan(max(len(planned), getattr(progress, "total", 0)), len(planned) - len(todo))
    try:
        if todo:
            TrialPass(cfg, run_dir, launcher, session, progress).run(
                plan_specs(cfg, make_specs(cfg, run_dir, running, todo), running), planned,
                running)
    except BaseException:  # interrupted: what is on disk stays, sanitized
        session.seal(run_dir)
        raise
    finally:
        if own_progress:
            progress.close()


def _todo(cfg: Config, run_dir: Path, planned: list[PlannedTrial],
          drop: bool = True, say: bool = True) -> list[PlannedTrial]:
    """The planned trials still to run (``drop``: an open paired session's records go, to be
    measured again; False: only say which; ``say``: log how many were complete already)."""
    done = completed_trials(run_dir)
    todo = [t for t in planned if t.trial_id not in done]
    if joint_rounds(cfg.protocol.pairing):  # a round's arms are measured together
        open_sessions = {(t.round, t.bucket) for t in todo}
        todo = [t for t in planned if (t.round, t.bucket) in open_sessions]
        for t in todo if drop else []:  # a session's records are all re-measured
            (run_dir / "trials" / t.trial_id / "trial.json").unlink(missing_ok=True)
    if done and todo and drop and say:
        log.info("%s: %d of %d planned trials already complete", run_dir,
                 len(planned) - len(todo), len(planned))
    return todo


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


def write_lineage(cfg: Config, run_dir: Path) -> None:
    """baseline=vN: lineage.json records the version the campaign runs against and its
    lineage (v0 ... vN, each step's measured speedup, the verified cumulative one). A resume
    keeps the first record: the campaign ran against that version."""
    if not cfg.baseline or (run_dir / LINEAGE_FILE).exists():
        return
    atomic_write_json(run_dir / LINEAGE_FILE,
                      lineage(Ledger(cfg.baselines_dir, cfg.workload.name), cfg.baseline))


def _render_summary(run_dir: Path) -> None:
    """summary.md, summary.html and plots/ for this campaign; a failure here never loses the
    campaign's results (they are already on disk), it is logged."""
    try:
        render_summary(load_campaign(run_dir), with_plots=True, force=True)
    except Exception as exc:  # plotting must not take a finished campaign down
        log.warning("summary.md not rendered: %s: %s", type(exc).__name__, exc)


def finalize(cfg: Config, run_dir: Path, arms: list[ResolvedArm] | None = None,
             session: provenance.Session | None = None) -> CampaignResult:
    """Collect the trials on disk, analyze, decide and write the campaign's artifacts; the
    last step sanitizes every file of the run directory."""
    assert cfg.sweep is not None
    arms = arms if arms is not None else resolve_arms(cfg)
    if session is None:
        session = provenance.Session(Sanitizer.from_config(cfg.sanitize))
    out = decide_from_disk(cfg, run_dir, arms)
    _file_calibration(cfg, run_dir, arms, out.analysis)
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
    caches.finish(cfg, run_dir, with_control(cfg, arms))
    # logged before the seal: campaign.log gets this line sanitized (the run dir's path names
    # the home directory and the user)
    log.info("%s", terminal_summary(cfg.sweep.name, out.verdicts, str(run_dir)))
    session.seal(run_dir)
    return CampaignResult(run_dir, out.analysis, out.verdicts)


def _file_calibration(cfg: Config, run_dir: Path, arms: list[ResolvedArm],
                      analysis: Analysis) -> None:
    """A campaign that ran the A/A arm files its check for later campaigns to rely on; one
    that relied on a record says so beside each A/A line of decisions.md."""
    plan = _read_plan(run_dir)
    if analysis.control is None:
        got = plan.get("calibration")
        if isinstance(got, dict):
            analysis.calibration_note = str(got.get("line") or "")
        return
    key = calibration.key_of(cfg, arms, plan.get("device_resolved"))
    comps = None
    if trial_windows(cfg.protocol.pairing):  # what sizes the first rounds
        comps = components_of(trial_length(cfg, run_dir, analysis)[1])
    calibration.record(cfg, run_dir, key, analysis,
                       not aa_calibration(analysis, cfg.protocol.aa_alpha), comps,
                       cost.recorded_costs(cost.read_spent(run_dir)))


def _read_plan(run_dir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


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
    records = cast("list[TrialRecordDict]",  # trial.json's, as the table's rows
                   trials_df.to_dict("records")) if not trials_df.empty else []
    directions = direction_checks(cfg, arms, verdicts, records)
    peaks, util = campaign_utilization(records, analysis)
    return Outcome(analysis, verdicts, trials_df, steps_df, records, directions, peaks, util)
