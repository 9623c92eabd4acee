"""Verdicts (pure). One function, thresholds from the protocol, every verdict with a headline.

The objective is the mixture: total work over total time with the workload's bucket weights
(the single bucket when there is one), because that is the throughput a training run sees.
Speedup = baseline time / variant time, from the block fit of orchestrator.core.paired; each look
spends its share alpha' of (1 - confidence) (orchestrator.core.paired.alpha_spent; the shares sum to
it, so the error rates hold over the initial rounds and every adaptive extension).

- ``invalid``: the comparison cannot be made: the baseline has no measurement in a bucket, the
  variant's backend is unavailable here, a gate could not be evaluated, a trial failed in the
  harness and again when re-run, or (at the final look) the A/A control shows two identical
  arms apart, so the intervals are not calibrated on this machine;
- ``reject``: the variant failed (crash, OOM, timeout), a gate failed, the objective is
  significantly slower (its 1 - alpha' interval lies below 1), or a bucket is significantly
  slower beyond the non-inferiority margin (its one-sided alpha' upper bound below
  1 - ni_margin);
- ``equivalent``: no difference that matters: the objective's and every bucket's 1 - 2 alpha'
  interval (two one-sided tests at alpha') lie inside [1 / (1 + min_effect), 1 + min_effect];
  or, by construction, the variant differs from the baseline only in settings the recipe's
  description covers (the trials' ``executes_covers``), it resolved at run time to the
  baseline's own step in every trial (the trials' ``executes``: an ``auto`` that chose the
  baseline's mode on every shape), and, at the last planned look only, the timing shows no
  significant difference either way and every scope is non-inferior within the band (one-sided
  lower bound at least 1 / (1 + min_effect)): what ran is never evidence on its own;
- ``retain``: the objective is significantly faster (its interval above 1), every bucket is
  non-inferior (its one-sided alpha' lower bound above 1 - ni_margin), and every gate passed;
- ``inconclusive``: anything else, with what would resolve it: the rounds in all, when that is
  within reach, or what else would help.

Gates (correctness, memory budget, ...) are evaluated elsewhere and passed in.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, TypedDict

from orchestrator.core import paired
from orchestrator.core.records import VerdictKind
from orchestrator.core.results import FAILED_STATUSES, INFRA_STATUS, VERDICTS  # noqa: F401
from orchestrator.analysis.analyze import MIXTURE, Analysis, Comparison
from orchestrator.spec.sweep import Arm, differing_settings

FAILED = FAILED_STATUSES
INFRA = INFRA_STATUS  # a trial that failed in the harness (core.results)
# rounds to resolve are promised only up to this multiple of protocol.max_rounds
REACH = 3

RULE = ("the mixture decides (total work / total time): **retain** if significantly faster "
        "(two-sided 1 - alpha' interval above 1) and no bucket worse than the non-inferiority "
        "margin (one-sided 1 - alpha' lower bound); **reject** if significantly slower, or a "
        "bucket significantly slower beyond the margin (one-sided 1 - alpha' upper bound), or a "
        "trial or gate failed; "
        "**equivalent** if the mixture and every bucket lie within ±min_effect (two one-sided "
        "tests at 1 - alpha' each), or it ran the baseline's own step in every trial and, at the "
        "last look, timed no different and non-inferior within ±min_effect; "
        "**invalid** if the comparison cannot be made; else **inconclusive**")


@dataclass(frozen=True)
class Gate:
    """The outcome of one check that can block a variant, whatever its speed."""

    name: str  # e.g. "correctness", "memory"
    status: str  # pass | fail | error (error = could not be evaluated)
    detail: str = ""


class VerdictDict(TypedDict):
    """A :class:`Verdict` as plain data (a line of decisions.jsonl, the CLI's verdicts)."""

    arm_id: str
    label: str
    verdict: str
    headline: str
    reasons: list[str]
    warnings: list[str]
    rounds_to_resolve: int | None
    final: bool
    futility_judged: bool


@dataclass
class Verdict:
    arm_id: str
    label: str
    verdict: str
    reasons: list[str] = field(default_factory=list)
    # total rounds estimated to reach a decisive verdict at the observed effect (inconclusive),
    # only when within REACH x max_rounds
    rounds_to_resolve: int | None = None
    timing_based: bool = True  # False when a failure or a gate decided it
    headline: str = ""  # one sentence with the figure that decided it
    warnings: list[str] = field(default_factory=list)  # grouped, de-duplicated
    final: bool = True  # False: more rounds may change it (an adaptive campaign's early look)
    # False: an inconclusive variant at a look with too little power to call it hopeless (its
    # critical t far above the last look's, orchestrator.core.paired.look_power): rounds go on
    futility_judged: bool = True

    def to_dict(self) -> VerdictDict:
        return {"arm_id": self.arm_id, "label": self.label, "verdict": self.verdict,
                "headline": self.headline, "reasons": self.reasons, "warnings": self.warnings,
                "rounds_to_resolve": self.rounds_to_resolve, "final": self.final,
                "futility_judged": self.futility_judged}


@dataclass(frozen=True)
class Rule:
    """The thresholds a verdict uses (from the protocol)."""

    min_effect: float = 0.02  # the equivalence band's half-width (ratio - 1)
    ni_margin: float = 0.05  # a bucket may be this much slower (1 - ni_margin) and still pass
    max_rounds: int = 7
    final: bool = True  # the last look: no more rounds will run
    # the error rate the last planned look spends: projections of the rounds a decision needs
    # use it (an early look's strict share would make every decision look out of reach)
    alpha_last: float | None = None
    aa_alpha: float = 0.01  # the A/A calibration check's own error rate, over its scopes
    # load detected during the campaign (before an invocation, or still over a trial's
    # measured steps after its re-runs), in one line; "" when none was
    load: str = ""
    # the trials are a few steps with no time floor (the quick protocol's 3), in one line
    short_trials: str = ""

    @property
    def band(self) -> tuple[float, float]:
        return 1 / (1 + self.min_effect), 1 + self.min_effect


def _fmt(s: float, lo: float, hi: float) -> str:
    return f"{s:.3f}x [{lo:.3f}, {hi:.3f}]"


def _faster(s: float) -> str:
    return f"{s:.2f}x faster" if s >= 1 else f"{1 / s:.2f}x slower"


@dataclass
class Scope:
    """One bucket's (or the mixture's) effect with its intervals at a look's alpha'."""

    key: str
    eff: paired.Effect
    two: tuple[float, float]  # 1 - alpha' two-sided
    tost: tuple[float, float]  # 1 - 2 alpha' two-sided (each side one-sided alpha')


def scope_of(c: Comparison | None, alpha: float) -> Scope | None:
    if c is None or c.effect is None or c.effect.se is None:
        return None
    return effect_scope(c.bucket, c.effect, alpha)


def effect_scope(key: str, eff: paired.Effect | None, alpha: float) -> Scope | None:
    if eff is None or eff.se is None:
        return None
    return Scope(key, eff, eff.interval(alpha), eff.interval(2 * alpha))


def _every_round(analysis: Analysis, bucket: str, arm_id: str) -> bool:
    """True when the variant was faster than the baseline in every paired round (a fact for
    the headline, not a rule)."""
    fit = analysis.fits.get(bucket)
    d = fit.contrasts.get(arm_id) if fit is not None else None
    return d is not None and bool(d) and all(x > 0 for x in d.values())


def _resolve(obj: Scope, alpha: float, rule: Rule) -> int | None:
    """Rounds in all that would decide the objective if its effect and noise held, at the last
    look's error rate; None beyond REACH x max_rounds."""
    return paired.rounds_for(obj.eff.log_speedup, obj.eff.se or 0.0, max(obj.eff.rounds, 2),
                             obj.eff.df, rule.alpha_last or alpha, math.log(1 + rule.min_effect),
                             REACH * rule.max_rounds)


def futility_power(obj: Scope, alpha: float, rule: Rule) -> tuple[bool, float, float]:
    """Whether this look may call the objective hopeless, its critical t and the last look's
    (orchestrator.core.paired.look_power)."""
    if rule.final:
        return True, 0.0, 0.0
    return paired.look_power(alpha, obj.eff.df, max(obj.eff.rounds, 2), rule.alpha_last or alpha,
                             rule.max_rounds)


@dataclass(frozen=True)
class _Look:
    """What every variant's verdict at one look shares."""

    analysis: Analysis
    rule: Rule
    alpha: float  # the error rate this look spends
    base: Arm
    objective: str  # the mixture, or the single bucket
    calibration: str  # the A/A control's reason, "" when calibrated (aa_calibration)


@dataclass
class _Findings:
    """What the checks before the timing found for one variant."""

    invalid: list[str] = field(default_factory=list)
    reject: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    headline: str = ""


@dataclass
class _Timing:
    """The timing rule's call for one variant (:func:`judge`), as later steps amend it."""

    kind: str  # good | bad | equivalent | unsure
    reasons: list[str]
    resolve: int | None  # rounds in all to resolve it (unsure)
    why: str  # the scope that decided it


def decide(analysis: Analysis, rule: Rule | float = Rule(),
           gates: dict[str, list[Gate]] | None = None) -> list[Verdict]:
    """One verdict per variant (the A/A control gets none). ``gates`` maps arm_id to the gates
    evaluated for that arm. A bare float ``rule`` is taken as min_effect (older callers)."""
    if not isinstance(rule, Rule):
        rule = Rule(min_effect=float(rule))
    gates = gates or {}
    alpha = analysis.alpha_look
    base = analysis.arms[0]
    objective = MIXTURE if len(analysis.buckets) > 1 else analysis.buckets[0]
    look = _Look(analysis, rule, alpha, base, objective, aa_calibration(analysis, rule.aa_alpha))
    return [_decide_arm(look, arm, gates.get(arm.arm_id, [])) for arm in analysis.arms[1:]]


def _decide_arm(look: _Look, arm: Arm, gates: list[Gate]) -> Verdict:
    """One variant's verdict: its trials and gates first, then the timing."""
    analysis, rule, objective = look.analysis, look.rule, look.objective
    f = _Findings()
    for bucket in analysis.buckets:
        _check_bucket(look, arm, bucket, f)
    _check_gates(gates, f)
    if look.calibration and rule.final:
        f.invalid.append(look.calibration)
    scopes = _arm_scopes(look, arm, f)
    obj = scopes.get(objective)
    t = _timing(look, arm, scopes)
    _hold_under_load(look, obj, t, f)
    _by_what_ran(look, arm, scopes, t, f)
    if not f.headline and t.kind != "unsure":
        f.headline = _headline(analysis, arm.arm_id, t.kind, scopes, objective, t.why)
    power = (futility_power(obj, look.alpha, rule) if t.kind == "unsure" and obj is not None
             else None)
    if not f.headline:
        f.headline = _unsure_headline(analysis, arm.arm_id, obj, scopes, objective, rule,
                                      t.resolve, power)
    v = _verdict(arm, f, t)
    v.warnings = _dedupe(f.warnings)
    v.final = rule.final
    v.futility_judged = power is None or power[0]
    return v


def _check_bucket(look: _Look, arm: Arm, bucket: str, f: _Findings) -> None:
    """The variant's trials in one bucket: a baseline without a measurement, harness failures
    and an unavailable variant (invalid), the variant's own failures (reject), warnings."""
    analysis = look.analysis
    bs = analysis.summaries[(bucket, look.base.arm_id)]
    vs = analysis.summaries[(bucket, arm.arm_id)]
    failed = {k: v for k, v in vs.statuses.items() if k in FAILED}
    if bs.ok == 0 and not (failed and set(bs.statuses) <= {INFRA}):
        f.invalid.append(f"{bucket}: the baseline produced no measurement ({_errs(bs)})")
        return
    # (with protocol.pairing=steps a variant that kills the process it shares with the
    # baseline leaves the baseline unmeasured, not failed: the variant's failure decides)
    # a variant that failed on its own account is rejected whatever befell the baseline
    harness = [f"{who} {n} of {s.trials}" for who, s in (("baseline", bs), ("variant", vs))
               if (n := s.statuses.get(INFRA, 0)) and not (failed and who == "baseline")]
    if harness:  # says nothing of the variant: never a reject
        f.invalid.append(f"{bucket}: trials failed in the harness, not on the variant's "
                         f"account, and again when re-run ({', '.join(harness)}: "
                         f"{_errs(vs if vs.statuses.get(INFRA) else bs)}); re-run the "
                         "campaign (resume=RUN_DIR re-runs them) or raise "
                         "protocol.infra_retries")
    if vs.statuses.get("unavailable") and vs.ok == 0:
        f.invalid.append(f"{bucket}: unavailable here: {'; '.join(vs.errors) or 'no reason'}")
        return
    if failed:
        what = ", ".join(f"{n} {k}" for k, n in sorted(failed.items()))
        f.reject.append(f"{bucket}: {what} of {vs.trials} trials ({_errs(vs)})")
        f.headline = f.headline or f"reject: {what} of {vs.trials} trials at {bucket}"
    for w in vs.warnings:
        f.warnings.append(f"{bucket}: {w}")
    if bucket in analysis.carryover:
        f.warnings.append(f"{bucket}: {analysis.carryover[bucket]}")


def _check_gates(gates: list[Gate], f: _Findings) -> None:
    """A failed gate rejects; one that could not be evaluated makes the verdict invalid."""
    for g in gates:
        if g.status == "fail":
            f.reject.append(f"{g.name} gate failed: {g.detail}")
            f.headline = f.headline or f"reject: the {g.name} gate failed ({g.detail})"
        elif g.status == "error" and g.detail.startswith("unavailable here"):
            # the variant itself cannot run here: say that first, the gate second
            f.invalid.append(f"{g.detail} (the {g.name} gate could not run it)")
        elif g.status == "error":
            f.invalid.append(f"{g.name} gate could not be evaluated: {g.detail}")
        else:
            f.passed.append(f"{g.name} gate passed" + (f": {g.detail}" if g.detail else ""))


def _arm_scopes(look: _Look, arm: Arm, f: _Findings) -> dict[str, Scope | None]:
    """Every bucket's scope and, with several buckets, the mixture's; each comparison's note
    (where it has an interval) becomes a warning."""
    analysis = look.analysis
    scopes = {key: scope_of(analysis.comparisons.get((key, arm.arm_id)), look.alpha)
              for key in [*analysis.buckets, *([MIXTURE] if look.objective == MIXTURE else [])]}
    for key, c in ((k, analysis.comparisons.get((k, arm.arm_id))) for k in scopes):
        if c is not None and c.note and c.effect is not None and c.effect.se is not None:
            f.warnings.append(f"{key}: {c.note}")
    return scopes


def _timing(look: _Look, arm: Arm, scopes: dict[str, Scope | None]) -> _Timing:
    """The timing rule (:func:`judge`); unsure when the objective has no interval."""
    objective = look.objective
    if scopes.get(objective) is None:
        note = (look.analysis.comparisons.get((objective, arm.arm_id)) or
                Comparison(arm.arm_id, objective, None, 0, "no comparison")).note
        return _Timing("unsure", [f"{objective}: no interval ({note})"], None, "")
    return _Timing(*judge(scopes, objective, look.alpha, look.rule))


def _hold_under_load(look: _Look, obj: Scope | None, t: _Timing, f: _Findings) -> None:
    """A retain or reject on thin evidence under detected load (:func:`thin_under_load`)
    becomes unsure, with the rounds it needs."""
    rule = look.rule
    thin = thin_under_load(obj, rule) if t.kind in ("good", "bad") else ""
    if not thin or obj is None:
        return
    # load that comes and goes moves whole trials: with this little evidence a timing
    # verdict cannot tell it from the arm, so it is not taken on its own
    saw = _scope_text(obj, look.objective)
    need = max(MIN_ROUNDS_UNDER_LOAD, obj.eff.rounds + 1)
    t.reasons.insert(0, f"{saw} looked {'faster' if t.kind == 'good' else 'slower'}, but "
                        f"load was detected ({rule.load}), with {thin}: a retain or reject "
                        f"needs a quiet machine, or at least {MIN_ROUNDS_UNDER_LOAD} rounds "
                        "of trials with a time floor")
    f.headline = f.headline or (
        f"inconclusive: {saw} under load, with {thin}: not decided on its own; rerun "
        f"on a quiet machine, or with protocol.max_rounds={need} or more and "
        "protocol.measured_min_s > 0 (the default protocol)")
    t.kind, t.resolve = "unsure", need


def _by_what_ran(look: _Look, arm: Arm, scopes: dict[str, Scope | None], t: _Timing,
                 f: _Findings) -> None:
    """A variant that ran the baseline's own step (:func:`same_step`): equivalent when the
    timing is unsure and :func:`construction_equivalent` allows it; else said why not, or
    warned of when the timing decided either way."""
    rule, objective = look.rule, look.objective
    obj = scopes.get(objective)
    same = same_step(look.analysis, look.base, arm)
    blocked = construction_equivalent(scopes, rule) if same and obj is not None else ""
    if same and t.kind == "unsure" and obj is not None and not blocked:  # by what ran
        t.kind, t.resolve = "equivalent", None
        t.reasons.insert(0, f"it runs the baseline's step in every trial ({same}); the timing "
                            "shows no significant difference either way and every scope is "
                            f"non-inferior within ±{rule.min_effect:.0%}")
        f.headline = f.headline or (f"equivalent: it runs the baseline's step ({same}); "
                                    f"timed {_scope_text(obj, objective)}, non-inferior "
                                    f"within ±{rule.min_effect:.0%}")
    elif same and t.kind == "unsure":
        t.reasons.insert(0, f"it runs the baseline's step in every trial ({same}), but "
                            f"{blocked}: not equivalent on what ran alone")
    elif same and t.kind in ("good", "bad"):
        f.warnings.append(f"it runs the baseline's step in every trial ({same}), yet timed "
                          f"{'faster' if t.kind == 'good' else 'slower'}: suspect an order or "
                          "position effect, or a cost of the resolver itself")


def _verdict(arm: Arm, f: _Findings, t: _Timing) -> Verdict:
    """The verdict the findings and the timing make: invalid, then a failure's reject, then
    the timing's call."""
    timing = t.reasons
    if f.invalid:
        v = Verdict(arm.arm_id, arm.label, "invalid", f.invalid + f.reject + timing, None, False)
        v.headline = f"invalid: {f.invalid[0]}"
        return v
    if f.reject:
        return Verdict(arm.arm_id, arm.label, "reject", f.reject + timing + f.passed, None, False,
                       f.headline)
    if t.kind == "bad":
        return Verdict(arm.arm_id, arm.label, "reject", timing + f.passed, None, True, f.headline)
    if t.kind == "good":
        return Verdict(arm.arm_id, arm.label, "retain", timing + f.passed, None, True, f.headline)
    if t.kind == VerdictKind.EQUIVALENT:
        return Verdict(arm.arm_id, arm.label, "equivalent", timing + f.passed, None, True,
                       f.headline)
    return Verdict(arm.arm_id, arm.label, "inconclusive", timing + f.passed, t.resolve, True,
                   f.headline)


MIN_ROUNDS_UNDER_LOAD = 3  # rounds a timing verdict needs when load was detected
MIN_STEPS_UNDER_LOAD = 5  # measured steps a trial needs then, with no time floor


def thin_under_load(obj: Scope | None, rule: Rule) -> str:
    """Why a timing verdict is not taken on its own ("" when it may be): load was detected
    (``rule.load``) and the evidence is thin: fewer than MIN_ROUNDS_UNDER_LOAD rounds, or
    short trials (``rule.short_trials``). Says what is thin: "2 round(s) and 3 steps ..."."""
    if not rule.load or obj is None:
        return ""
    thin = []
    if obj.eff.rounds < MIN_ROUNDS_UNDER_LOAD:
        thin.append(f"{obj.eff.rounds} round(s)")
    if rule.short_trials:
        thin.append(rule.short_trials)
    return " and ".join(thin)


def same_step(analysis: Analysis, base: Arm, arm: Arm) -> str:
    """A description of the step a variant shares with the baseline when the variant differs
    from the baseline only in settings the recipe's description covers
    (recipes.base.Trainer.executes_covers) and, in every bucket, every ok trial of both
    described what its step ran (Trainer.executes) and all of them described the same; ""
    otherwise. Such a variant resolved at run time to the baseline's own code (an ``auto``
    that chose the baseline's mode on every shape)."""
    shared = ""
    differs = differing_settings(base, arm)
    for bucket in analysis.buckets:
        bs = analysis.summaries.get((bucket, base.arm_id))
        vs = analysis.summaries.get((bucket, arm.arm_id))
        if (bs is None or vs is None or not bs.ok or not vs.ok or bs.executes_missing
                or vs.executes_missing or len(bs.executes) != 1 or bs.executes != vs.executes
                or not differs <= set(bs.executes_covers) & set(vs.executes_covers)):
            return ""
        shared = shared or _describe(json.loads(vs.executes[0]))
    return shared


def _describe(executes: Any) -> str:
    """'newton_schulz: 6 duplicated, 3 local' for {"newton_schulz": ["384x128/p0:duplicated",
    ...]}; other shapes of description are counted as items."""
    if isinstance(executes, dict):
        parts = []
        for k, v in executes.items():
            if isinstance(v, list) and all(isinstance(x, str) and ":" in x for x in v):
                modes: dict[str, int] = {}
                for x in v:
                    modes[x.rsplit(":", 1)[1]] = modes.get(x.rsplit(":", 1)[1], 0) + 1
                parts.append(f"{k}: " + ", ".join(f"{n} {m}" for m, n in modes.items()))
            else:
                parts.append(f"{k}: the same {len(v) if isinstance(v, list) else 1} item(s)")
        return "; ".join(parts)
    return f"the same {len(executes)} item(s)" if isinstance(executes, list) else "the same"


def _scope_text(obj: Scope | None, key: str) -> str:
    if obj is None:
        return f"{key}: no interval"
    return f"{key} {_fmt(obj.eff.speedup, *obj.two)}"


def judge(scopes: dict[str, Scope | None], objective: str, alpha: float,
          rule: Rule) -> tuple[str, list[str], int | None, str]:
    """The timing rule alone: (good | bad | equivalent | unsure, reasons, rounds in all to
    resolve it (unsure), the scope that decided it). ``scopes`` has every bucket and, with
    several buckets, the mixture; the objective's scope is not None."""
    lo_band, hi_band = rule.band
    obj = scopes[objective]
    assert obj is not None
    s, (lo, hi), (tlo, thi) = obj.eff.speedup, obj.two, obj.tost
    timing: list[str] = []
    resolve = None
    slow_buckets = [(k, sc) for k, sc in scopes.items()
                    if sc is not None and k != MIXTURE and sc.tost[1] < 1 - rule.ni_margin]
    ni_fail = [k for k, sc in scopes.items() if k != MIXTURE
               and (sc is None or sc.tost[0] <= 1 - rule.ni_margin)]
    within = all(sc is not None and lo_band < sc.tost[0] and sc.tost[1] < hi_band
                 for sc in scopes.values())
    lvl = f"{1 - alpha:.1%}"
    why = objective
    if within:
        kind = "equivalent"
        timing.append(f"{objective}: {_fmt(s, tlo, thi)} ({1 - 2 * alpha:.1%}, two one-sided "
                      f"tests) lies within ±{rule.min_effect:.0%} [{lo_band:.3f}, "
                      f"{hi_band:.3f}], and so does every bucket")
    elif hi < 1 or slow_buckets:
        kind = "bad"
        if hi < 1:
            timing.append(f"{objective}: slower, {_fmt(s, lo, hi)} ({lvl}) lies below 1")
        else:
            why = slow_buckets[0][0]
        for k, sc in slow_buckets:
            timing.append(f"{k}: slower beyond the non-inferiority margin: "
                          f"{_fmt(sc.eff.speedup, *sc.tost)} lies below {1 - rule.ni_margin:.3f}")
    elif lo > 1 and not ni_fail:
        kind = "good"
        timing.append(f"{objective}: faster, {_fmt(s, lo, hi)} ({lvl}) lies above 1; every "
                      f"bucket non-inferior: {ni_bounds(scopes, alpha)} above "
                      f"{1 - rule.ni_margin:.3f}")
    else:
        kind = "unsure"
        if lo > 1:
            timing.append(f"{objective}: faster, {_fmt(s, lo, hi)} ({lvl}), but "
                          f"{', '.join(ni_fail)} cannot yet rule out a slowdown beyond "
                          f"{rule.ni_margin:.0%}")
        else:
            timing.append(f"{objective}: {_fmt(s, lo, hi)} ({lvl}) straddles 1 and is not "
                          f"within ±{rule.min_effect:.0%}")
        resolve = _resolve(obj, alpha, rule)
    for k, other in scopes.items():
        if other is not None and k != objective:
            timing.append(f"{k}: {_fmt(other.eff.speedup, *other.two)} ({lvl}; one-sided "
                          f"{1 - alpha:.1%} lower bound {other.tost[0]:.3f})")
    return kind, timing, resolve, why


def ni_bounds(scopes: dict[str, Scope | None], alpha: float) -> str:
    """The bucket lower bounds the non-inferiority test used, as shown beside it: one-sided
    1 - alpha' (the lower end of the 1 - 2 alpha' interval), never the two-sided one."""
    parts = [f"{k} {sc.tost[0]:.3f}" for k, sc in scopes.items()
             if sc is not None and k != MIXTURE]
    return f"one-sided {1 - alpha:.1%} lower bounds {', '.join(parts)}"


def construction_equivalent(scopes: dict[str, Scope | None], rule: Rule) -> str:
    """Why a variant that ran the baseline's own step may not be called equivalent on that
    alone, or "" when it may. A description is only as complete as its recorder (a kernel
    recorded at a shape's first call), so what ran is not evidence of equal time: it takes
    the last planned look, no scope significant either way (its 1 - alpha' interval covers
    1), and every scope non-inferior within the band (one-sided lower bound at least
    1 / (1 + min_effect))."""
    if not rule.final:
        return "not before the last planned look"
    floor = rule.band[0]
    for k, sc in scopes.items():
        if sc is None:
            return f"{k} has no interval"
        if sc.two[0] > 1 or sc.two[1] < 1:
            return f"{k} is significantly {'faster' if sc.two[0] > 1 else 'slower'}"
        if sc.tost[0] < floor:
            return (f"{k}'s one-sided lower bound {sc.tost[0]:.3f} is below {floor:.3f} "
                    f"(a slowdown beyond {rule.min_effect:.0%} is not ruled out)")
    return ""


def _headline(analysis: Analysis, arm_id: str, kind: str, scopes: dict[str, Scope | None],
              objective: str, why: str) -> str:
    obj = scopes[objective]
    assert obj is not None
    s = obj.eff.speedup
    if kind == VerdictKind.EQUIVALENT:
        return (f"equivalent: no difference that matters ({objective} {_fmt(s, *obj.tost)}, "
                "within the band); keep whichever is simpler")
    if kind == "bad":
        sc = scopes[why]
        assert sc is not None
        return f"reject: {_faster(sc.eff.speedup)} at {why} {_fmt(sc.eff.speedup, *sc.two)}"
    best = max(((k, sc) for k, sc in scopes.items() if sc is not None and k != MIXTURE),
               key=lambda x: x[1].eff.log_speedup)
    every = " in every round" if _every_round(analysis, best[0], arm_id) else ""
    if objective == MIXTURE:
        return (f"retain: {_faster(s)} on the mixture {_fmt(s, *obj.two)}; "
                f"{_faster(best[1].eff.speedup)} at {best[0]}{every}")
    return f"retain: {_faster(s)} {_fmt(s, *obj.two)}{every}"


def _unsure_headline(analysis: Analysis, arm_id: str, obj: Scope | None,
                     scopes: dict[str, Scope | None], objective: str, rule: Rule,
                     resolve: int | None, power: tuple[bool, float, float] | None = None) -> str:
    if obj is None:
        return f"inconclusive: no interval on the {objective} yet"
    if analysis.alpha_exhausted:
        return ("inconclusive: this campaign spent its whole error rate by its last planned "
                "look (plan.json's spending), so rounds added by a resume cannot decide; plan "
                "a new campaign with a larger protocol.max_rounds")
    fast = [(k, sc) for k, sc in scopes.items() if sc is not None and k != MIXTURE
            and sc.two[0] > 1]
    parts = []
    if fast:
        k, sc = max(fast, key=lambda x: x[1].eff.log_speedup)
        every = " in every round" if _every_round(analysis, k, arm_id) else ""
        parts.append(f"{_faster(sc.eff.speedup)} at {k}{every}")
    noisy = [k for k, sc in scopes.items() if k != MIXTURE
             and (sc is None or sc.tost[0] <= 1 - rule.ni_margin)]
    if noisy and fast:
        parts.append(f"but {', '.join(noisy)} too noisy to rule out a slowdown")
    elif not fast:
        parts.append(f"{objective} {_fmt(obj.eff.speedup, *obj.two)}")
    if resolve is not None and resolve <= REACH * rule.max_rounds:
        fit = analysis.fits.get(objective)
        done = 1 + max((r for r, _ in fit.residuals), default=0) if fit is not None else 0
        if rule.final or resolve > rule.max_rounds:  # more than this campaign will run
            n = max(resolve, done + 1)
            # not a resume: its last look spent the rest of the error rate (plan.json's
            # frozen spending), so more rounds on its data could not decide
            more = (f"~{n} rounds in all may resolve it: plan a new campaign with "
                    f"protocol.max_rounds={n} (a resume of this one would not decide more, "
                    "its error rate is spent)")
        else:
            more = f"~{resolve} rounds in all should resolve it"
    elif power is not None and not power[0]:
        more = (f"this early look cannot call it hopeless (critical t {power[1]:.1f}, against "
                f"{power[2]:.1f} at the last look): more rounds")
    else:
        more = ("no number of rounds within reach resolves it at this noise: quiet the machine, "
                "lengthen trials (protocol.measured_steps / measured_min_s) or widen "
                "protocol.min_effect")
    return "inconclusive: " + ", ".join(parts) + "; " + more


def aa_off(effects: dict[str, paired.Effect | None], aa_alpha: float = 0.01) -> list[str]:
    """The scopes whose A/A effect (the baseline against itself) misses 1, each as "key
    speedup [low, high]": a test of its own, not the decisions' interval. Each scope's interval
    is taken at 1 - aa_alpha / scopes (Bonferroni), so calibrated intervals are called
    uncalibrated in at most aa_alpha of campaigns (at the decisions' 95 % and three scopes it
    would be ~14 %). Scopes without an interval are left out."""
    usable = {k: e for k, e in effects.items()
              if e is not None and e.se is not None and e.df >= 1}
    off = []
    for key, eff in usable.items():
        low, high = eff.interval(aa_alpha / len(usable))
        if low > 1 or high < 1:
            off.append(f"{key} {_fmt(eff.speedup, low, high)}")
    return off


def aa_calibration(analysis: Analysis, aa_alpha: float = 0.01) -> str:
    """A reason when the A/A control shows the two identical arms apart in some scope
    (:func:`aa_off`), i.e. the intervals are not calibrated on this machine (an order or
    position effect, or more noise than the model assumes); "" when calibrated or no A/A."""
    effects = {k: c.effect for k, c in analysis.noise.items()}
    off = aa_off(effects, aa_alpha)
    if not off:
        return ""
    scopes = sum(1 for e in effects.values() if e is not None and e.se is not None and e.df >= 1)
    level = 1 - aa_alpha / scopes
    return ("the A/A control (the baseline against itself) does not cover 1 at "
            f"{'; '.join(off)} ({level:.1%} intervals): the intervals are not calibrated on "
            "this machine (an order or position effect, or interference); quiet the machine "
            "and re-run")


def _dedupe(items: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for w in items:
        seen.setdefault(w, None)
    return list(seen)


def _errs(s: Any) -> str:
    return "; ".join(s.errors[:2]) if s.errors else "no error text"


def threshold(c: Comparison, min_effect: float) -> float:
    """The upper edge of the equivalence band (kept for the reports' plots)."""
    return 1 + min_effect


__all__ = ["RULE", "VERDICTS", "Gate", "Rule", "Verdict", "aa_calibration", "decide",
           "construction_equivalent", "effect_scope", "judge", "ni_bounds", "threshold"]
