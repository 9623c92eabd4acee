"""Campaign simulator (pure: numpy and the standard library, and the shipped protocol's YAML
read once): the verdict rule's error rates over thousands of simulated campaigns, in seconds.

Step times are drawn from a noise model measured on a real machine (``NoiseModel``, kept as
small JSON files in ``tests/data/``; ``bench/noise_model.py`` fits one from run directories):

- the host's speed switches between a fast and a slow state (``slow_ratio`` x slower), each
  state lasting an exponential time with its own mean (seconds), running on through the whole
  campaign, so adjacent trials share spells the way a round's arms do on the machine;
  a host-speed reference (``normalised``) divides it out, leaving ``reference_sd_log`` noise;
- a per-process offset (log-normal, ``process_sd_log``);
- independent per-step noise (log-normal, ``step_sd_log``);
- interference: with probability ``outlier_trial_p`` a trial runs ``outlier_factor`` x slower
  for a random share of its steps (another job on the machine);
- failure modes a variant may bring and the baseline and the A/A control lack (they run the
  baseline's own code): an arm x process interaction, a per-process offset of the variant
  alone (``variant_process_sd_log``: per-process autotune picks, code or data layout,
  allocator state), and carry-over on a switch (``variant_carry_log``: under pairing by steps
  the variant's first measured step after each switch runs that much slower, a cost a run
  without switches never pays).

Each trial also spends ``fixed_s`` seconds (process start, warm-up), during which the host's
speed goes on changing. The campaign follows the real protocol: the plan's interleaved,
reversed rounds, the block fit (orchestrator.core.paired), the timing rule
(orchestrator.analysis.decide.judge) with the A/A calibration check, and the sequential rule
(orchestrator.spec.plan.more_rounds_reason) at each look.

The simulated protocol is the real one (:class:`Protocol` holds a ``ProtocolConfig``, the
shipped default protocol unless told otherwise) beside the simulation's own knobs.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
import typing
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from orchestrator.analysis import contamination
from orchestrator.analysis.analyze import CARRYOVER_ALPHA, MIXTURE, block_cells
from orchestrator.analysis.decide import (
    MIN_ROUNDS_UNDER_LOAD,
    MIN_STEPS_UNDER_LOAD,
    Rule,
    aa_off,
    construction_equivalent,
    effect_scope,
    futility_power,
    judge,
    thin_under_load,
)
from orchestrator.core import objective, paired
from orchestrator.core.blocks import ordered
from orchestrator.core.convert import from_dict
from orchestrator.core.paths import conf_dir
from orchestrator.core.records import Pairing, VerdictKind
from orchestrator.spec.config import Choice, ProtocolConfig
from orchestrator.spec.plan import ArmProgress, arm_order, more_rounds_reason

BASE, AA, VAR = "a0", "aa", "a1"


@dataclass(frozen=True)
class NoiseModel:
    name: str
    step_s: float = 0.005  # typical step time
    step_sd_log: float = 0.03
    process_sd_log: float = 0.01
    slow_ratio: float = 1.6
    mean_fast_s: float = 2.0
    mean_slow_s: float = 1.0
    normalised: bool = False  # a host-speed reference divides the host's speed out
    reference_sd_log: float = 0.0  # what the reference leaves per step
    outlier_trial_p: float = 0.0
    outlier_factor: float = 2.0
    fixed_s: float = 1.0
    steps: int = 100  # measured steps per trial
    # pairing=steps: the SD of an arm's log offset in one process that the other arms in the
    # same process do not share (0: a process's offset is common to all its arms; an
    # alternated command's arms each run a process of their own: process_sd_log 0, this > 0)
    arm_process_sd_log: float = 0.0
    # pairing=steps: the heavy tail of that offset: with this probability an arm's process in a
    # round runs arm_process_outlier_log slower or faster (either sign alike) for its whole life
    arm_process_outlier_p: float = 0.0
    arm_process_outlier_log: float = 0.0
    # the variant's own per-process log offset (absent from the baseline and the A/A control)
    variant_process_sd_log: float = 0.0
    # pairing=steps: log slowdown of the variant's first measured step after each switch
    variant_carry_log: float = 0.0
    # the variant's every variant_stall_every-th step (untagged: a periodic stall, a GC pause,
    # a recompile the recipe does not report) slower by this log factor
    variant_stall_every: int = 0
    variant_stall_log: float = 0.0
    source: str = ""  # how it was measured

    @classmethod
    def load(cls, path: str | Path) -> NoiseModel:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


@dataclass
class Host:
    """The host's speed over time: a two-state process, fast (1) or slow (slow_ratio)."""

    model: NoiseModel
    rng: np.random.Generator
    t: float = 0.0
    slow: bool = False
    until: float = 0.0

    def __post_init__(self) -> None:
        m = self.model
        share = m.mean_slow_s / (m.mean_fast_s + m.mean_slow_s)
        self.slow = bool(self.rng.random() < share)
        self.until = self.rng.exponential(m.mean_slow_s if self.slow else m.mean_fast_s)

    def run(self, durations: np.ndarray) -> np.ndarray:
        """Run steps of the given nominal durations one after the other from now; returns the
        speed factor each step ran at (its start's state) and advances the clock."""
        m = self.model
        n = durations.size
        out = np.empty(n)
        if n <= 64:  # a block's few steps: one at a time (numpy's calls cost more here)
            for j, d in enumerate(durations):
                while self.t >= self.until:
                    self.slow = not self.slow
                    self.until += self.rng.exponential(m.mean_slow_s if self.slow
                                                       else m.mean_fast_s)
                f = m.slow_ratio if self.slow else 1.0
                out[j] = f
                self.t += d * f
            return out
        i = 0
        while i < n:  # a run of steps in one state at a time, exactly as one step at a time:
            while self.t >= self.until:
                self.slow = not self.slow
                self.until += self.rng.exponential(m.mean_slow_s if self.slow else m.mean_fast_s)
            f = m.slow_ratio if self.slow else 1.0
            # each step's start, added in order (accumulate is sequential, as += was)
            starts = np.add.accumulate(np.concatenate(([self.t], durations[i:] * f)))
            over = np.flatnonzero(starts[1:n - i] >= self.until)
            k = int(over[0]) + 1 if over.size else n - i  # the steps that start in this state
            out[i:i + k] = f
            self.t = starts[k]
            i += k
        return out

    def idle(self, seconds: float) -> None:
        self.t += seconds


