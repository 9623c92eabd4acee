"""decisions.md: formatting functions that return text (pure)."""

from __future__ import annotations

from typing import Any, Sequence

from orchestrator.analyze import Analysis, ArmSummary
from orchestrator.decide import Verdict


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e3:.2f}"


def _mib(x: float | None) -> str:
    return "—" if x is None else f"{x / 2**20:.0f}"


def _tps(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _status(s: ArmSummary) -> str:
    if s.trials == 0:
        return "0/0"
    bad = ", ".join(f"{n} {k}" for k, n in sorted(s.statuses.items()) if k != "ok")
    return f"{s.ok}/{s.trials}" + (f" ({bad})" if bad else "")


def bucket_table(analysis: Analysis, bucket: str) -> list[str]:
    lines = [
        "| arm | median step (ms) | MAD (ms) | trial medians (ms) | tokens/s | speedup [CI] "
        "| ok trials | peak mem (MiB) |",
        "|---|---:|---:|---|---:|---|---|---:|",
    ]
    for arm in analysis.arms:
        s = analysis.summaries[(bucket, arm.arm_id)]
        c = analysis.comparisons.get((bucket, arm.arm_id))
        if arm.is_baseline:
            sp = "baseline"
        elif c and c.estimate:
            e = c.estimate
            sp = f"{e.speedup:.3f}x [{e.low:.3f}, {e.high:.3f}]"
        else:
            sp = f"— ({c.note})" if c and c.note else "—"
        spread = (
            f"{_ms(s.trial_median_min_s)}–{_ms(s.trial_median_max_s)}" if s.ok else "—"
        )
        lines.append(
            f"| {arm.label} | {_ms(s.step_time_median_s)} | {_ms(s.step_time_mad_s)} | {spread} "
            f"| {_tps(s.tokens_per_s)} | {sp} | {_status(s)} | {_mib(s.peak_mem_bytes)} |"
        )
    return lines


def mixture_table(analysis: Analysis) -> list[str]:
    w = ", ".join(f"{b} {analysis.bucket_weights[b]:g}" for b in analysis.buckets)
    lines = [
        f"Weighted by step share ({w}); speedup = total baseline time / total variant time "
        "for the same mix of steps (never a mean of per-bucket speedups).",
        "",
        "| arm | speedup [CI] |",
        "|---|---|",
    ]
    for arm in analysis.arms[1:]:
        c = analysis.comparisons.get(("mixture", arm.arm_id))
        if c and c.estimate:
            e = c.estimate
            lines.append(f"| {arm.label} | {e.speedup:.3f}x [{e.low:.3f}, {e.high:.3f}] |")
        else:
            lines.append(f"| {arm.label} | — ({c.note if c else 'n/a'}) |")
    return lines


def render_decisions(
    *,
    sweep: Any,
    workload_name: str,
    analysis: Analysis,
    verdicts: Sequence[Verdict],
    env_line: str,
    protocol: Any,
    launcher: str,
    failures: Sequence[dict[str, Any]],
    extra_sections: Sequence[tuple[str, list[str]]] = (),
) -> str:
    base = analysis.arms[0]
    conf = int(round(protocol.confidence * 100))
    out = [
        f"# Decision: {sweep.name}",
        "",
        f"**Hypothesis.** {sweep.hypothesis.strip()}",
        "",
        f"- workload: `{workload_name}`; buckets: {', '.join(analysis.buckets)}",
        f"- variable: `{sweep.variable}`"
        + (f" (compound knob: {', '.join(f'{k} → `{v}`' for k, v in sweep.knob.items())})"
           if sweep.knob else ""),
        f"- baseline: `{base.label}`; variants: {', '.join(f'`{a.label}`' for a in analysis.arms[1:])}",
        f"- environment: {env_line}",
        f"- protocol: {protocol.warmup_steps} warm-up + {protocol.measured_steps} measured steps "
        f"per trial, {protocol.repeats} rounds, arms interleaved"
        + (" with the order reversed every other round" if protocol.reverse_every_other_round else "")
        + f", each trial a fresh process ({launcher} launcher)",
        f"- rule: speedup = baseline step time / variant step time, {conf}% paired bootstrap "
        f"interval over rounds; **retain** when the lower end clears {1 + protocol.min_effect:.3f} "
        "in every bucket, **reject** when the interval lies below 1 in any bucket or a trial "
        "failed, **invalid** when the comparison cannot be made, else **inconclusive**",
        "",
        "## Verdicts",
        "",
        "| variant | verdict | reasons |",
        "|---|---|---|",
    ]
    for v in verdicts:
        out.append(f"| {v.label} | **{v.verdict}** | {'<br>'.join(v.reasons)} |")
    for bucket in analysis.buckets:
        out += ["", f"## Bucket `{bucket}`", ""] + bucket_table(analysis, bucket)
    if len(analysis.buckets) > 1:
        out += ["", "## Mixture", ""] + mixture_table(analysis)
    for title, body in extra_sections:
        out += ["", f"## {title}", ""] + body
    if failures:
        out += ["", "## Failed trials", ""]
        for f in failures:
            out.append(f"- `{f['trial_id']}` ({f.get('arm_label')}, {f.get('bucket')}): "
                       f"**{f['status']}**: {f.get('error') or ''}")
            tail = (f.get("stderr_tail") or "").strip().splitlines()[-3:]
            if tail:
                out += ["  ```", *[f"  {t}" for t in tail], "  ```"]
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
    return "\n".join(out)


def terminal_summary(sweep_name: str, verdicts: Sequence[Verdict], run_dir: str) -> str:
    lines = [f"{sweep_name}: {len(verdicts)} variant(s) decided; run dir {run_dir}"]
    for v in verdicts:
        lines.append(f"  {v.verdict:<12} {v.label}: {v.reasons[0] if v.reasons else ''}")
    return "\n".join(lines)
