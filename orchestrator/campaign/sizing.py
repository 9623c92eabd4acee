"""Trials sized by time where their length is fixed before they run (a ``command``'s
``{steps}``).

An in-process trial keeps measuring until it has ``protocol.measured_min_s`` of step time. A
command is told its step count up front, so ``measured_steps`` alone would time a 5 ms step
for 50 ms: a window one host hiccup decides. Before the first round, one pilot trial per
bucket runs the baseline arm with the protocol's steps (``trials/pilot-<bucket>``, kind
``pilot``: never in the timing statistics; it also pays the first run's cold caches, which
would otherwise fall on round 0's baseline). From its median step time the campaign sets
every trial of the first rounds to

    measured_steps = ceil(MARGIN x measured_min_s / step time)

(at least protocol.measured_steps, at most MAX_MEASURED_STEPS; MARGIN leaves room for a
variant faster than the baseline), the same for every arm, so each trial does the same work.
Adaptive rounds keep the floor from all trials' step times (campaign.lengths.trial_length). A
bucket whose baseline step time a fresh calibration record of this machine, workload and pairing
holds (plan.json's ``first_plan``, campaign.calibration) is sized from it and runs no pilot. The
sizing is recorded in plan.json (``sizing``) and said in decisions.md; a resume reads it back
from the pilot records on disk. A command that does not take ``{steps}`` cannot be sized: the
record says so and every trial measures what the command runs.

Paired by steps, a plain command's arms take turns as processes of their own
(orchestrator.worker.pairing.alternation): each arm measures until its time floor (the larger of
measured_min_s and paired_min_s) within its round, so the pilot sizes that floor, and the
commands are asked for enough steps for it (and stopped when it is met).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from orchestrator.core.records import Pairing, TrialKind
from orchestrator.core.results import Status
from orchestrator.core.section import Section
from orchestrator.campaign.plan_doc import BucketSizing, FirstPlan, Sizing
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.launch.base import Launcher
from orchestrator.spec.config import Config
from orchestrator.spec.jobs import TrialSpec, make_specs
from orchestrator.spec.plan import PlannedTrial, slug
from orchestrator.spec.sweep import Bucket, ResolvedArm, alternates
from orchestrator.worker.trial import MAX_MEASURED_STEPS

log = logging.getLogger(__name__)

MARGIN = 1.25  # a variant up to 20 % faster than the baseline still fills the window


def pilot_trial_id(bucket: str) -> str:
    return f"pilot-{slug(bucket)}"


def needs_sizing(cfg: Config, arms: Sequence[ResolvedArm]) -> bool:
    """A command's trials are sized by a pilot; paired by steps through its trainer's
    orchestrator.client the paired trial measures each arm until measured_min_s itself, while
    alternated arms are asked for their steps up front (:func:`target_s`)."""
    return (cfg.workload.sized_before_run() and cfg.protocol.measured_min_s > 0
            and (cfg.protocol.pairing != Pairing.steps or alternates(arms)))


def target_s(cfg: Config, arms: Sequence[ResolvedArm]) -> float:
    """The measured time a sized trial is for: an alternated arm's is its round's floor."""
    p = cfg.protocol
    if p.pairing == Pairing.steps and alternates(arms):
        return max(p.measured_min_s, p.paired_min_s)
    return p.measured_min_s


def sized_steps(sizing: Sizing | None) -> dict[str, int]:
    """bucket -> the measured steps its pilot sized (plan.json's ``sizing``)."""
    return {name: int(cast(int, e["measured_steps"])) for name, e in ((sizing or {}).get("buckets") or {}
                                                            ).items() if e.get("measured_steps")}


def recorded_step_times(first_plan: FirstPlan | None) -> tuple[dict[str, float], str]:
    """(bucket -> the baseline's step time a fresh calibration record kept, the record's line)
    from plan.json's ``first_plan`` (campaign.lengths.first_round_plan): those buckets need no
    pilot. A resume reads the same from its plan, so it runs the pilots its campaign ran."""
    doc = first_plan or {}
    got = {b: float(d["step_s"]) for b, d in (doc.get("buckets") or {}).items()
           if isinstance(d, dict) and _number(d.get("step_s")) and float(d["step_s"]) > 0}
    return got, str(doc.get("from") or "")


def size_trials(cfg: Config, run_dir: Path, running: Sequence[ResolvedArm],
                buckets: Sequence[Bucket], planned: list[PlannedTrial],
                launcher: Launcher, done: dict[str, TrialRecordDict],
                first_plan: FirstPlan | None = None) -> Sizing | None:
    """Run the pilots not yet on disk, size ``planned`` in place (trials the planner has not
    set longer) and return plan.json's ``sizing`` record (None: nothing to size). A bucket
    whose baseline step time a fresh calibration record holds (``first_plan``) is sized from it,
    without a pilot: the pilot is a whole process (its start-up, compile and warm-up) spent to
    learn one number the record already has."""
    if not needs_sizing(cfg, running):
        return None
    p = cfg.protocol
    target = target_s(cfg, running)
    alternated = p.pairing == Pairing.steps
    base = running[0]
    if cfg.workload.steps_asked(p.warmup_steps, p.measured_steps) is None:
        return {"target_s": target, "alternated": alternated, "buckets": {}, "why": (
            "the command does not take {steps} (or {measured_steps}): its trials cannot be "
            "sized by time and measure what it runs; add --steps {steps} (or your trainer's "
            "flag) to the command")}
    recorded, source = recorded_step_times(first_plan)
    # a resume of a campaign whose pilot ran keeps the pilot's sizing
    recorded = {b: t for b, t in recorded.items() if pilot_trial_id(b) not in done}
    pilots = [PlannedTrial(pilot_trial_id(b["name"]), -1 - i, 0, b["name"], base.arm_id)
              for i, b in enumerate(buckets) if b["name"] not in recorded]
    specs = [dataclasses.replace(s, kind="pilot")
             for s in make_specs(cfg, run_dir, [base], pilots)]
    todo = [s for s in specs if s.trial_id not in done]
    records = {s.trial_id: done[s.trial_id] for s in specs if s.trial_id in done}
    if todo:
        log.info("sizing: %d pilot trial(s) of %s to learn the step time (never in the timing "
                 "statistics)", len(todo), base.label)

        def on_done(spec: TrialSpec, record: TrialRecordDict) -> None:
            records[spec.trial_id] = record

        launcher.run(todo, on_done, p.trial_timeout_s)
    doc: Sizing = {"target_s": target, "margin": MARGIN, "buckets": {},
                   "alternated": alternated}
    steps: dict[str, int] = {}
    for b in buckets:
        name = b["name"]
        entry = (sized_from_record(recorded[name], source, p.measured_steps, target)
                 if name in recorded else
                 sized_bucket(records.get(pilot_trial_id(name), cast("TrialRecordDict", {})),  # {}: no pilot
                              p.measured_steps, target))
        doc["buckets"][name] = entry
        if entry.get("measured_steps"):
            steps[name] = int(cast(int, entry["measured_steps"]))
        log.info("sizing: %s: %s", name, entry["why"])
    # the pilot's length is a floor: a planner's longer trials (the first rounds sized by cost
    # from a calibration record) keep theirs
    planned[:] = [t if t.bucket not in steps or (t.measured_steps or 0) >= steps[t.bucket]
                  else dataclasses.replace(t, measured_steps=steps[t.bucket]) for t in planned]
    return doc


def _steps_for(step_s: float, floor_steps: int, target_s: float, where: str
               ) -> tuple[int, str]:
    """The measured steps a trial of ``step_s`` steps needs for ``target_s`` (x MARGIN, at least
    ``floor_steps``, at most MAX_MEASURED_STEPS) and why; ``where``: whose step time it is."""
    need = math.ceil(MARGIN * target_s / step_s)
    n = min(max(need, floor_steps), MAX_MEASURED_STEPS)
    if n == floor_steps:
        return n, (f"{floor_steps} steps of {step_s * 1e3:.3g} ms already measure "
                   f"{floor_steps * step_s:.2f} s >= {target_s:g} s")
    return n, (f"{n} measured steps per trial: {step_s * 1e3:.3g} ms per step {where}, "
               f"{n * step_s:.2f} s of steps for measured_min_s {target_s:g} s "
               f"(x{MARGIN:g} margin)" + (f"; capped at {MAX_MEASURED_STEPS}"
                                          if need > MAX_MEASURED_STEPS else ""))


def sized_from_record(step_s: float, source: str, floor_steps: int, target_s: float
                      ) -> BucketSizing:
    """One bucket's sizing from the baseline step time a fresh calibration record kept (no
    pilot ran)."""
    n, why = _steps_for(step_s, floor_steps, target_s, "on record")
    return {"pilot": None, "recorded_step_s": step_s, "measured_steps": n,
            "why": f"{why}; no pilot: the step time is {source or 'a calibration record'}'s"}


def sized_bucket(pilot: TrialRecordDict, floor_steps: int, target_s: float) -> BucketSizing:
    """One bucket's sizing from its pilot record: the measured steps and why."""
    tid = pilot.get("trial_id")
    if pilot.get("status") != Status.OK or not pilot.get("step_time_median_s"):
        return {"pilot": tid, "measured_steps": None, "why": (
            f"the pilot ended {pilot.get('status') or 'without a record'}"
            f"{': ' + str(pilot['error']) if pilot.get('error') else ''}; trials keep "
            f"protocol.measured_steps={floor_steps}")}
    if pilot.get("steps_ignored"):
        return {"pilot": tid, "measured_steps": None, "pilot_step_s": pilot["step_time_median_s"],
                "why": f"the pilot {pilot['steps_ignored']}; trials measure what it runs"}
    step_s = float(pilot["step_time_median_s"])
    n, why = _steps_for(step_s, floor_steps, target_s, "in the pilot")
    return {"pilot": tid, "pilot_step_s": step_s, "measured_steps": n, "why": why}


def sizing_lines(sizing: Sizing | None, records: Sequence[TrialRecordDict]) -> list[str]:
    """decisions.md: how trials were sized and what each measured (steps and seconds), and
    any trial whose command did not follow its step count."""
    if not sizing:
        return []
    if sizing.get("alternated"):
        lines = [f"A command is told its step count before it runs: a pilot trial per bucket "
                 f"(never in the statistics) sized each arm's turns in a round to measure at "
                 f"least {sizing['target_s']:g} s of steps (the larger of "
                 "protocol.measured_min_s and protocol.paired_min_s); each arm's command was "
                 "asked for more steps than that takes and stopped once its round was measured:"]
    else:
        lines = [f"A command is told its step count before it runs, so its trials are sized "
                 f"from the baseline's step time (a pilot trial per bucket, never in the "
                 f"statistics, or a fresh calibration record's) to measure at least "
                 f"protocol.measured_min_s = {sizing['target_s']:g} s of steps:"]
    if sizing.get("why"):
        lines.append(f"- {sizing['why']}")
    timed = [r for r in records if r.get("kind", TrialKind.TIMED) == TrialKind.TIMED
             and r.get("status") == Status.OK and r.get("step_time_median_s")]
    for name, entry in sizing.get("buckets", {}).items():
        mine = [r for r in timed if r.get("bucket") == name]
        got = sorted(float(r["measured_s"]) if _number(r.get("measured_s")) else
                     float(r["measured_steps"]) * float(r["step_time_median_s"]) for r in mine)
        steps = sorted(int(r["measured_steps"]) for r in mine)
        per = "arm per round" if sizing.get("alternated") else "trial"
        measured = (f"; measured per {per}: {steps[0]}–{steps[-1]} steps, "
                    f"{got[0]:.2f}–{got[-1]:.2f} s (median {got[len(got) // 2]:.2f} s)"
                    if got else "")
        short = sum(1 for v in got if v < sizing["target_s"])
        lines.append(f"- `{name}`: {entry['why']}{measured}"
                     + (f"; {short} of {len(got)} measured less than "
                        f"{sizing['target_s']:g} s" if short else ""))
    ignored = sorted({str(r["trial_id"]) for r in records if r.get("steps_ignored")
                      and r.get("kind", TrialKind.TIMED) == TrialKind.TIMED})  # the pilot is said above
    if ignored:
        lines.append(f"- the command did not follow its step count in {len(ignored)} trial(s) "
                     f"({', '.join(ignored[:5])}{', ...' if len(ignored) > 5 else ''}): "
                     f"{next(r['steps_ignored'] for r in timed if r.get('steps_ignored'))}")
    return lines


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def sizing_section(sizing: Sizing | None, records: Sequence[TrialRecordDict]
                   ) -> list[Section]:
    lines = sizing_lines(sizing, records)
    return [Section("Trial length", lines)] if lines else []