def trial_median(model: NoiseModel, host: Host, log_effect: float, rng: np.random.Generator,
                 steps: int, variant: bool = False, how: str = "median") -> float:
    """One simulated trial: its fixed cost, then ``steps`` measured steps; their summary
    (``how``: protocol.trial_summary, orchestrator.core.objective) as the campaign analyses
    them (normalised when the model says so)."""
    host.idle(model.fixed_s)
    own = rng.normal(0, model.variant_process_sd_log) if variant else 0.0
    base = model.step_s * math.exp(-log_effect + own) * math.exp(
        rng.normal(0, model.process_sd_log))
    nominal = base * np.exp(rng.normal(0, model.step_sd_log, steps))
    if variant and model.variant_stall_every:
        k = model.variant_stall_every
        nominal[(np.arange(steps) + rng.integers(k)) % k == 0] *= math.exp(model.variant_stall_log)
    if model.outlier_trial_p and rng.random() < model.outlier_trial_p:
        share = rng.uniform(0.2, 1.0)
        start = rng.integers(0, max(1, int(steps * (1 - share)) + 1))
        nominal[start:start + int(steps * share)] *= model.outlier_factor
    speed = host.run(nominal)
    times = nominal * speed
    if model.normalised:  # step / reference: the host's speed divides out, the reference's
        times = nominal * np.exp(rng.normal(0, model.reference_sd_log, steps))  # noise stays
    return float(np.median(times)) if how == "median" else objective.summarize(
        times.tolist(), how)


