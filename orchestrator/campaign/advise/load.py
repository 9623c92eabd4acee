"""Reading what advise ranks: a profiled run directory and the sweep files (the I/O shell).

A run directory is either a campaign run with ``profile=framework`` (its baseline arm ``a0``
is read) or a baseline profile (:mod:`orchestrator.campaign.advise.profile`). Sweeps are the shipped
ones (``conf/sweep/*.yaml``) and those of each user config directory (``DIR/sweep/*.yaml``,
the layout Hydra's ``hydra.searchpath=[file://DIR]`` reads, so the same files run with
``python -m orchestrator +sweep=NAME hydra.searchpath=[file://DIR]``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.analysis.rank import BucketProfile, SweepInfo
from orchestrator.spec.config import EVIDENCE_KINDS
from orchestrator.core.errors import ConfigError
from orchestrator.core.paths import conf_dir
from orchestrator.spec.sweep import ENV_PREFIX, apply_overrides
from orchestrator.core.results import Status


@dataclass
class Profile:
    """The profiled baseline of one run directory."""

    run_dir: Path
    workload: dict[str, Any]  # the baseline arm's workload, plain data
    buckets: list[BucketProfile]
    baseline: str | None  # the ledger version it ran against (None: no ledger)
    min_effect: float
    device: str = ""
    failed: list[str] = field(default_factory=list)  # buckets whose profiled trial failed


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_profile(run_dir: Path) -> Profile:
    """The baseline's framework summaries per bucket; ConfigError naming the fix when the
    directory is not a run directory or has no profile of its baseline."""
    cfg = _json(run_dir / "config.json")
    if not isinstance(cfg, dict):
        raise ConfigError("RUN_DIR", f"{run_dir} is not a run directory (no config.json); pass "
                          "a campaign run with profile=framework, or profile the baseline with "
                          "--workload NAME")
    workload = dict(cfg.get("workload") or {})
    plan = _json(run_dir / "plan.json")
    if isinstance(plan, dict) and plan.get("arms"):  # a campaign: its baseline arm
        workload = apply_overrides(workload, dict(plan["arms"][0].get("overrides") or {}))
    weights = {b["name"]: float(b.get("weight", 1.0)) for b in workload.get("buckets", [])}
    buckets: list[BucketProfile] = []
    failed: list[str] = []
    device = ""
    for rec_path in sorted(run_dir.glob("trials/prof-framework-*/trial.json")):
        rec = _json(rec_path)
        if not isinstance(rec, dict) or rec.get("arm_id") != "a0":
            continue
        bucket = str(rec.get("bucket"))
        summary = _json(run_dir / "profiles" / "framework" / f"{rec['trial_id']}.summary.json")
        if rec.get("status") != Status.OK or not isinstance(summary, dict):
            failed.append(f"{bucket}: {rec.get('status')} {rec.get('error') or ''}".strip())
            continue
        device = device or str((summary.get("device") or {}).get("kind") or "")
        buckets.append(BucketProfile(bucket, weights.get(bucket, 1.0), summary))
    if not buckets:
        why = f" (failed: {'; '.join(failed)})" if failed else ""
        raise ConfigError("RUN_DIR", f"{run_dir} has no framework profile of its baseline{why}; "
                          "run the campaign with profile=framework, or profile the baseline "
                          "with --workload NAME")
    order = list(weights)
    buckets.sort(key=lambda b: order.index(b.name) if b.name in order else len(order))
    protocol = cfg.get("protocol") or {}
    return Profile(run_dir, workload, buckets, cfg.get("baseline"),
                   float(protocol.get("min_effect", 0.02)), device, failed)


def _sweep_doc(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(str(path.name), f"cannot read the sweep file: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(str(path.name), "a sweep file is a mapping (name, variable, ...)")
    if "name" not in doc and isinstance(doc.get("sweep"), dict):  # a global-package sweep file
        doc = doc["sweep"]
    return doc


def sweep_info(path: Path, source: str) -> SweepInfo:
    doc = _sweep_doc(path)
    name = str(doc.get("name") or path.stem)
    evidence = doc.get("evidence") or []
    if not isinstance(evidence, list):
        raise ConfigError(f"{path.name}: evidence", "is a list, e.g. evidence: [attention_share]")
    for i, e in enumerate(evidence):
        if e not in EVIDENCE_KINDS:
            raise ConfigError(f"{path.name}: evidence[{i}]", f"{e!r} is not a kind of evidence; "
                              f"choose from: {', '.join(EVIDENCE_KINDS)}")
    knob = doc.get("knob") or {}
    paths = tuple(knob.values()) if isinstance(knob, dict) and knob else (str(doc.get("variable")),)
    fixed = doc.get("fixed") or {}
    return SweepInfo(name, tuple(evidence), source, doc.get("workload_kind"), paths,
                     dict(fixed) if isinstance(fixed, dict) else {}, doc.get("microbench"))


def load_sweeps(user_dirs: Sequence[Path] = ()) -> list[SweepInfo]:
    """The shipped sweeps, then each user config directory's ``sweep/*.yaml``."""
    out = [sweep_info(p, "shipped") for p in sorted((conf_dir() / "sweep").glob("*.yaml"))]
    names = {s.name for s in out}
    for d in user_dirs:
        files = sorted((d / "sweep").glob("*.yaml"))
        if not files:
            raise ConfigError("--sweeps", f"{d} has no sweep/*.yaml; pass a config directory "
                              "whose sweep/ holds the sweep files")
        for p in files:
            s = sweep_info(p, "user")
            if s.name in names:
                raise ConfigError("--sweeps", f"{p.name}: sweep {s.name!r} is already defined "
                                  "(a shipped sweep or an earlier directory); rename it")
            names.add(s.name)
            out.append(s)
    return out


def sets_env(sweep: SweepInfo) -> bool:
    """Whether the sweep's knob is an environment switch (``env.*``)."""
    return any(p.startswith(ENV_PREFIX) for p in sweep.paths)
