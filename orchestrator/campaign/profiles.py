"""Profiled trials in a campaign: planned after the timed trials, one per arm and bucket.

They run through the campaign's launcher (a fresh process each with the local launcher), are
recorded in ``trials/<trial_id>/trial.json`` with ``kind == "profile"`` and their own status,
and are skipped on resume once final. Analysis filters ``kind == "timed"``, so they never reach
timing statistics; their per-step times go to ``profile_steps.csv``, not ``steps.csv``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.core.records import TrialKind
from orchestrator.core.section import Section
from orchestrator.spec.config import Config
from orchestrator.core.convert import to_dict
from orchestrator.spec.jobs import TrialSpec, make_specs
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.launch.base import Launcher
from orchestrator.spec.plan import PlannedTrial, slug
from orchestrator.analysis.profile.diff import diff_traces
from orchestrator.worker.profile.framework import trace_name
from orchestrator.analysis.profile.sections import profile_section
from orchestrator.core.results import write_csv, Status
from orchestrator.spec.sweep import ResolvedArm, selected_buckets
from orchestrator.analysis.utilization import summarize_peaks

log = logging.getLogger(__name__)

# a tool run gets its own limit plus this margin for the trial process around it
_TOOL_MARGIN_S = 120.0


def profile_trial_id(layer: str, bucket: str, arm_id: str) -> str:
    return f"prof-{layer}-{slug(bucket)}-{arm_id}"


def profile_specs(cfg: Config, run_dir: Path, arms: Sequence[ResolvedArm]) -> list[TrialSpec]:
    """The profiled trials of this campaign (none when ``profile.mode == off``)."""
    layer = cfg.profile.mode
    if layer == "off":
        return []
    planned = []
    pos = 100_000  # after every timed trial in plan order
    for b in selected_buckets(cfg):
        for a in arms:
            planned.append(PlannedTrial(profile_trial_id(layer, b["name"], a.arm_id), pos, -1,
                                        b["name"], a.arm_id))
            pos += 1
    settings = {**to_dict(cfg.profile), "layer": layer,
                "out_dir": str(run_dir / "profiles" / layer)}
    return [dataclasses.replace(s, kind="profile", profile=dict(settings))
            for s in make_specs(cfg, run_dir, list(arms), planned)]


def run_profiled_trials(cfg: Config, run_dir: Path, arms: Sequence[ResolvedArm], launcher: Launcher,
                        done: set[str]) -> list[TrialRecordDict]:
    """Run the profiled trials not already final in ``done``; returns their records."""
    specs = [s for s in profile_specs(cfg, run_dir, arms) if s.trial_id not in done]
    if not specs:
        return []
    timeout = cfg.protocol.trial_timeout_s
    if cfg.profile.mode in ("system", "compute"):
        timeout = max(timeout, cfg.profile.tool_timeout_s + _TOOL_MARGIN_S)
    records: list[TrialRecordDict] = []

    def on_done(spec: TrialSpec, record: TrialRecordDict) -> None:
        records.append(record)
        what = record.get("error") or ", ".join(record.get("artifacts") or [])
        log.info("[profile %d/%d] %s %s (%s): %s %s", len(records), len(specs),
                 spec.bucket["name"], spec.arm_label, cfg.profile.mode, record["status"], what)

    log.info("profiling: %d %s trial(s), never part of the timing statistics", len(specs),
             cfg.profile.mode)
    launcher.run(specs, on_done, timeout)
    return records


def write_diffs(run_dir: Path, records: Sequence[TrialRecordDict], arms: Sequence[Any]) -> None:
    """``profiles/framework/diff-<bucket>-<arm>.csv``: each variant's operators vs baseline."""
    fw = run_dir / "profiles" / "framework"
    ok = {(r["bucket"], r["arm_id"]): r for r in records
          if r.get("kind") == TrialKind.PROFILE and r.get("layer") == "framework" and r["status"] == Status.OK}
    base = arms[0].arm_id
    for (bucket, arm_id), r in ok.items():
        b = ok.get((bucket, base))
        if arm_id == base or b is None:
            continue
        d = diff_traces(fw / trace_name(b["trial_id"]), fw / trace_name(r["trial_id"]))
        write_csv(fw / f"diff-{slug(bucket)}-{arm_id}.csv", d["ops"])


def profiles_section(cfg: Config, run_dir: Path, arms: Sequence[Any], analysis: Any,
                     records: Sequence[TrialRecordDict]) -> list[Section]:
    """decisions.md's ``Profiles`` section (an ``extra_sections`` entry), or nothing."""
    if not any(r.get("kind") == TrialKind.PROFILE for r in records) and cfg.profile.mode == "off":
        return []
    try:
        write_diffs(run_dir, records, arms)
    except Exception as exc:  # noqa: BLE001  a broken trace must not cost the campaign its decisions
        log.warning("profile diff failed: %s", exc)
    timed = {k: s.step_time_median_s for k, s in analysis.summaries.items()}
    peaks = summarize_peaks([r for r in records if r.get("kind", TrialKind.TIMED) == TrialKind.TIMED])
    body = profile_section(run_dir, cfg.profile.mode, analysis.buckets, arms, records, timed,
                           peaks, keep_vendor_reports=cfg.sanitize.keep_vendor_reports)
    return [Section("Profiles", body)] if body else []
