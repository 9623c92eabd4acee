"""The campaign's sizing maths: how long the next rounds' trials are (one arm per process:
:func:`trial_length`; paired by steps: :func:`cycles_per_round`), the error rate each look
spends (frozen in plan.json at the first plan, :func:`planned_spending`), and the verdict rule
of the protocol (:func:`rule_for`). Arithmetic over the records on disk and plan.json: nothing
here launches a trial or writes a file.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

from orchestrator.core.records import Pairing, TrialKind, joint_rounds, trial_windows
from orchestrator.analysis.analyze import (
    Analysis,
    paired_blocks,
    reference_times_by_trial,
    step_times_by_trial,
)
from orchestrator.analysis.decide import MIN_STEPS_UNDER_LOAD, Rule
from orchestrator.core import paired, stats
from orchestrator.core.reference import normalise
from orchestrator.core.results import Status, load_trials, read_json
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.campaign.plan_doc import FirstPlan, PlannerBucket, Sizing
from orchestrator.spec.config import Config
from orchestrator.worker.trial import MAX_MEASURED_STEPS

# the campaign's one logger, as campaign/progress's: these lines are the run's (campaign.log,
# and the tests that listen to "orchestrator.campaign.run")
log = logging.getLogger("orchestrator.campaign.run")


def trial_length(cfg: Config, run_dir: Path, analysis: Analysis) -> tuple[
        dict[str, int], dict[str, PlannerBucket]]:
    """Measured steps per trial for the next rounds, per bucket, from the variance components
    of the rounds so far (orchestrator.core.paired.optimal_steps), and the planner's record for
    plan.json: the components, the measured fixed cost and step time, the choice and why."""
    trials_df, steps_df = load_trials(run_dir)
    by_trial = step_times_by_trial(steps_df)
    if analysis.speed_normalised:
        by_trial = normalise(by_trial, reference_times_by_trial(steps_df))
    ok = trials_df[(trials_df["status"] == Status.OK) & (trials_df.get("kind", TrialKind.TIMED) == TrialKind.TIMED)]
    sizing = read_sizing(run_dir) or {}
    steps: dict[str, int] = {}
    doc: dict[str, PlannerBucket] = {}
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
        doc[bucket] = cast(PlannerBucket, {"choice": n, "why": why, **comp.__dict__})
        log.info("planner: %s: %d measured steps per trial (%s)", bucket, n, why)
    return steps, doc


# pairing=steps: the most measured time per arm one process gets from the cycles planner
MAX_PAIRED_MEASURED_S = 60.0


def cycles_per_round(cfg: Config, run_dir: Path, analysis: Analysis) -> tuple[
        dict[str, int], dict[str, PlannerBucket]]:
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
    ok = trials_df[(trials_df["status"] == Status.OK) & (trials_df.get("kind", TrialKind.TIMED) == TrialKind.TIMED)]
    if "pairing" in ok:
        ok = ok[ok["pairing"] == Pairing.steps]
    base = analysis.arms[0].arm_id
    k = cfg.protocol.block_steps
    steps: dict[str, int] = {}
    doc: dict[str, PlannerBucket] = {}
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
        doc[bucket] = cast(PlannerBucket, {
            "choice_cycles": n, "choice": n * k, "why": why.replace(
                "step ", "cycle ").replace("steps do not", "cycles do not"), **comp.__dict__})
        log.info("planner: %s: %d cycles of %d steps per arm (%s)", bucket, n, k, doc[bucket]["why"])
    return steps, doc


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
    floor = p.measured_min_s > 0 or (joint_rounds(p.pairing) and p.paired_min_s > 0)
    if p.measured_steps >= MIN_STEPS_UNDER_LOAD or floor:
        return ""
    return (f"{p.measured_steps} measured step(s) a trial and no time floor "
            "(protocol.measured_steps, protocol.measured_min_s: the quick protocol's)")


def planned_spending(cfg: Config, run_dir: Path, done: dict[str, TrialRecordDict]
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


def read_sizing(run_dir: Path) -> Sizing | None:
    """plan.json's ``sizing`` (a command's trials sized by time), or None."""
    return cast("Sizing | None", _plan_section(run_dir, "sizing"))


def read_spending(run_dir: Path) -> list[list[float]] | None:
    got = _plan_section(run_dir, "spending")
    return [[int(r), float(a)] for r, a in got["looks"]] if got is not None else None


ComponentField = Literal["sigma_within", "sigma_between", "steps", "step_s", "fixed_s"]
COMPONENT_FIELDS: tuple[ComponentField, ...] = ("sigma_within", "sigma_between", "steps", "step_s",
                                               "fixed_s")


def components_of(planner: Mapping[str, PlannerBucket]) -> dict[str, dict[str, float]]:
    """The variance components per bucket of a :func:`trial_length` record (buckets it could
    not fit are left out), for a calibration record."""
    return {b: {k: float(doc[k]) for k in COMPONENT_FIELDS}
            for b, doc in planner.items()
            if isinstance(doc, dict) and all(isinstance(doc.get(k), (int, float))
                                             for k in COMPONENT_FIELDS)}


def rounds_at_margin(cfg: Config, comp: paired.Components, n: int) -> int | None:
    """Rounds (one process per arm each) after which an effect at the protocol's margin
    (``min_effect``) is resolved, the components holding: a round's contrast of two arms has
    variance 2 (sigma_b^2 + (pi/2) sigma_w^2 / n); at most the protocol's last round (None:
    it is not resolved by then)."""
    p = cfg.protocol
    cap = max(p.max_rounds, p.repeats)
    se1 = math.sqrt(2 * (comp.sigma_between ** 2 + (math.pi / 2) * comp.sigma_within ** 2 / n))
    if se1 <= 0:
        return p.repeats
    return paired.rounds_for(math.log1p(p.min_effect), se1, 1, 0, 1 - p.confidence, 0.0,
                             cap) if cap > 1 else None


def first_round_plan(cfg: Config, components: dict[str, dict[str, float]] | None,
                     source: str) -> tuple[dict[str, int], FirstPlan]:
    """One arm per process: the first rounds' measured steps per bucket by Kalibera and Jones
    from the start, from the variance components and costs a calibration record of this
    machine, workload and pairing kept (``source`` names it), and the rounds a decision at the
    protocol's margin is then expected to take (plan.json's ``first_plan``). Without a record
    the first rounds run the protocol's window and :func:`trial_length` sizes the next ones."""
    p = cfg.protocol
    if not trial_windows(p.pairing):
        return {}, {"why": f"pairing={p.pairing}: the cycles planner sizes the rounds after "
                           "the first look"}
    if not p.plan_trial_length:
        return {}, {"why": "protocol.plan_trial_length is off: every round keeps "
                           "measured_steps / measured_min_s"}
    if not components:
        return {}, {"why": "no variance components of this machine, workload and pairing on "
                           "record yet: the first rounds run the protocol's window; the "
                           "planner sizes the next rounds from them"}
    steps: dict[str, int] = {}
    doc: FirstPlan = {"from": source, "buckets": {}}
    for bucket, fields in components.items():
        comp = paired.Components(**{k: float(fields[k]) for k in COMPONENT_FIELDS})
        floor = paired.window_floor(p.measured_steps, p.measured_min_s, comp.step_s)
        n, why = paired.optimal_steps(comp, min(floor, MAX_MEASURED_STEPS), MAX_MEASURED_STEPS)
        rounds = rounds_at_margin(cfg, comp, n)
        per_process_s = comp.fixed_s + n * comp.step_s
        steps[bucket] = n
        doc["buckets"][bucket] = cast(PlannerBucket, {
            "choice": n, "why": why, **fields,
            "expected_rounds": rounds, "process_s": round(per_process_s, 3),
            "rounds_why": (f"an effect at the margin ({100 * p.min_effect:g} %) is resolved "
                           f"after {rounds} round(s) of one process per arm, the recorded "
                           "noise holding" if rounds is not None else
                           f"an effect at the margin ({100 * p.min_effect:g} %) is not "
                           "expected to be resolved within protocol.max_rounds at this noise")})
        log.info("planner: %s: first rounds %d measured steps per trial (%s); %s", bucket, n,
                 why, doc["buckets"][bucket]["rounds_why"])
    return steps, doc
