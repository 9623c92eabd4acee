"""Reading campaigns back from their run directories (the only state a report uses)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.core import records
from orchestrator.core.records import Decision, PlanDoc, RunDirectory

log = logging.getLogger(__name__)

# a directory is a campaign run directory when it has these
MARKERS = (records.PLAN, records.DECISIONS)
# folders that hold copies of run directories (MLflow artifact stores): never campaigns
PRUNE = ("mlartifacts", "mlruns")
# another schema version (a trial.json, the plan, a decision): skipped with its reason
SchemaMismatch = records.SchemaVersionError


@dataclass
class Campaign:
    """A campaign read back from its run directory (through orchestrator.core.records)."""

    run_dir: Path
    config: dict[str, Any]
    plan: PlanDoc
    decisions: list[Decision]
    results: pd.DataFrame
    source: dict[str, str] = field(default_factory=dict)
    correctness: dict[str, Any] | None = None

    @property
    def sweep(self) -> dict[str, Any]:
        return self.config.get("sweep") or {}

    @property
    def workload(self) -> str:
        return str((self.config.get("workload") or {}).get("name", "?"))

    @property
    def decided_at(self) -> float:
        return max((d.decided_at for d in self.decisions), default=0.0)

    def input_mtime(self) -> float:
        """Newest modification time of what a summary is rendered from."""
        paths = [self.run_dir / n for n in (records.DECISIONS, records.RESULTS, records.PLAN)]
        paths += RunDirectory(self.run_dir).trial_paths()
        paths += list(self.run_dir.glob("profiles/framework/*.json"))
        return max((p.stat().st_mtime for p in paths if p.exists()), default=0.0)


def find_run_dirs(root: str | os.PathLike[str]) -> list[Path]:
    """``root`` itself when it is a run directory, else every run directory below it."""
    root = Path(root)
    if all((root / m).exists() for m in MARKERS):
        return [root]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        if all(m in filenames for m in MARKERS):
            out.append(Path(dirpath))
            dirnames[:] = []  # a run directory's subfolders hold trials, not campaigns
        else:
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in PRUNE]
    return sorted(out)


def _source(run_dir: Path) -> dict[str, str]:
    """source.txt as key: value pairs (written by the provenance step when present)."""
    path = run_dir / records.SOURCE
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def load_campaign(run_dir: Path) -> Campaign:
    """The campaign in ``run_dir``; RecordError (SchemaMismatch for another schema version)
    naming the file that cannot be read."""
    rd = RunDirectory(run_dir)
    plan = rd.plan()
    decisions = rd.decisions()
    config = rd.config()
    rpath = run_dir / records.RESULTS
    results = pd.read_csv(rpath) if rpath.exists() and rpath.stat().st_size else pd.DataFrame()
    cpath = run_dir / records.CORRECTNESS
    correctness = records.load_json(cpath) if cpath.exists() else None
    return Campaign(run_dir, config, plan, decisions, results, _source(run_dir), correctness)


def load_campaigns(root: str | os.PathLike[str]) -> tuple[list[Campaign], list[str]]:
    """(campaigns, skipped): a campaign that cannot be read, or has another schema version, is
    skipped with its reason, never mixed in silently."""
    campaigns, skipped = [], []
    for run_dir in find_run_dirs(root):
        try:
            campaigns.append(load_campaign(run_dir))
        except SchemaMismatch as exc:
            skipped.append(f"skipped (incompatible schema): {exc}")
        except (OSError, ValueError, KeyError) as exc:
            skipped.append(f"skipped (unreadable): {run_dir}: {type(exc).__name__}: {exc}")
    return campaigns, skipped


def load_steps(run_dir: Path) -> pd.DataFrame:
    """Every ok timed trial's steps, with the trial's arm, bucket, round and position."""
    frames = []
    for rec in RunDirectory(run_dir).trials():
        spath = rec.path.parent / records.STEPS
        if not rec.ok_timed or not spath.exists():
            continue
        df = pd.read_csv(spath)
        for key in ("trial_id", "arm_id", "arm_label", "bucket", "round", "position",
                    "is_baseline", "peak_mem_bytes", "paired_process"):
            df[key] = rec.get(key)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
