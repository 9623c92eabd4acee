"""The run directory: every file name it holds, and the records read from it, parsed once.

A campaign's run directory is the only state the tool keeps. This module owns its layout (the
names below; no other module spells them) and the records that cross the JSON boundary:
:class:`TrialRecord` (``trials/<id>/trial.json``), :class:`PlanDoc` (``plan.json``),
:class:`Decision` (a line of ``decisions.jsonl``). Each is frozen and validated on read: an
unknown schema version, or a field of the wrong kind, is one :class:`RecordError` naming the
file, never a ``KeyError`` three layers up. Their words (a trial's status and kind, a verdict,
a pairing) are members of :class:`Status`, :class:`TrialKind`, :class:`VerdictKind` and
:class:`Pairing`: ``str`` enums, so a record read back from JSON compares equal to its member
and is written as the plain word. :class:`RunDirectory` reads and writes through them,
atomically (:func:`atomic_write_json`).

Standard library only (trial processes write through it and must start fast).
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, cast

from orchestrator.core.trial_record import TrialRecordDict

# the version of every record format a run directory holds (trial.json, plan.json, config.json,
# decisions.jsonl, correctness.json, probe.json, environment.json, utilization.json ...): the
# reports refuse to mix records of different versions
SCHEMA_VERSION = 1

# --------------------------------------------------------------------------- the layout

PLAN = "plan.json"  # the trials planned, the arms, the buckets, the pairing, the looks' spending
CONFIG = "config.json"  # the composed configuration
DECISIONS = "decisions.jsonl"  # one verdict per variant, with its evidence
DECISIONS_MD = "decisions.md"  # the decision log a person reads
RESULTS = "results.csv"  # per bucket and arm: speedups, utilization
BASELINE = "baseline.json"  # the baseline arm's summaries
ENVIRONMENT = "environment.json"  # the environment report of the earliest trial
MACHINE_LOAD = "machine_load.json"  # the machine's load before each invocation
CORRECTNESS = "correctness.json"  # the correctness gate's probes and verdicts
UTILIZATION = "utilization.json"  # MFU / HFU per arm and bucket
SOURCE = "source.txt"  # the repository state the campaign ran from
SOURCE_DIFF = "source.diff"  # its uncommitted change
COMMAND = "command.txt"  # the command line of each invocation
CAMPAIGN_LOG = "campaign.log"  # the campaign's own log
SUMMARY_MD = "summary.md"  # the one-page summary
SUMMARY_HTML = "summary.html"
RUNNING = "running.json"  # the invocation holding the run directory (a claim)
CODE = "code.json"  # the user's code each arm ran (code revisions)
TRIALS = "trials"  # one folder per trial
COSTS = "costs.jsonl"  # node time of every process the campaign launched (campaign.cost)
CACHES = "caches"  # compile and autotune caches, one folder per arm (scratch: never sanitized)
TRIAL = "trial.json"  # in a trial's folder: its record
STEPS = "steps.csv"  # in a trial's folder: every step
COMMAND_LOG = "command.log"  # in a trial's folder: a command's output
STDERR_LOG = "stderr.log"  # in a trial's folder: a worker's standard error
SPEC = "spec.json"  # in a job's folder: what the worker runs
PROBE = "probe.json"  # in a probe's folder: its record
DECISION_LOG = "decision_log.md"  # beside run directories: the cross-campaign decision log


class RecordError(ValueError):
    """A record that cannot be read: the file, then what is wrong with it and the fix."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = Path(path)
        self.why = why


# --------------------------------------------------------------------------- the words


class Word(str, Enum):
    """A record's word: a ``str`` enum whose members' names are their values, printed and
    compared as the plain string (``"ok" == Status.OK``)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __repr__(self) -> str:  # messages quote it like the string it stands for
        return repr(self.value)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)

    @classmethod
    def parse(cls, value: Any, path: str | os.PathLike[str], key: str) -> Any:
        """The member ``value`` names; RecordError naming the file and key otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise RecordError(path, f"{key} is {value!r}, not one of "
                                    f"{', '.join(cls.values())}") from None


class Status(Word):
    """How a trial ended; only ``ok`` trials enter timing statistics."""

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
    # not run: its round's baseline ended without a measurement (not final: a resume runs it)
    SKIPPED = "skipped"

    @property
    def final(self) -> bool:
        """Kept on resume, never re-run. A trial that timed out or was killed is re-run (a hang
        or a kill may be transient), and a harness failure is not the arm's."""
        return self in FINAL

    @property
    def arms_failure(self) -> bool:
        """The arm's own failure: a verdict of reject for it, never a timing."""
        return self in ARMS_FAILURES


FINAL = frozenset({Status.OK, Status.FAILED, Status.UNAVAILABLE, Status.OOM, Status.CRASHED})
ARMS_FAILURES = frozenset({Status.FAILED, Status.OOM, Status.TIMEOUT, Status.CRASHED,
                           Status.KILLED})


