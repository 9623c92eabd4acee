"""The launcher interface: one contract for inline, local processes and Slurm."""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, Callable, Sequence

from orchestrator.results import read_json, trial_record
from orchestrator.trial import TrialSpec

OnDone = Callable[[TrialSpec, dict[str, Any]], None]

STDERR_TAIL_LINES = 30


def stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def record_or_failure(spec: TrialSpec, status: str, error: str, tail: str) -> dict[str, Any]:
    """The trial's own record when it wrote one, else a failure record with the reason."""
    path = Path(spec.trial_dir) / "trial.json"
    if path.exists() and status in ("", "ok"):
        rec: dict[str, Any] = read_json(path)
        if rec.get("status") != "ok" and tail:
            rec.setdefault("stderr_tail", tail)
        return rec
    return trial_record(
        trial_id=spec.trial_id,
        kind=spec.kind,
        bucket=spec.bucket["name"],
        seq_len=spec.bucket["seq_len"],
        micro_batch=spec.bucket["micro_batch"],
        bucket_weight=spec.bucket.get("weight", 1.0),
        arm_id=spec.arm_id,
        arm_label=spec.arm_label,
        is_baseline=spec.is_baseline,
        round=spec.round,
        position=spec.position,
        status=status,
        error=error,
        stderr_tail=tail,
    )


class Launcher(abc.ABC):
    name: str = "launcher"

    @abc.abstractmethod
    def run(self, specs: Sequence[TrialSpec], on_done: OnDone, timeout_s: float) -> None:
        """Run the specs in the given order; call ``on_done(spec, record)`` as each finishes.

        Every spec gets exactly one record (a failure is a record with a status); trial.json is
        on disk before ``on_done`` is called."""