def paired_process(model: NoiseModel, host: Host, log_effects: dict[str, float], round_: int,
                   rng: np.random.Generator, steps: int, cfg: ProtocolConfig
                   ) -> dict[tuple[int, str], list[tuple[int, float]]]:
    """One simulated pairing=steps process: every arm (in ``log_effects``' order) in blocks of
    ``cfg.block_steps`` measured steps after ``cfg.switch_warmup_steps`` unmeasured ones, in the
    protocol's block order (a seeded Williams design, or reversed every cycle), an even number
    of cycles giving each arm ``steps`` steps; (round, arm) -> its measured (cycle, time)
    steps, as the analysis reads them (orchestrator.analysis.analyze.block_cells)."""
    host.idle(model.fixed_s)
    offset = rng.normal(0, model.process_sd_log)  # the process's, shared by its arms
    base = {a: model.step_s * math.exp(
        -e + offset + rng.normal(0, model.arm_process_sd_log) + _outlier(model, rng)
        + (rng.normal(0, model.variant_process_sd_log) if a == VAR else 0.0))
        for a, e in log_effects.items()}
    cycles = max(2, math.ceil(steps / cfg.block_steps))
    cycles += cycles % 2
    arms = list(log_effects)
    seed = f"sim|{int(rng.integers(1 << 30))}"
    per: dict[tuple[int, str], list[tuple[int, float]]] = {(round_, a): [] for a in arms}
    stall_k = model.variant_stall_every
    stall_at = int(rng.integers(stall_k)) if stall_k else 0  # the variant's steps so far
    for c in range(cycles):
        for arm in ordered(arms, c, cfg.order, seed):
            n = cfg.switch_warmup_steps + cfg.block_steps
            nominal = base[arm] * np.exp(rng.normal(0, model.step_sd_log, n))
            if arm == VAR and model.variant_carry_log:  # the first measured step after it
                nominal[cfg.switch_warmup_steps] *= math.exp(model.variant_carry_log)
            if arm == VAR and stall_k:
                nominal[(np.arange(n) + stall_at) % stall_k == 0] *= math.exp(
                    model.variant_stall_log)
                stall_at += n
            speed = host.run(nominal)[cfg.switch_warmup_steps:]
            nominal = nominal[cfg.switch_warmup_steps:]
            times = nominal * speed
            if model.normalised:
                times = nominal * np.exp(rng.normal(0, model.reference_sd_log, nominal.size))
            per[(round_, arm)].extend((c, float(t)) for t in times)
    return per


def _outlier(model: NoiseModel, rng: np.random.Generator) -> float:
    """An arm's process's heavy-tailed log offset: 0, or +-arm_process_outlier_log."""
    if not model.arm_process_outlier_p or rng.random() >= model.arm_process_outlier_p:
        return 0.0
    return model.arm_process_outlier_log * (1.0 if rng.random() < 0.5 else -1.0)


def screened_rounds(blocks_of: dict[str, dict[tuple[int, str], list[tuple[int, float]]]],
                    min_effect: float) -> set[int]:
    """The rounds whose contrasts the campaign's contamination screen would re-run
    (orchestrator.analysis.contamination.screen_paired over the simulated blocks)."""
    records = []
    for b, per in blocks_of.items():
        for (r, arm), steps in per.items():
            cyc: dict[int, list[float]] = {}
            for c, t in steps:
                cyc.setdefault(c, []).append(t)
            records.append({"trial_id": f"{b}|{r}|{arm}", "bucket": b, "arm_id": arm,
                            "round": r, "is_baseline": arm == BASE, "status": "ok",
                            "kind": "timed", "pairing": "steps",
                            "blocks": [{"cycle": c, "median_s": statistics.median(v)}
                                       for c, v in cyc.items()]})
    flags, _ = contamination.screen_paired(records, min_effect)
    return {int(f.trial_id.split("|")[1]) for f in flags}


@functools.cache
def _preset(name: str) -> dict[str, Any]:
    path = conf_dir() / "protocol" / f"{name}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    data.pop("defaults", None)  # the schema, then the file's keys (_self_): ProtocolConfig's
    return data


def shipped_protocol(name: str = "default") -> ProtocolConfig:
    """The shipped protocol ``conf/protocol/<name>.yaml`` as the CLI composes it (its keys over
    ProtocolConfig's defaults), read without omegaconf: a fresh copy each call."""
    return _members(from_dict(ProtocolConfig, _preset(name), "protocol."))


def _members(cfg: ProtocolConfig, **knobs: Any) -> ProtocolConfig:
    """``cfg`` with ``knobs`` replaced, a choice given as its string made the member (as
    OmegaConf.to_object makes it), so the simulated protocol is the real one's type."""
    hints = typing.get_type_hints(ProtocolConfig)
    out = dataclasses.replace(cfg, **knobs)
    for f in dataclasses.fields(out):
        tp, value = hints[f.name], getattr(out, f.name)
        if isinstance(tp, type) and issubclass(tp, Choice) and not isinstance(value, tp):
            setattr(out, f.name, tp(value))
    return out


