"""Result records on disk: atomic writes, a versioned schema, failures as rows.

Kept free of pandas at import time: trial processes write through this module and must start
fast. :func:`load_trials` imports pandas when the campaign collects.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable


if TYPE_CHECKING:
    import pandas as pd

# the version of every record format a run directory holds (trial.json, plan.json, config.json,
# decisions.jsonl, correctness.json, probe.json, environment.json, utilization.json ...): the
# reports refuse to mix records of different versions
SCHEMA_VERSION = 1

class Status(str, Enum):
    """How a trial ended; only ``ok`` trials enter timing statistics. A ``str`` enum: a record
    read back from JSON compares equal to its member (``"ok" == Status.OK``)."""

    OK = "ok"
    FAILED = "failed"
    UNAVAILABLE = "unavailable"  # a backend, kernel or device missing here
    OOM = "oom"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    KILLED = "killed"
    # failed in the harness, not on its arm's account (ranks out of step, a lost peer, a
    # paired process whose baseline failed): re-run, never a reject
    INFRA_FAILED = "infra_failed"

    def __str__(self) -> str:
        return self.value


class VerdictKind(str, Enum):
    """What a campaign decides for a variant."""

    RETAIN = "retain"
    REJECT = "reject"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"
    INVALID = "invalid"

    def __str__(self) -> str:
        return self.value


STATUSES = tuple(s.value for s in Status)
INFRA_STATUS = Status.INFRA_FAILED.value
# final: kept on resume, never re-run; a trial that timed out or was killed is re-run, since
# the cause (a hang, a kill) may be transient, and a harness failure is not the arm's
FINAL_STATUSES = tuple(s.value for s in (Status.OK, Status.FAILED, Status.UNAVAILABLE,
                                         Status.OOM, Status.CRASHED))
# the arm's own failures (a verdict of invalid for it, never a timing)
FAILED_STATUSES = tuple(s.value for s in (Status.FAILED, Status.OOM, Status.TIMEOUT,
                                          Status.CRASHED, Status.KILLED))
VERDICTS = tuple(v.value for v in VerdictKind)

def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress():
            os.unlink(tmp)
        raise


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return True


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> None:
    rows = list(rows)
    buf = io.StringIO()
    if rows:  # every key any row has, in the order first seen (rows may differ in fields)
        writer = csv.DictWriter(buf, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def read_json(path: str | os.PathLike[str]) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def trial_record(**fields: Any) -> dict[str, Any]:
    """A trial.json body; every record carries the schema version."""
    return {"schema_version": SCHEMA_VERSION, **fields}


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
    return trials[(trials["status"] == Status.OK) & (trials.get("kind", "timed") == "timed")]


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
