"""What a campaign writes for people and tools once it has decided: decisions.md (the verdicts,
then every section of evidence, in reading order: :func:`decisions_md`), decisions.jsonl, and
the tables (results.csv, utilization.json, baseline.json: :func:`write_tables`).
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

from orchestrator.core.records import TrialKind, VerdictKind
from orchestrator.analysis import contamination
from orchestrator.analysis.analyze import Analysis, comparison_rows, step_times_by_trial
from orchestrator.analysis.decide import Verdict
from orchestrator.analysis.direction import DirectionCheck
from orchestrator.analysis.decisions_md import (
    DecisionsInputs,
    render_decisions,
    start_method_line,
)
from orchestrator.analysis.levers import lever_sections
from orchestrator.analysis.sensitivity import sensitivity_lines
from orchestrator.analysis.utilization import add_utilization_columns, utilization_section
from orchestrator.campaign.cost import cost_section
from orchestrator.campaign.gate import section as correctness_section
from orchestrator.campaign.lengths import read_sizing
from orchestrator.campaign.load import interfered, interference_of, read_optional
from orchestrator.campaign.microbench import direction_section
from orchestrator.campaign.profiles import profiles_section
from orchestrator.campaign.progress import trial_log
from orchestrator.campaign.sizing import sizing_section
from orchestrator.core import stats
from orchestrator.core.results import (
    SCHEMA_VERSION,
    Status,
    atomic_write_json,
    atomic_write_text,
    write_csv,
)
from orchestrator.core.section import Section
from orchestrator.core.trial_record import DeviceSummary, TrialRecordDict
from orchestrator.launch.base import INFRA_STATUS
from orchestrator.launch.device_probe import device_line
from orchestrator.launch.slurm_alloc import slurm_line
from orchestrator.spec.config import Config
from orchestrator.spec.ledger import LINEAGE_FILE, LineageDoc, lineage_lines
from orchestrator.spec.sweep import ResolvedArm

# verdicts that decide a variant (the cost per decision counts these)
DECIDED = (VerdictKind.RETAIN, VerdictKind.REJECT, VerdictKind.EQUIVALENT)
from recipes.registry import report_sections




class SpeedupInterval(TypedDict):
    """A speedup with its interval, as decisions.jsonl's ``speedups`` and ``aa_control[].aa``
    record it per bucket and the mixture."""

    speedup: float
    low: float
    high: float
    confidence: float


class NoiseEntry(TypedDict):
    """One scope of decisions.jsonl's ``aa_control``: the A/A noise floor and its interval."""

    noise_floor: float | None
    paired_rounds: int
    aa: SpeedupInterval | None


@dataclass
class Outcome:
    """What the campaign decided from the records on disk, and what its sections read."""

    analysis: Analysis
    verdicts: list[Verdict]
    trials_df: Any
    steps_df: Any
    records: list[TrialRecordDict]  # the trials table's rows: a key a trial lacks is NaN there
    directions: dict[str, DirectionCheck]
    peaks: list[Any]
    util: list[Any]


def _first_text(records: list[TrialRecordDict], key: str) -> str | None:
    """The first record's ``key`` that is text: a record may lack it (a table's missing cell
    is NaN, not None), e.g. an arm's record written by the paired process that ran it."""
    return next((v for r in records if isinstance(v := r.get(key), str) and v), None)