@dataclass(frozen=True)
class Protocol:
    """A simulated campaign's protocol: the real one (``config``; by default the shipped
    default protocol, conf/protocol/default.yaml) and the simulation's own knobs.

    Of ``config`` the simulator reads repeats, max_rounds, adaptive_step_rounds, confidence,
    alpha_spending, min_effect, ni_margin, aa_arm, aa_alpha, order, trial_summary, pairing,
    block_steps, switch_warmup_steps and paired_min_s. ``pairing`` steps runs every arm of a
    round in one simulated process; any other (``auto``, with no sweep here to choose by)
    one arm per process. Build it with :meth:`default` or :meth:`from_config`.
    """

    config: ProtocolConfig = field(default_factory=shipped_protocol)
    steps: int | None = None  # measured steps per trial (None: the noise model's)
    # the rule's parts, so that the earlier rule can be measured beside the new one:
    per_arm: bool = True  # each arm's own contrasts (False: the pooled block fit's variance)
    carry_check: bool = True  # the carry-over check of pairing=steps (analyze.block_cells)
    # the variant ran the baseline's own step by its description (``executes``): equivalent by
    # construction, under the new rule only on evidence (decide.construction_equivalent)
    same_step: bool = False
    construction_on_evidence: bool = True  # False: the earlier shortcut (no significance)
    # futility only at a look with power (decide.futility_power); False: at every look
    futility_power: bool = True
    # pairing=steps: after each pass, rounds whose contrasts the contamination screen flags
    # are re-run once (orchestrator.analysis.contamination.screen_paired; campaign.trials)
    contamination: bool = True
    # the campaign detected load (busy before it, or over trials' measured steps): the rule
    # then holds back a timing verdict on thin evidence (decide.thin_under_load)
    detected_load: bool = False

    @classmethod
    def from_config(cls, cfg: ProtocolConfig, **knobs: Any) -> Protocol:
        """``cfg`` (not changed: copied) with ``knobs`` replaced: a ProtocolConfig field's name
        sets it in ``config`` (``pairing="steps"``, ``max_rounds=7``), any other names the
        simulation's own knob (``steps``, ``per_arm``, ``detected_load``, ...)."""
        shared = {k: knobs.pop(k) for k in list(knobs) if k in _CONFIG_FIELDS}
        return cls(_members(cfg, **shared), **knobs)

    @classmethod
    def default(cls, **knobs: Any) -> Protocol:
        """The shipped default protocol (conf/protocol/default.yaml) with ``knobs`` replaced,
        as :meth:`from_config` replaces them."""
        return cls.from_config(shipped_protocol(), **knobs)

    @property
    def paired_by_steps(self) -> bool:
        return self.config.pairing == Pairing.steps


_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(ProtocolConfig))


@dataclass
class Outcome:
    verdict: str  # retain | reject | equivalent | inconclusive | invalid
    trials: int
    rounds: int
    wall_s: float = 0.0  # the simulated host clock: fixed costs and steps


