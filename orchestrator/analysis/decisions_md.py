"""decisions.md: formatting functions that return text (pure)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from orchestrator.core.records import Pairing
from orchestrator.core.section import Section
from orchestrator.analysis.analyze import Analysis, ArmSummary
from orchestrator.analysis.decide import RULE, Verdict
from orchestrator.core.results import Status
from orchestrator.core.trial_record import TrialRecordDict


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e3:.2f}"


def _mib(x: float | None) -> str:
    return "—" if x is None else f"{x / 2**20:.0f}"


def _tps(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _status(s: ArmSummary) -> str:
    if s.trials == 0:
        return "0/0"
    bad = ", ".join(f"{n} {k}" for k, n in sorted(s.statuses.items()) if k != Status.OK)
    return f"{s.ok}/{s.trials}" + (f" ({bad})" if bad else "")


def _ci(e: Any) -> str:
    return f"{e.speedup:.3f}x [{e.low:.3f}, {e.high:.3f}]"


def noise_line(analysis: Analysis, key: str, min_effect: float | None = None) -> str:
    """One line on the A/A control of a bucket (or the mixture): does it cover 1?"""
    c = analysis.noise.get(key)
    if analysis.control is None:
        if analysis.calibration_note:
            return (f"A/A control: not run in this campaign; relying on "
                    f"{analysis.calibration_note} (protocol.calibration_max_age_h).")
        return "A/A control: not run (protocol.aa_arm=false): calibration not checked."
    if c is None or c.estimate is None or c.noise_floor is None:
        return f"A/A control: no interval ({c.note if c else 'no A/A rounds'})."
    ok = c.estimate.low <= 1 <= c.estimate.high
    return (f"A/A control ({c.paired_rounds} rounds): {_ci(c.estimate)}, "
            + ("covers 1: the intervals are calibrated here" if ok else
               "**does not cover 1: the intervals are not calibrated here**")
            + f" (two identical arms {c.noise_floor:.1%} apart).")


def bucket_table(
    analysis: Analysis, bucket: str, verdicts: Sequence[Verdict] = (),
    min_effect: float | None = None,
) -> list[str]:
    by_arm = {v.arm_id: v for v in verdicts}
    lines = [
        noise_line(analysis, bucket, min_effect),
        "",
        "| arm | median step (ms) | MAD (ms) | trial medians (ms) | tokens/s | speedup [CI] "
        "| rank test p | ok trials | peak mem (MiB) | verdict |",
        "|---|---:|---:|---|---:|---|---:|---|---:|---|",
    ]
    arms = list(analysis.arms)
    if analysis.control is not None:
        arms.insert(1, analysis.control)
    warnings: list[str] = []
    for arm in arms:
        s = analysis.summaries[(bucket, arm.arm_id)]
        is_control = analysis.control is not None and arm.arm_id == analysis.control.arm_id
        c = analysis.noise.get(bucket) if is_control else analysis.comparisons.get((bucket, arm.arm_id))
        if arm.is_baseline:
            sp = "baseline"
        elif c and c.estimate:
            sp = _ci(c.estimate)
        else:
            sp = f"— ({c.note})" if c and c.note else "—"
        p = f"{c.rank.p_value:.2g}" if c and c.rank and not arm.is_baseline else "—"
        spread = (
            f"{_ms(s.trial_median_min_s)}–{_ms(s.trial_median_max_s)}" if s.ok else "—"
        )
        verdict = ("A/A control" if is_control else "" if arm.is_baseline
                   else f"**{by_arm[arm.arm_id].verdict}**" if arm.arm_id in by_arm else "")
        lines.append(
            f"| {arm.label} | {_ms(s.step_time_median_s)} | {_ms(s.step_time_mad_s)} | {spread} "
            f"| {_tps(s.tokens_per_s)} | {sp} | {p} | {_status(s)} | {_mib(s.peak_mem_bytes)} "
            f"| {verdict} |"
        )
        warnings += [f"- {arm.label}: {w}" for w in s.warnings]
        if s.excluded_steps:
            warnings.append(f"- {arm.label}: {excluded_line(s.excluded_steps, s.excluded_tags)}")
        if s.charged_steps:
            warnings.append(f"- {arm.label}: {charged_line(s.charged_steps, s.charged_tags)}")
        if s.mean_to_median is not None and abs(s.mean_to_median - 1) >= MEAN_MEDIAN_SHOWN:
            warnings.append(
                f"- {arm.label}: its mean step is {s.mean_to_median:.3f}x its median (median "
                "over trials, charged steps included): the median column hides time the "
                "verdict's summary counts")
    used = [analysis.summaries[(bucket, a.arm_id)].warmup_steps_used for a in arms]
    known = [u for u in used if u is not None]
    if known:
        lines += ["", f"Warm-up steps dropped per trial (median per arm): "
                  f"{min(known):g}–{max(known):g}."]
    sources = {str(analysis.summaries[(bucket, a.arm_id)].peak_mem_source) for a in arms}
    shared = sorted(x for x in sources if "all arms" in x)
    if shared:  # pairing by steps where the peak cannot be reset per arm (the CPU's RSS)
        lines += ["", (f"Peak memory: one process ran every arm and its peak cannot be reset "
                       f"per arm here ({shared[0]}), so each arm's figure is the process's, "
                       "shared.")]
    if warnings:
        lines += ["", "Warnings:", "", *warnings]
    return lines


def excluded_line(n: int, tags: dict[str, int]) -> str:
    """The excluded steps, by the tags the trials gave them (records without the counts:
    the kinds of tag there are)."""
    if not tags:
        return (f"{n} tagged step(s) excluded (compile, autotune, epoch boundary, checkpoint, "
                "validation, profiler or arm switch)")
    named = ", ".join(f"{t} {k}" if len(tags) > 1 else t for t, k in
                      sorted(tags.items(), key=lambda kv: (-kv[1], kv[0])))
    return (f"{n} tagged step(s) excluded ({named}"
            + ("; the steps after each arm switch, pairing by steps" if "switch" in tags else "")
            + ")")


MEAN_MEDIAN_SHOWN = 0.02  # a mean/median ratio this far from 1 is shown beside the medians


def charged_line(n: int, tags: dict[str, int]) -> str:
    named = ", ".join(f"{t} {k}" for t, k in sorted(tags.items(), key=lambda kv: (-kv[1], kv[0])))
    return (f"{n} of them recur in the steady state ({named}) and are charged: counted at "
            "their own times in its time per step (protocol.charge_recurring_tags)")


def mixture_table(
    analysis: Analysis, verdicts: Sequence[Verdict] = (), min_effect: float | None = None
) -> list[str]:
    by_arm = {v.arm_id: v for v in verdicts}
    w = ", ".join(f"{b} {analysis.bucket_weights[b]:g}" for b in analysis.buckets)
    base = analysis.arms[0]
    total_w = sum(analysis.bucket_weights[b] for b in analysis.buckets)

    def mix_ms(arm_id: str) -> str:
        meds = [analysis.summaries[(b, arm_id)].step_time_median_s for b in analysis.buckets]
        if any(m is None for m in meds):
            return "—"
        tot = sum(analysis.bucket_weights[b] * m for b, m in zip(analysis.buckets, meds) if m)
        return _ms(tot / total_w)

    lines = [
        f"Weighted by step share ({w}); speedup = total baseline time / total variant time "
        "for the same mix of steps (never a mean of per-bucket speedups). The mixture is the "
        "objective the verdicts decide on; each bucket must also pass non-inferiority.",
        "",
        noise_line(analysis, "mixture", min_effect),
        "",
        "| arm | weighted median step (ms) | speedup [CI] | verdict |",
        "|---|---:|---|---|",
        f"| {base.label} | {mix_ms(base.arm_id)} | baseline | |",
    ]
    if analysis.control is not None:
        c = analysis.noise.get("mixture")
        sp = _ci(c.estimate) if c and c.estimate else f"— ({c.note if c else 'n/a'})"
        lines.append(f"| {analysis.control.label} | {mix_ms(analysis.control.arm_id)} | {sp} "
                     "| A/A control |")
    for arm in analysis.arms[1:]:
        c = analysis.comparisons.get(("mixture", arm.arm_id))
        sp = _ci(c.estimate) if c and c.estimate else f"— ({c.note if c else 'n/a'})"
        v = f"**{by_arm[arm.arm_id].verdict}**" if arm.arm_id in by_arm else ""
        lines.append(f"| {arm.label} | {mix_ms(arm.arm_id)} | {sp} | {v} |")
    return lines


def start_method_line(records: Sequence[TrialRecordDict]) -> str:
    """How the trial processes started: forked from the fork server or spawned (with why),
    counted over the records that say (the local and Slurm launchers' trials)."""
    counts: dict[tuple[str, str], int] = {}
    for r in records:
        method, why = r.get("start_method"), r.get("start_method_why")
        if isinstance(method, str) and method:  # a table's missing cell is NaN, not None
            key = (method, why if isinstance(why, str) else "")
            counts[key] = counts.get(key, 0) + 1
    parts = []
    for (method, why), n in sorted(counts.items(), key=lambda kv: (kv[0][0] != "fork-server",
                                                                   -kv[1], kv[0])):
        what = "forked from the fork server" if method == "fork-server" else method
        parts.append(f"{what} ({n} trial{'s' if n != 1 else ''}{': ' + why if why else ''})")
    return "; ".join(parts)


def ran_line(analysis: Analysis, most: int = 4) -> str:
    """What each arm's trials say their step ran (the recipe's ``executes``: e.g. the
    attention code, 'tiled-64x64' or 'triton-64x64-w4s2'), each item once per arm; "" when no
    trial said."""
    def items(x: Any) -> list[str]:
        if isinstance(x, dict):
            return [i for v in x.values() for i in items(v)]
        if isinstance(x, list):
            return [i for v in x for i in items(v)]
        return [str(x)]

    parts = []
    for arm in analysis.arms:
        seen: list[str] = []
        for bucket in analysis.buckets:
            s = analysis.summaries.get((bucket, arm.arm_id))
            for described in (s.executes if s is not None else []):
                seen += [i for i in items(json.loads(described)) if i not in seen]
        if seen:
            more = f" (+{len(seen) - most} more)" if len(seen) > most else ""
            parts.append(f"`{arm.label}`: {', '.join(seen[:most])}{more}")
    return "; ".join(parts)


def clock_line(analysis: Analysis) -> str:
    """Which clock timed each arm's measured steps (orchestrator.platform.block_timing): the
    host clock and why where no trial had device events (the CPU), else per arm the clock its
    trials took and the median ratio of device to host time per step; "" when no record says."""
    arms = [(a.label, s) for a in analysis.arms for b in analysis.buckets
            if (s := analysis.summaries.get((b, a.arm_id))) is not None and s.timed_by]
    if not arms:
        return ""
    if all(s.device_host_agreement is None for _, s in arms):
        why = next((s.timed_by_why for _, s in arms if s.timed_by_why), "")
        return "host clock" + (f" ({why})" if why else "")
    parts = []
    for arm in analysis.arms:  # every bucket's trials of the arm together
        mine = [s for label, s in arms if label == arm.label]
        counts: dict[str, int] = {}
        for s in mine:
            for w, n in s.timed_by.items():
                counts[w] = counts.get(w, 0) + n
        if not counts:
            continue
        words = ", ".join(f"{w} in {n} of {sum(counts.values())} trials"
                          for w, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        ratios = [s.device_host_agreement for s in mine if s.device_host_agreement is not None]
        ratio = (f", device/host time per step {statistics.median(ratios):.2f}"
                 if ratios else "")
        parts.append(f"`{arm.label}`: {words}{ratio}")
    return ("per block of measured steps, device events where the device was busy throughout, "
            "else the host clock; " + "; ".join(parts))


@dataclass(frozen=True)
class DecisionsInputs:
    """What decisions.md says of the campaign beside its analysis and verdicts: the sweep and
    workload, the protocol and launcher, and the one-line descriptions of where it ran."""

    sweep: Any
    workload_name: str
    protocol: Any
    launcher: str
    env_line: str
    start_line: str = ""  # how the trial processes started
    paired_by: str = ""  # "alternation": a plain command's arms, each its own process
    device_line: str = ""  # what device= resolved to and where
    launcher_line: str = ""  # e.g. how Slurm held the nodes


def render_decisions(
    *,
    inputs: DecisionsInputs,
    analysis: Analysis,
    verdicts: Sequence[Verdict],
    failures: Sequence[TrialRecordDict],
    extra_sections: Sequence[Section] = (),
) -> str:
    """decisions.md: the campaign and its rule, the verdicts, a table per bucket (and the
    mixture's), the extra sections in order, the failed trials, where the evidence is."""
    protocol = inputs.protocol
    out = [*_header_lines(inputs, analysis), *_verdict_lines(verdicts)]
    for bucket in analysis.buckets:
        out += ["", f"## Bucket `{bucket}`", ""] + bucket_table(
            analysis, bucket, verdicts, protocol.min_effect)
    if len(analysis.buckets) > 1:
        out += ["", "## Mixture", ""] + mixture_table(analysis, verdicts, protocol.min_effect)
    for section in extra_sections:
        out += ["", f"## {section.title}", ""] + section.lines
    out += _failure_lines(failures)
    out += [
        "",
        "## Evidence",
        "",
        "- per-trial records and raw per-step times: `trials/<trial_id>/trial.json`, `steps.csv`",
        "- trial order: `plan.json`; resolved configuration: `config.json`",
        "- per bucket and arm: `results.csv`; machine-readable verdicts: `decisions.jsonl`",
        "- baseline figures: `baseline.json`",
        "",
    ]
    return escape_table_cells("\n".join(out), [a.label for a in analysis.arms])


def _header_lines(inputs: DecisionsInputs, analysis: Analysis) -> list[str]:
    """The title, the hypothesis and the campaign's description: what was varied against
    what, where it ran, the protocol and the decision rule."""
    sweep = inputs.sweep
    base = analysis.arms[0]
    return [
        f"# Decision: {sweep.name}",
        "",
        f"**Hypothesis.** {sweep.hypothesis.strip()}",
        "",
        f"- workload: `{inputs.workload_name}`; buckets: {', '.join(analysis.buckets)}",
        f"- variable: `{sweep.variable}`"
        + (f" (compound knob: {', '.join(f'{k} → `{v}`' for k, v in sweep.knob.items())})"
           if sweep.knob else ""),
        f"- baseline: `{base.label}`; variants: {', '.join(f'`{a.label}`' for a in analysis.arms[1:])}",
        *([f"- ran (each arm's trials, as the recipe describes its step): {ran}"]
          if (ran := ran_line(analysis)) else []),
        f"- environment: {inputs.env_line}",
        # what device= resolved to and where: a Slurm compute node's probe job, or this host
        *([f"- device: {inputs.device_line}"] if inputs.device_line else []),
        _protocol_bullet(inputs),
        *([f"- steps timed by: {line}"] if (line := clock_line(analysis)) else []),
        *([f"- trial processes: {inputs.start_line}"] if inputs.start_line else []),
        # e.g. how Slurm held the nodes
        *([f"- {inputs.launcher_line}"] if inputs.launcher_line else []),
        _rule_bullet(analysis, inputs.protocol),
        *([("- host-speed reference: speedups, intervals and the noise floor use step times "
            "each divided by the time of a fixed host workload run just before the step, "
            "outside the timed window (protocol.speed_reference: a host's speed changes between "
            "and within trials); medians in the tables are raw")]
          if getattr(analysis, "speed_normalised", False) else []),
    ]


def _protocol_bullet(inputs: DecisionsInputs) -> str:
    """The protocol, how the arms are interleaved and how each round pairs them."""
    protocol, launcher = inputs.protocol, inputs.launcher
    balanced = str(getattr(protocol, "order", "reversed")) == "balanced"
    return (
        f"- protocol: {protocol_line(protocol)}, arms interleaved"
        + (" in a seeded Williams order per round (every arm follows every other equally "
           "often, the A/A control placed like any variant)" if balanced else
           " with the order reversed every other round" if protocol.reverse_every_other_round
           else "")
        + _pairing_clause(protocol, launcher, inputs.paired_by, balanced)
        + (" — note: the inline launcher runs trials in this process" if launcher == "inline"
           else ""))


def _pairing_clause(protocol: Any, launcher: str, paired_by: str, balanced: bool) -> str:
    """How a round pairs its arms: side by side (duet), a fresh process per trial, or by
    steps (one process running every arm, or a plain command's arms alternated)."""
    pairing = getattr(protocol, "pairing", Pairing.process)
    if pairing == Pairing.duet:
        return (f", duet: each round and bucket every arm at the same time, each its own fresh "
                f"process on its own slice of the machine ({_slices(protocol)}), the placement "
                "rotated every round (arm i on slice (i + round) mod slices); each arm's measured "
                "steps are kept where every arm was measuring (the overlap window), and the "
                "slice's own speed is fitted out of each variant's contrasts")
    if pairing != Pairing.steps:
        return f", each trial a fresh process ({launcher} launcher)"
    return (
        (f", pairing by steps: each round and bucket every arm's command as a fresh process "
         f"of its own ({launcher} launcher), resident together, the arms taking turns on the "
         "same cores (the others stopped by SIGSTOP) in blocks of "
         f"{protocol.block_steps} measured steps, each after "
         f"{protocol.switch_warmup_steps} excluded switch step(s) and the step its pause "
         "split, block "
         if paired_by == "alternation" else
         f", pairing by steps: each round and bucket one fresh process ({launcher} launcher) "
         f"running every arm, which take turns in blocks of {protocol.block_steps} measured "
         f"steps, each after {protocol.switch_warmup_steps} excluded switch step(s), block ")
        + f"order {'a seeded Williams design per cycle' if balanced else 'reversed every cycle'}; "
        "a round's effect is the median over cycles of the log "
        "ratio of the arm's block median to the baseline's in the same cycle")


def _rule_bullet(analysis: Analysis, protocol: Any) -> str:
    """The decision rule: how a speedup and its interval are formed, the error rate this look
    spends, the equivalence band and the non-inferiority margin."""
    return (
        f"- rule: {RULE}; speedup = baseline step time / variant step time from each "
        "variant's own per-round contrasts against the baseline (log of the round's baseline "
        "median over the variant's; the round is the unit: R - 1 degrees of freedom, no arm "
        "lends its spread to another; a baseline trial that stands out in every arm's "
        "contrasts left out), Student-t intervals; this look (of "
        f"{analysis.looks} planned) spends {analysis.alpha_look:.2%} of the "
        f"{1 - protocol.confidence:.0%} error rate (alpha spending, protocol.alpha_spending; "
        f"intervals at {1 - analysis.alpha_look:.1%}, equivalence at "
        f"{1 - 2 * analysis.alpha_look:.1%}); "
        f"equivalence band ±{protocol.min_effect:.0%}, non-inferiority margin "
        f"{getattr(protocol, 'ni_margin', 0.05):.0%}")


def _verdict_lines(verdicts: Sequence[Verdict]) -> list[str]:
    """## Verdicts: one table row per variant, then each variant's reasons and warnings."""
    out = ["", "## Verdicts", "", "| variant | verdict | in one line |", "|---|---|---|"]
    for v in verdicts:
        out.append(f"| {v.label} | **{v.verdict}** | {v.headline or (v.reasons or [''])[0]} |")
    for v in verdicts:
        out += ["", f"### {v.label}: {v.verdict}", "", "Reasons:", ""]
        out += [f"- {r}" for r in v.reasons]
        if v.warnings:
            out += ["", "Warnings:", ""] + [f"- {w}" for w in group_warnings(v.warnings)]
    return out


def _failure_lines(failures: Sequence[TrialRecordDict]) -> list[str]:
    """## Failed trials: each with its status, error, stderr's last lines and its log."""
    if not failures:
        return []
    out = ["", "## Failed trials", ""]
    for f in failures:
        out.append(f"- `{f['trial_id']}` ({f.get('arm_label')}, {f.get('bucket')}): "
                   f"**{f['status']}**: {f.get('error') or ''}")
        text = f.get("stderr_tail")  # a table's missing cell is NaN, not None
        tail = (text if isinstance(text, str) else "").strip().splitlines()[-3:]
        if tail:
            out += ["  ```", *[f"  {t}" for t in tail], "  ```"]
        if isinstance(f.get("log_file"), str):  # set by the campaign: the whole log
            out.append(f"  full log: `{f['log_file']}`")
    return out


def escape_table_cells(md: str, labels: Sequence[str]) -> str:
    """A label holding ``|`` would split its table cell: escaped as ``\\|`` in table rows
    (lines that start with ``|``); prose keeps it as written."""
    risky = sorted({lb for lb in labels if "|" in lb}, key=len, reverse=True)
    if not risky:
        return md
    lines = md.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("|"):
            for lb in risky:
                line = line.replace(lb, lb.replace("|", "\\|"))
            lines[i] = line
    return "\n".join(lines)


def group_warnings(warnings: Sequence[str]) -> list[str]:
    """Warnings of the form "scope: text" with the same text grouped: "s128, s512: text"."""
    by_text: dict[str, list[str]] = {}
    for w in warnings:
        scope, sep, text = w.partition(": ")
        if not sep or " " in scope:
            scope, text = "", w
        by_text.setdefault(text, [])
        if scope and scope not in by_text[text]:
            by_text[text].append(scope)
    return [(f"{', '.join(scopes)}: " if scopes else "") + text for text, scopes in by_text.items()]


def protocol_line(p: Any) -> str:
    warm = (f"{p.warmup_steps} warm-up" if getattr(p, "warmup_policy", "fixed") == "fixed" else
            f"automatic warm-up (at least {p.warmup_steps}, at most {p.warmup_max_steps} steps, "
            f"until {p.warmup_window}-step medians agree within {p.warmup_tolerance:.0%})")
    rounds = (f"{p.repeats} rounds" if getattr(p, "max_rounds", 0) <= p.repeats else
              f"{p.repeats} rounds then adaptive up to {p.max_rounds}")
    aa = ", an A/A control arm (baseline twice per round)" if getattr(p, "aa_arm", False) else ""
    clock = (" timed by process CPU time (protocol.clock=cpu: time lost to other processes is "
             "left out; not a wall-clock speedup)" if getattr(p, "clock", "wall") == "cpu" else "")
    window = (f"{p.measured_steps} measured steps (and at least {p.measured_min_s:g} s of them)"
              if getattr(p, "measured_min_s", 0) > 0 else f"{p.measured_steps} measured steps")
    how = str(getattr(p, "trial_summary", "median"))
    summary = {"trimmed_mean": "their mean with one step in fifty left out at each end",
               "mean": "their mean", "median": "their median"}.get(how, how)
    charged = (", recurring steady-state tagged steps charged"
               if getattr(p, "charge_recurring_tags", False) else "")
    return (f"{warm} + {window} per trial{clock}, each trial (and block) summarised by "
            f"{summary}{charged}, {rounds}{aa}")


def terminal_summary(sweep_name: str, verdicts: Sequence[Verdict], run_dir: str) -> str:
    lines = [f"{sweep_name}: {len(verdicts)} variant(s) decided; run dir {run_dir}"]
    for v in verdicts:
        lines.append(f"  {v.verdict:<12} {v.label}: {v.headline or (v.reasons or [''])[0]}")
    return "\n".join(lines)


def _slices(protocol: Any) -> str:
    """The duet's declared slices, as decisions.md names them."""
    cpus = getattr(protocol, "duet_cpus", None)
    devices = getattr(protocol, "duet_devices", None)
    parts = []
    if cpus:
        parts.append("cores " + " | ".join(",".join(str(c) for c in sl) for sl in cpus))
    if devices:
        parts.append("devices " + " | ".join(devices))
    return "; ".join(parts) or "this process's cores split evenly, one slice per arm"