class VerdictKind(Word):
    """What a campaign decides for a variant."""

    RETAIN = "retain"
    REJECT = "reject"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"
    INVALID = "invalid"


class TrialKind(Word):
    """What a trial is for: only ``timed`` trials enter timing statistics."""

    TIMED = "timed"
    PROFILE = "profile"  # a profiled trial (its own steps, never timed)
    MICROBENCH = "microbench"  # the direction check's microbenchmark of one op
    PILOT = "pilot"  # a command's pilot, sizing its trials by time


class Pairing(Word):
    """How a round's arms are paired (``protocol.pairing``; ``auto`` is resolved by the
    planner before a round is planned, and plan.json records the choice)."""

    auto = "auto"
    process = "process"  # one arm per process
    steps = "steps"  # the arms take turns in blocks of steps (in one process, or alternated)
    duet = "duet"  # a round's arms side by side, each on its own slice of the machine


# What the campaign needs to know of a resolved pairing word, declared beside the words (a
# new word says here which it is): whether a round's arms are measured together in one
# trial (one process per round and bucket, run, re-run and skipped together), and whether
# each arm's window is its own trial's measured steps (sized by trial length) rather than
# blocks inside one process (sized by the cycles planner).
JOINT_ROUNDS = (Pairing.steps, Pairing.duet)
TRIAL_WINDOWS = (Pairing.process, Pairing.duet)


def joint_rounds(pairing: object) -> bool:
    """A round's arms (by bucket) are measured together, in one trial."""
    return pairing in JOINT_ROUNDS


def trial_windows(pairing: object) -> bool:
    """Each arm's measured window is a trial's own (sized by trial length)."""
    return pairing in TRIAL_WINDOWS


# --------------------------------------------------------------------------- writing


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file, fsync, rename)."""
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
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Rows as CSV, every key any row has, in the order first seen (rows may differ)."""
    rows = list(rows)
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def read_json(path: str | os.PathLike[str]) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


# --------------------------------------------------------------------------- parsing