def campaign(model: NoiseModel, effects: dict[str, float], p: Protocol,
             rng: np.random.Generator, weights: dict[str, float] | None = None) -> Outcome:
    """One simulated campaign of one variant against the baseline (and the A/A control), on
    the buckets of ``effects`` (bucket -> the variant's true speedup)."""
    buckets = list(effects)
    weights = weights or {b: 1.0 for b in buckets}
    host = Host(model, rng)
    cfg = p.config
    steps = p.steps or model.steps
    if p.paired_by_steps and cfg.paired_min_s > 0:  # the trial's time floor, in steps
        steps = max(steps, math.ceil(cfg.paired_min_s / model.step_s))
    plan = paired.looks(cfg.repeats, cfg.max_rounds, cfg.adaptive_step_rounds)
    arms = [BASE, AA, VAR] if cfg.aa_arm else [BASE, VAR]
    medians: dict[str, dict[tuple[int, str], float]] = {b: {} for b in buckets}
    blocks_of: dict[str, dict[tuple[int, str], list[tuple[int, float]]]] = {b: {} for b in buckets}
    running = list(arms)
    rounds_done, trials = 0, 0
    planned = list(range(cfg.repeats))
    seed = f"sim|{int(rng.integers(1 << 30))}"
    rerun: set[int] = set()  # rounds the contamination screen re-ran (once each)

    def run_round(r: int) -> None:
        nonlocal trials
        for b in buckets:
            order = arm_order(running, r, True, cfg.order, f"{seed}|{b}")
            logs = {a: math.log(effects[b]) if a == VAR else 0.0 for a in order}
            if p.paired_by_steps:
                blocks_of[b].update(paired_process(model, host, logs, r, rng, steps, cfg))
                trials += len(order)
                continue
            for arm in order:
                medians[b][(r, arm)] = trial_median(model, host, logs[arm], rng, steps,
                                                    arm == VAR, cfg.trial_summary)
                trials += 1

    while True:
        for r in planned:
            run_round(r)
        if p.paired_by_steps and p.contamination:
            firsts: dict[int, dict[str, dict[tuple[int, str], list[tuple[int, float]]]]] = {}
            for r in sorted(screened_rounds(blocks_of, cfg.min_effect) - rerun):
                rerun.add(r)
                firsts[r] = {b: {k: v for k, v in blocks_of[b].items() if k[0] == r}
                             for b in buckets}
                for b in buckets:  # the round's first attempt is left out ...
                    for key in firsts[r][b]:
                        del blocks_of[b][key]
                run_round(r)
            # ... where its re-run is clean; a re-run flagged too leaves the first standing
            for r in screened_rounds(blocks_of, cfg.min_effect) & set(firsts):
                for b in buckets:
                    blocks_of[b].update(firsts[r][b])
        if p.paired_by_steps:
            for b in buckets:
                medians[b] = block_cells(blocks_of[b], BASE,
                                         CARRYOVER_ALPHA if p.carry_check else 0.0,
                                         cfg.trial_summary)[0]
        rounds_done = planned[-1] + 1
        final = rounds_done >= cfg.max_rounds
        rule = Rule(cfg.min_effect, cfg.ni_margin, cfg.max_rounds, final,
                    paired.alpha_spent(1 - cfg.confidence, plan, cfg.max_rounds,
                                       cfg.alpha_spending),
                    load="simulated load" if p.detected_load else "",
                    short_trials=(f"{steps} measured step(s)" if steps < MIN_STEPS_UNDER_LOAD
                                  else ""))
        alpha = paired.alpha_spent(1 - cfg.confidence, plan, rounds_done, cfg.alpha_spending)
        kind, resolve, calibration, judged = _judge(medians, weights, alpha, rule,
                                                    cfg.aa_alpha, p)
        if calibration and final:
            return Outcome("invalid", trials, rounds_done, host.t)
        verdict = {"good": "retain", "bad": "reject", "equivalent": "equivalent"}.get(
            kind, "inconclusive")
        why = more_rounds_reason(ArmProgress(VAR, verdict, True, resolve, judged),
                                 rounds_done, cfg.max_rounds, calibration)
        if not why:
            return Outcome(verdict, trials, rounds_done, host.t)
        planned = list(range(rounds_done, min(cfg.max_rounds,
                                              rounds_done + cfg.adaptive_step_rounds)))


def _judge(medians: dict[str, dict[tuple[int, str], float]], weights: dict[str, float],
           alpha: float, rule: Rule, aa_alpha: float = 0.01, p: Protocol | None = None
           ) -> tuple[str, int | None, str, bool]:
    """(good | bad | equivalent | unsure, rounds in all to resolve it, the A/A calibration
    problem or "", whether this look may call an unsure variant hopeless)."""
    p = p or Protocol()
    fits = {b: paired.fit_blocks(paired.trial_cells(m), BASE, per_arm=p.per_arm)
            for b, m in medians.items()}
    if len(medians) > 1:
        fits[MIXTURE] = paired.fit_blocks(paired.mixture_cells(medians, weights), BASE,
                                          per_arm=p.per_arm)
    objective = MIXTURE if len(medians) > 1 else next(iter(medians))
    scopes = {k: effect_scope(k, f.effects.get(VAR), alpha) for k, f in fits.items()}
    off = aa_off({k: f.effects.get(AA) for k, f in fits.items()}, aa_alpha)
    calibration = f"A/A off at {off[-1].split()[0]}" if off else ""
    obj = scopes[objective]
    if obj is None:
        return "unsure", None, calibration, True
    kind, _, resolve, _ = judge(scopes, objective, alpha, rule)
    if kind in ("good", "bad") and thin_under_load(obj, rule):  # as decide.decide
        kind, resolve = "unsure", max(MIN_ROUNDS_UNDER_LOAD, obj.eff.rounds + 1)
    if p.same_step and kind == "unsure":  # equivalent by what ran (decide.decide)
        if not p.construction_on_evidence or not construction_equivalent(scopes, rule):
            return "equivalent", None, calibration, True
    judged = not p.futility_power or kind != "unsure" or futility_power(obj, alpha, rule)[0]
    return kind, resolve, calibration, judged


