"""Hydra multirun: an index of the campaigns of one sweep directory and their verdicts.

``python -m orchestrator -m workload=gpt_test,gpt_tiny +sweep=fa2`` runs one campaign per
combination (each in ``<sweep dir>/<job num>_<sweep>/``). Hydra throws the jobs' return values
away in multirun, and with the submitit launcher plugin the jobs ran elsewhere, so the index is
built from what each campaign wrote to disk (config.json, plan.json, decisions.jsonl,
trials/*/trial.json) by a Hydra callback at the end of the multirun: ``index.json`` and
``index.md`` in the sweep directory. Paths in it are relative to the sweep directory.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any, TypedDict, cast

from orchestrator.core import records
from orchestrator.core.records import RecordError, RunDirectory
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.launch.base import read_record
from orchestrator.core.results import atomic_write_json, atomic_write_text, read_json, Status

log = logging.getLogger(__name__)

INDEX_VERSION = 1


class TrialCounts(TypedDict):
    """An index entry's ``trials``: planned, recorded, and the records by status."""

    planned: int | None
    recorded: int
    by_status: dict[str, int]


class IndexVerdict(TypedDict):
    """One variant's verdict in an index entry's ``verdicts``."""

    label: str
    verdict: str
    reasons: list[str]


class _IndexEntryBase(TypedDict):
    run_dir: str


class IndexEntry(_IndexEntryBase, total=False):
    """One campaign of a multirun's index.json (``campaigns``)."""

    workload: str | None
    sweep: str | None
    launcher: str | None
    device: str | None
    config_error: str
    trials: TrialCounts
    state: str
    verdicts: list[IndexVerdict]


class MultirunIndex(TypedDict):
    """A multirun's index.json: every campaign under the sweep directory."""

    index_version: int
    campaigns: list[IndexEntry]


def _campaign_dirs(sweep_dir: Path) -> list[Path]:
    dirs = [p.parent for p in sweep_dir.glob("*/plan.json")]
    return sorted(dirs, key=lambda p: (len(p.name.split("_", 1)[0]), p.name))


def campaign_entry(sweep_dir: Path, run_dir: Path) -> IndexEntry:
    """What one campaign run dir says about itself (never raises on a broken campaign)."""
    entry: IndexEntry = {"run_dir": str(run_dir.relative_to(sweep_dir))}
    try:
        cfg = read_json(run_dir / records.CONFIG)
        # (mypy's TypedDict.update takes no keywords; these are IndexEntry's keys)
        entry.update(workload=cfg.get("workload", {}).get("name"),  # type: ignore[call-arg]
                     sweep=(cfg.get("sweep") or {}).get("name"),
                     launcher=cfg.get("launcher", {}).get("name"), device=cfg.get("device"))
    except (OSError, ValueError):
        entry["config_error"] = "config.json missing or unreadable"
    try:
        planned = len(RunDirectory(run_dir).plan().trials)
    except (OSError, ValueError):
        planned = None
    statuses = Counter(
        cast("TrialRecordDict", rec or {}).get("status", "unreadable")  # {}: unreadable
        for rec in (read_record(p) for p in RunDirectory(run_dir).trial_paths())
    )
    entry["trials"] = {"planned": planned, "recorded": sum(statuses.values()),
                       "by_status": dict(sorted(statuses.items()))}
    verdicts: list[IndexVerdict] = []
    path = run_dir / records.DECISIONS
    if path.exists():
        try:
            verdicts = [{"label": d.label, "verdict": d.verdict.value, "reasons": list(d.reasons)}
                        for d in records.read_decisions(path)]
            entry["state"] = "decided"
        except (OSError, RecordError) as exc:
            entry["state"] = f"unreadable ({exc})"
    else:
        entry["state"] = "incomplete (no decisions.jsonl: the campaign failed or was interrupted)"
    entry["verdicts"] = verdicts
    return entry


def build_index(sweep_dir: Path) -> MultirunIndex:
    sweep_dir = Path(sweep_dir)
    return {"index_version": INDEX_VERSION,
            "campaigns": [campaign_entry(sweep_dir, d) for d in _campaign_dirs(sweep_dir)]}


def render_index(index: MultirunIndex) -> str:
    lines = ["# Campaigns of this multirun", "",
             "| campaign | workload | sweep | trials (ok/planned) | verdicts |",
             "|---|---|---|---|---|"]
    for c in index["campaigns"]:
        t = c["trials"]
        ok = t["by_status"].get(Status.OK, 0)
        vs = ", ".join(f"{v['label']}: **{v['verdict']}**" for v in c["verdicts"]) or c["state"]
        lines.append(f"| `{c['run_dir']}` | {c.get('workload')} | {c.get('sweep')} "
                     f"| {ok}/{t['planned']} | {vs} |")
    return "\n".join(lines) + "\n"


def write_index(sweep_dir: Path) -> MultirunIndex:
    index = build_index(sweep_dir)
    atomic_write_json(Path(sweep_dir) / "index.json", index)
    atomic_write_text(Path(sweep_dir) / "index.md", render_index(index))
    log.info("multirun index of %d campaign(s): %s", len(index["campaigns"]),
             Path(sweep_dir) / "index.md")
    return index


try:
    from hydra.experimental.callback import Callback as _Callback
except ImportError:  # pragma: no cover - hydra is a dependency; keeps the module importable
    _Callback = object  # type: ignore[assignment,misc]


class CampaignIndex(_Callback):  # type: ignore[misc,valid-type]
    """Hydra callback (registered in conf/config.yaml): writes the index after a multirun."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        write_index(Path(str(config.hydra.sweep.dir)))