def _object(path: str | os.PathLike[str], data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RecordError(path, f"{what} is a JSON {type(data).__name__}, not an object")
    return data


class SchemaVersionError(RecordError):
    """A record of another schema version: never mixed in, never guessed at."""


def _version(path: str | os.PathLike[str], data: Mapping[str, Any],
             default: int | None = None) -> None:
    got = data.get("schema_version", default)
    if got != SCHEMA_VERSION:
        raise SchemaVersionError(path, f"schema_version {got} (this orchestrator reads "
                                       f"{SCHEMA_VERSION}); re-run the campaign, or read it "
                                       "with the orchestrator version that wrote it")


def _str(path: str | os.PathLike[str], data: Mapping[str, Any], key: str,
         default: str | None = None) -> str:
    got = data.get(key, default)
    if not isinstance(got, str):
        raise RecordError(path, f"{key} is {got!r}, not a string")
    return got


def load_json(path: str | os.PathLike[str], what: str = "the file") -> Any:
    """JSON from ``path``; RecordError (not JSONDecodeError) when it is not JSON."""
    try:
        return read_json(path)
    except ValueError as exc:
        raise RecordError(path, f"{what} is not JSON ({exc})") from None


@dataclass(frozen=True)
class TrialRecord:
    """A trial's record (``trials/<id>/trial.json``): the fields every trial has, typed, and
    the whole record as written (``data``: its recipe's, pairing's and device's own facts)."""

    path: Path
    trial_id: str
    status: Status
    kind: TrialKind
    data: TrialRecordDict = field(repr=False)

    @classmethod
    def parse(cls, path: str | os.PathLike[str], data: Any) -> TrialRecord:
        d = _object(path, data, "the trial record")
        _version(path, d)
        return cls(Path(path), _str(path, d, "trial_id"),
                   Status.parse(d.get("status"), path, "status"),
                   TrialKind.parse(d.get("kind", TrialKind.TIMED), path, "kind"),
                   cast(TrialRecordDict, d))

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> TrialRecord:
        return cls.parse(path, load_json(path, "the trial record"))

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    @property
    def ok_timed(self) -> bool:
        """An ok timed trial: one that enters timing statistics."""
        return self.status is Status.OK and self.kind is TrialKind.TIMED


@dataclass(frozen=True)
class PlanDoc:
    """``plan.json``: the sweep, the arms and buckets, every trial planned (extended by
    adaptive rounds), how the rounds are paired, the looks' error-rate spending."""

    path: Path
    sweep: Mapping[str, Any]
    arms: tuple[Mapping[str, Any], ...]
    buckets: tuple[Mapping[str, Any], ...]
    trials: tuple[Mapping[str, Any], ...]
    pairing: Pairing
    data: Mapping[str, Any] = field(repr=False)

    @classmethod
    def parse(cls, path: str | os.PathLike[str], data: Any) -> PlanDoc:
        d = _object(path, data, "the plan")
        _version(path, d)
        lists = {}
        for key in ("arms", "buckets", "trials"):
            got = d.get(key, [])
            if not isinstance(got, list) or not all(isinstance(x, dict) for x in got):
                raise RecordError(path, f"{key} is not a list of objects")
            lists[key] = tuple(got)
        for t in lists["trials"]:
            _str(path, t, "trial_id")
        mode = (d.get("pairing") or {}).get("mode", Pairing.process)
        return cls(Path(path), d.get("sweep") or {}, lists["arms"], lists["buckets"],
                   lists["trials"], Pairing.parse(mode, path, "pairing.mode"), d)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> PlanDoc:
        return cls.parse(path, load_json(path, "the plan"))

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def arm(self, arm_id: str) -> Mapping[str, Any]:
        return next(a for a in self.arms if a.get("arm_id") == arm_id)

    def trial_ids(self) -> list[str]:
        return [str(t["trial_id"]) for t in self.trials]


@dataclass(frozen=True)
class Decision:
    """One variant's verdict (a line of ``decisions.jsonl``), with its evidence."""

    arm_id: str
    label: str
    verdict: VerdictKind
    headline: str
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    final: bool
    decided_at: float
    data: Mapping[str, Any] = field(repr=False)

    @classmethod
    def parse(cls, path: str | os.PathLike[str], data: Any, line: int = 0) -> Decision:
        where = f"{path} line {line}" if line else path
        d = _object(where, data, "the decision")
        _version(where, d)
        for key in ("reasons", "warnings"):
            if not isinstance(d.get(key, []), list):
                raise RecordError(where, f"{key} is not a list")
        return cls(_str(where, d, "arm_id"), _str(where, d, "label", ""),
                   VerdictKind.parse(d.get("verdict"), where, "verdict"),
                   _str(where, d, "headline", ""), tuple(map(str, d.get("reasons", []))),
                   tuple(map(str, d.get("warnings", []))), bool(d.get("final", True)),
                   float(d.get("decided_at", 0.0)), d)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def read_decisions(path: str | os.PathLike[str]) -> list[Decision]:
    """Every line of a ``decisions.jsonl``, parsed; RecordError naming the line."""
    out = []
    text = Path(path).read_text(encoding="utf-8")
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise RecordError(f"{path} line {no}", f"not JSON ({exc})") from None
        out.append(Decision.parse(path, data, no))
    return out


def write_decisions(path: str | os.PathLike[str], decisions: Iterable[Mapping[str, Any]]) -> None:
    """``decisions.jsonl``: one JSON object a line, each with the schema version."""
    lines = [json.dumps({"schema_version": SCHEMA_VERSION, **d}) for d in decisions]
    atomic_write_text(path, "\n".join(lines) + "\n")


# --------------------------------------------------------------------------- the directory


@dataclass(frozen=True)
class RunDirectory:
    """One campaign's run directory: its paths, and its records read through the types
    above (a missing file is None or empty where a campaign may not have written it yet)."""

    path: Path

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    @property
    def trials_dir(self) -> Path:
        return self.path / TRIALS

    def trial_dir(self, trial_id: str) -> Path:
        return self.path / TRIALS / trial_id

    def trial_paths(self) -> list[Path]:
        """Every ``trials/*/trial.json`` on disk, in trial-id order."""
        return sorted(self.trials_dir.glob(f"*/{TRIAL}"))

    def is_campaign(self) -> bool:
        """A campaign that finished at least one look: a plan and a decision log."""
        return (self.path / PLAN).is_file() and (self.path / DECISIONS).is_file()

    def plan(self) -> PlanDoc:
        return PlanDoc.read(self.path / PLAN)

    def config(self) -> dict[str, Any]:
        """config.json ({} where it is absent); RecordError on another schema version."""
        path = self.path / CONFIG
        if not path.is_file():
            return {}
        data = _object(path, load_json(path, "the configuration"), "the configuration")
        if "schema_version" in data:
            _version(path, data)
        return data

    def decisions(self) -> list[Decision]:
        path = self.path / DECISIONS
        return read_decisions(path) if path.is_file() else []

    def optional_json(self, name: str) -> Any:
        """A JSON file of the directory, or None where it is absent or unreadable."""
        try:
            return read_json(self.path / name)
        except (OSError, ValueError):
            return None

    def trial(self, trial_id: str) -> TrialRecord | None:
        """A trial's record; None where it has none (yet)."""
        path = self.trial_dir(trial_id) / TRIAL
        return TrialRecord.read(path) if path.is_file() else None

    def trials(self) -> Iterator[TrialRecord]:
        """Every trial record on disk (RecordError at the first that cannot be read)."""
        for path in self.trial_paths():
            yield TrialRecord.read(path)

    def final_trial_ids(self) -> set[str]:
        """The trials whose record on disk is final (kept on resume); a truncated, foreign or
        unreadable record counts as absent."""
        out = set()
        for path in self.trial_paths():
            try:
                rec = TrialRecord.read(path)
            except (OSError, RecordError):
                continue
            if rec.trial_id == path.parent.name and rec.status.final:
                out.add(rec.trial_id)
        return out