def correct(planted: float, verdict: str, min_effect: float) -> str:
    """correct | wrong-direction | false-decision | false-equivalent | undecided for a planted
    speedup (1 = A/A): A/A is correct when equivalent (inconclusive counts as undecided, any
    retain or reject as a false decision); a planted speedup outside the band is correct when
    retained (faster) or rejected (slower), and equivalent there is a false equivalent; inside
    it, equivalent is correct too."""
    if planted == 1.0:
        return {"equivalent": "correct", "retain": "false-decision",
                "reject": "false-decision"}.get(verdict, "undecided")
    good = "retain" if planted > 1 else "reject"
    bad = "reject" if planted > 1 else "retain"
    inside = 1 / (1 + min_effect) < planted < 1 + min_effect
    if verdict == good or (inside and verdict == VerdictKind.EQUIVALENT):
        return "correct"
    if verdict == bad:
        return "wrong-direction"
    if verdict == VerdictKind.EQUIVALENT:
        return "false-equivalent"
    return "undecided"


@dataclass
class Cell:
    planted: float
    outcomes: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    trials: int = 0
    n: int = 0
    wall_s: float = 0.0


def error_table(model: NoiseModel, p: Protocol, planted: Sequence[float], campaigns: int,
                seed: int = 0) -> list[Cell]:
    """Per planted speedup (one bucket): verdict counts, outcome kinds and trials spent."""
    rng = np.random.default_rng(seed)
    cells = []
    for s in planted:
        cell = Cell(s)
        for _ in range(campaigns):
            o = campaign(model, {"b": s}, p, rng)
            cell.outcomes[o.verdict] += 1
            cell.kinds[correct(s, o.verdict, p.config.min_effect)] += 1
            cell.trials += o.trials
            cell.wall_s += o.wall_s
            cell.n += 1
        cells.append(cell)
    return cells


def format_table(cells: Sequence[Cell]) -> list[str]:
    out = [("| planted speedup | campaigns | retain | reject | equivalent | inconclusive "
            "| invalid | correct | wrong direction | false decision | false equivalent "
            "| trials/campaign | simulated s/campaign |"),
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cells:
        o, k = c.outcomes, c.kinds
        label = "A/A" if c.planted == 1.0 else f"{c.planted:.3f}x"
        out.append(f"| {label} | {c.n} | {o['retain']} | {o['reject']} | {o['equivalent']} | "
                   f"{o['inconclusive']} | {o['invalid']} | {k['correct'] / c.n:.0%} | "
                   f"{k['wrong-direction']} | {k['false-decision']} | "
                   f"{k['false-equivalent']} | {c.trials / c.n:.1f} | "
                   f"{c.wall_s / c.n:.0f} |")
    return out


# planted effect -> counts of each verdict and outcome kind, trials and simulated time
def summary(cells: Sequence[Cell]) -> dict[str, dict[str, float]]:
    return {f"{c.planted:g}": {"n": c.n, **dict(c.outcomes), "correct": c.kinds["correct"],
                               "wrong_direction": c.kinds["wrong-direction"],
                               "false_decision": c.kinds["false-decision"],
                               "false_equivalent": c.kinds["false-equivalent"],
                               "trials_per_campaign": c.trials / c.n,
                               "simulated_s_per_campaign": c.wall_s / c.n} for c in cells}


__all__ = ["Host", "NoiseModel", "Outcome", "Protocol", "campaign", "correct", "error_table",
           "format_table", "shipped_protocol", "summary", "trial_median"]
