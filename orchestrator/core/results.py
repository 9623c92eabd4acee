"""Result records on disk: atomic writes, a versioned schema, failures as rows.

Kept free of pandas at import time: trial processes write through this module and must start
fast. :func:`load_trials` imports pandas when the campaign collects.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import pandas as pd

from orchestrator.core.records import TrialKind
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.core.records import (  # noqa: F401  (moved there; importers follow)
    ARMS_FAILURES,
    FINAL,
    SCHEMA_VERSION,
    Status,
    VerdictKind,
    atomic_write_json,
    atomic_write_text,
    read_json,
    write_csv,
)

STATUSES = tuple(s.value for s in Status)
INFRA_STATUS = Status.INFRA_FAILED.value
# final: kept on resume, never re-run (Status.final)
FINAL_STATUSES = tuple(s.value for s in Status if s in FINAL)
# the arm's own failures (a verdict of reject for it, never a timing)
FAILED_STATUSES = tuple(s.value for s in Status if s in ARMS_FAILURES)
VERDICTS = tuple(v.value for v in VerdictKind)


def trial_record(**fields: Any) -> TrialRecordDict:
    """A trial.json body; every record carries the schema version."""
    return cast(TrialRecordDict, {"schema_version": SCHEMA_VERSION, **fields})


def excluded_tags(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many excluded steps of steps.csv rows carried each tag (compile, switch, epoch
    boundary ...)."""
    out: dict[str, int] = {}
    for r in rows:
        if r["phase"] == "excluded":
            for tag in filter(None, str(r.get("tags") or "").split(";")):
                out[tag] = out.get(tag, 0) + 1
    return out


def ok_timed(trials: pd.DataFrame) -> pd.DataFrame:
    """The ok timed trials of a trials table (not pilots, profiled or microbenchmark ones)."""
    if trials.empty or "status" not in trials:
        return trials.iloc[0:0]
    return trials[(trials["status"] == Status.OK) & (trials.get("kind", TrialKind.TIMED) == TrialKind.TIMED)]


def load_trials(run_dir: str | os.PathLike[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(trials, steps) DataFrames from ``run_dir/trials/*/``. Trials of another schema version
    raise ValueError instead of being mixed in silently."""
    import pandas as pd

    trials, steps = [], []
    for tdir in sorted(Path(run_dir, "trials").glob("*/")):
        tpath = tdir / "trial.json"
        if not tpath.exists():
            continue
        rec = read_json(tpath)
        if rec.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"{tpath}: schema_version {rec.get('schema_version')} != {SCHEMA_VERSION}; "
                "re-run the campaign or use a matching orchestrator version"
            )
        trials.append(rec)
        spath = tdir / "steps.csv"
        if rec.get("status") == Status.OK and spath.exists() and spath.stat().st_size:
            df = pd.read_csv(spath)
            df["trial_id"] = rec["trial_id"]
            steps.append(df)
    tdf = pd.DataFrame(trials)
    sdf = pd.concat(steps, ignore_index=True) if steps else pd.DataFrame()
    return tdf, sdf
