"""Reading campaigns back from their run directories (the only state a report uses)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.core.results import SCHEMA_VERSION, Status

log = logging.getLogger(__name__)

# a directory is a campaign run directory when it has these
MARKERS = ("plan.json", "decisions.jsonl")
# folders that hold copies of run directories (MLflow artifact stores): never campaigns
PRUNE = ("mlartifacts", "mlruns")


@dataclass
class Campaign:
    run_dir: Path
    config: dict[str, Any]
    plan: dict[str, Any]
    decisions: list[dict[str, Any]]
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
        return max((float(d.get("decided_at", 0)) for d in self.decisions), default=0.0)

    def input_mtime(self) -> float:
        """Newest modification time of what a summary is rendered from."""
        paths = [self.run_dir / n for n in ("decisions.jsonl", "results.csv", "plan.json")]
        paths += list(self.run_dir.glob("trials/*/trial.json"))
        paths += list(self.run_dir.glob("profiles/framework/*.json"))
        return max((p.stat().st_mtime for p in paths if p.exists()), default=0.0)


class SchemaMismatch(ValueError):
    pass


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


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _source(run_dir: Path) -> dict[str, str]:
    """source.txt as key: value pairs (written by the provenance step when present)."""
    path = run_dir / "source.txt"
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def load_campaign(run_dir: Path) -> Campaign:
    plan = _read_json(run_dir / "plan.json")
    version = plan.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SchemaMismatch(
            f"{run_dir}: schema_version {version} (this report reads {SCHEMA_VERSION})"
        )
    decisions = [
        json.loads(line)
        for line in (run_dir / "decisions.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    bad = {d.get("schema_version") for d in decisions} - {SCHEMA_VERSION}
    if bad:
        raise SchemaMismatch(f"{run_dir}: decisions.jsonl has schema_version {sorted(map(str, bad))}")
    config = _read_json(run_dir / "config.json") if (run_dir / "config.json").exists() else {}
    if "schema_version" in config and config["schema_version"] != SCHEMA_VERSION:
        raise SchemaMismatch(f"{run_dir}: config.json has schema_version "
                             f"{config['schema_version']} (this report reads {SCHEMA_VERSION})")
    rpath = run_dir / "results.csv"
    results = pd.read_csv(rpath) if rpath.exists() and rpath.stat().st_size else pd.DataFrame()
    cpath = run_dir / "correctness.json"
    correctness = _read_json(cpath) if cpath.exists() else None
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
    for tpath in sorted(run_dir.glob("trials/*/trial.json")):
        rec = _read_json(tpath)
        if rec.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise SchemaMismatch(f"{tpath.parent.name}: trial.json has schema_version "
                                 f"{rec.get('schema_version')} (this report reads "
                                 f"{SCHEMA_VERSION})")
        spath = tpath.parent / "steps.csv"
        if rec.get("status") != Status.OK or rec.get("kind", "timed") != "timed" or not spath.exists():
            continue
        df = pd.read_csv(spath)
        for key in ("trial_id", "arm_id", "arm_label", "bucket", "round", "position",
                    "is_baseline", "peak_mem_bytes", "paired_process"):
            df[key] = rec.get(key)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