def env_line(trials: list[TrialRecordDict]) -> str:
    """decisions.md's environment: device, torch and python from the ok trials that say them;
    what no trial says is left out rather than printed as a placeholder."""
    ok = [t for t in trials if t.get("status") == Status.OK]
    if not ok:
        return f"python {platform.python_version()}; no successful trial reported its device"
    d: DeviceSummary | dict[str, str] = next((t["device"] for t in ok if isinstance(t.get("device"), dict)
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


def speedup_table(analysis: Analysis, arm_id: str) -> dict[str, SpeedupInterval | None]:
    """Per bucket (and the mixture): speedup with its interval, for the decision log."""
    out: dict[str, SpeedupInterval | None] = {}
    for (bucket, aid), c in analysis.comparisons.items():
        if aid == arm_id:
            e = c.estimate
            out[bucket] = None if e is None else {
                "speedup": e.speedup, "low": e.low, "high": e.high, "confidence": e.confidence}
    return out


def noise_table(analysis: Analysis) -> dict[str, NoiseEntry]:
    """Per bucket (and the mixture): the A/A noise floor and the A/A interval it comes from;
    empty without an A/A control arm. Written to decisions.jsonl for the reports."""
    out: dict[str, NoiseEntry] = {}
    for scope, c in analysis.noise.items():
        e = c.estimate
        out[scope] = {"noise_floor": c.noise_floor, "paired_rounds": c.paired_rounds,
                      "aa": None if e is None else {"speedup": e.speedup, "low": e.low,
                                                     "high": e.high, "confidence": e.confidence}}
    return out


def lineage_section(run_dir: Path) -> list[Section]:
    doc = read_optional(run_dir / LINEAGE_FILE)
    return [Section("Baseline lineage", lineage_lines(cast(LineageDoc, doc)))] if doc else []


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
                and r.get("kind", TrialKind.TIMED) not in (TrialKind.PROFILE, TrialKind.MICROBENCH)]
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
                *teardown_section(records),
                *rerun_section(records, cfg.protocol.interference_cores,
                               min_effect=cfg.protocol.min_effect, machine=
                               read_optional(run_dir / "machine_load.json")),
                *cost_section(cfg, run_dir, {t: sum(x) for t, x in step_times_by_trial(
                    out.steps_df).items()}, {a.arm_id: a.label for a in arms},
                    sum(1 for v in out.verdicts if v.verdict in DECIDED),
                    read_optional(run_dir / "plan.json"))]
    inputs = DecisionsInputs(
        sweep=cfg.sweep, workload_name=cfg.workload.name, env_line=env_line(records),
        protocol=cfg.protocol, launcher=cfg.launcher.name, start_line=start_method_line(records),
        device_line=device_line((read_optional(run_dir / "plan.json") or {}).get("device_resolved")),
        paired_by=next((r["paired_by"] for r in records
                        if isinstance(r.get("paired_by"), str)), ""),
        launcher_line=slurm_line(records))
    return render_decisions(inputs=inputs, analysis=analysis, verdicts=out.verdicts,
                            failures=failures, extra_sections=sections)


def teardown_section(records: Sequence[TrialRecordDict]) -> list[Section]:
    """decisions.md: the trials whose command logged every step it was asked for and was then
    stopped, not having exited (workload.exit_grace_s), per arm; none: no section."""
    timed = [r for r in records if r.get("kind", TrialKind.TIMED) == TrialKind.TIMED
             and r.get("status") == Status.OK]

    def stopped(r: TrialRecordDict) -> bool:  # a column of a frame: NaN where absent
        return isinstance(r.get("teardown"), str) and bool(r.get("teardown"))

    hung = [r for r in timed if stopped(r)]
    if not hung:
        return []
    by_arm: dict[str, list[int]] = {}
    for r in timed:
        got = by_arm.setdefault(str(r.get("arm_label") or r.get("arm_id")), [0, 0])
        got[0] += stopped(r)
        got[1] += 1
    lines = ["A command that had logged every step it was asked for and had not exited "
             "`workload.exit_grace_s` later was stopped and its steps kept (a hang at exit "
             "does not change the steps' times). Per arm, the trials so stopped:"]
    lines += [f"- `{arm}`: {n} of {of} trial(s)" for arm, (n, of) in by_arm.items()]
    clean = [arm for arm, (n, _) in by_arm.items() if n == 0]
    if clean:
        lines.append(f"- {', '.join(f'`{a}`' for a in clean)} exited by itself every time, "
                     "so the hang is the other arms' own: read their `command.log` before "
                     "adopting them")
    return [Section("Teardown", lines)]


def rerun_section(records: list[TrialRecordDict], cores: float = 0.25,
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
                     f"under interference ({interference_of(r)['others_cores']:.2f} cores) "
                     "after its last attempt: pooled; quiet the machine")
    return [Section("Interference", [f"- {x}" for x in load]),
            Section("Trials re-run (harness failures, interference, contamination)", lines)]


def _load_lines(records: list[TrialRecordDict], machine: dict[str, Any] | None) -> list[str]:
    """The Interference section's load: before the campaign and before each resume
    (machine_load.json), the cores' speeds, and other processes' CPU during the trials."""
    shares = [c for r in records if (c := interference_of(r).get("others_cores")) is not None]
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


def _load_line(m: dict[str, Any]) -> str:
    return "; ".join(m.get("problems") or []) or (
        f"quiet (other processes {m.get('others_cores') or 0:.2f} cores, load average "
        f"{m.get('load_average', 0):.2f} on {m.get('cores')} cores)")
