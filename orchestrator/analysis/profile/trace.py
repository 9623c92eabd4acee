"""Chrome traces on disk: sanitize and gzip on save, load into a DataFrame of events.

A trace from ``torch.profiler`` carries the host name and a temporary path; both are dropped
before the trace reaches the run directory. Stacks are off unless asked for (they carry source
paths and make traces large).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# top-level trace keys that identify the machine or a private path
_DROP_KEYS = ("host_name", "hostname", "traceName", "trace_id")
EVENT_COLUMNS = ("name", "cat", "ph", "ts", "dur", "pid", "tid", "args")


def sanitize(trace: dict[str, Any]) -> dict[str, Any]:
    """The trace without host names and temp paths (events are kept as they are)."""
    return {k: v for k, v in trace.items() if k not in _DROP_KEYS}


def save_trace(trace: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Sanitize, gzip and write atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump(sanitize(trace), fh, separators=(",", ":"))
    os.replace(tmp, path)
    return path


def load_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        data = json.load(fh)
    if isinstance(data, list):  # the bare-array form of the Chrome trace format
        data = {"traceEvents": data}
    return data  # type: ignore[no-any-return]


def events_frame(trace: dict[str, Any]) -> pd.DataFrame:
    """Complete (``X``) and instant (``i``) events as a DataFrame: name, cat, ph, ts, dur, end,
    pid, tid, args. Times in microseconds, as in the trace."""
    import pandas as pd

    rows = [
        {k: e.get(k) for k in EVENT_COLUMNS}
        for e in trace.get("traceEvents", [])
        if e.get("ph") in ("X", "i", "I")
    ]
    df = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    df["cat"] = df["cat"].fillna("")
    df["ts"] = df["ts"].astype(float)
    df["dur"] = df["dur"].fillna(0.0).astype(float)
    df["end"] = df["ts"] + df["dur"]
    df["args"] = df["args"].apply(lambda a: a if isinstance(a, dict) else {})
    return df.sort_values(["ts", "end"], ascending=[True, False], kind="stable").reset_index(drop=True)
