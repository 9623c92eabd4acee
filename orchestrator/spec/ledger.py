"""The baseline ledger of a workload: versions as plain JSON files a user can commit.

``<baselines_dir>/<workload>/vN.json`` holds one version: the full resolved workload as dotted
overrides, its parent, the change it makes over the parent, the campaigns that justify it
(run dir, variant, verdict, speedup with interval), its measured throughput per bucket and for
the mixture, and the environment fingerprint it was measured in. ``experimental/`` keeps the
changes that did not repeat, ``verify/`` the end-to-end measurements of a version against v0.

A version file is written once, atomically and exclusively (a temporary file hard-linked to its
name, which fails if the name exists): a reader sees a whole version or none. This module is
the spec layer's part: reading versions, applying one to a configuration, the lineage a
campaign records; running campaigns for promote and verify is :mod:`orchestrator.campaign.promote`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

from orchestrator.spec.config import Config
from orchestrator.core.convert import to_dict
from orchestrator.core.errors import ConfigError
from orchestrator.core.trial_record import Fingerprint
from orchestrator.core.results import atomic_write_json, read_json
from orchestrator.core.sanitize import Sanitizer
from orchestrator.spec.sweep import REVISION, Arm, apply_overrides, arm_key
from recipes.registry import workload_from_dict

LEDGER_SCHEMA = 1
VERSION_RE = re.compile(r"^v(\d+)$")
MIXTURE = "mixture"
LINEAGE_FILE = "lineage.json"  # in a run directory: the version it ran against, its lineage


class _StepSpeedupBase(TypedDict):
    scope: str  # the objective: the mixture, else the single bucket
    speedup: float
    low: float
    high: float
    confidence: float


class StepSpeedup(_StepSpeedupBase, total=False):
    """A measured speedup with its interval at the objective's scope: vN.json's
    ``step_speedup`` (over the parent), a verify record's ``speedup`` (against v0)."""

    against: str | None
    run_dir: str


class _VersionChangeBase(TypedDict):
    label: str
    overrides: dict[str, Any]  # workload.* paths -> value (free-form, as the sweep sets them)


class VersionChange(_VersionChangeBase, total=False):
    """vN.json's ``change`` (what it changes over its parent), an experimental record's."""

    sweep: str | None
    variable: str | None


class Justification(TypedDict):
    """One campaign of vN.json's ``justification`` (the discovery, the confirmation)."""

    role: str
    run_dir: str
    sweep: str | None
    variant: str
    verdict: str
    headline: str
    speedups: dict[str, dict[str, float] | None] | None  # decisions.jsonl's, per scope
    against: str | None
    correctness_gate: str
    decided_at: float


class BucketThroughput(TypedDict):
    """One bucket of a :class:`Throughput`."""

    tokens_per_s: float
    step_time_median_s: float


class MixtureThroughput(TypedDict):
    """The mixture of a :class:`Throughput`: total work / total time at the buckets' weights."""

    tokens_per_s: float


class Throughput(TypedDict):
    """One arm's measured throughput (vN.json's ``throughput``, ``parent_throughput``; a
    verify record's ``throughput``, ``v0_throughput``)."""

    buckets: dict[str, BucketThroughput]
    mixture: MixtureThroughput | None
    run_dir: str


class _VersionDocBase(TypedDict):
    schema_version: int
    workload: str
    version: str
    parent: str | None
    created_at: str
    status: str  # declared (v0) | promoted
    change: VersionChange | None
    overrides: dict[str, Any]  # the whole workload as dotted paths -> value (free-form)
    justification: list[Justification]
    step_speedup: StepSpeedup | None
    throughput: Throughput | None
    fingerprint: Fingerprint | None


class VersionDoc(_VersionDocBase, total=False):
    """``vN.json``: one version of the ledger."""

    parent_throughput: Throughput
    digest: str
    note: str


class VerifyStep(TypedDict):
    """One entry of a verify record's ``steps``: a version and its step over its parent."""

    version: str
    step_speedup: StepSpeedup | None


class LedgerRecord(TypedDict, total=False):
    """A record under ``experimental/`` (a change that did not repeat) or ``verify/`` (an end
    to end measurement of a version against v0): the keys of either kind; ``schema_version``
    as written, ``file`` as :meth:`Ledger.records` reads it back."""

    schema_version: int
    file: str
    workload: str
    at: str
    status: str  # experimental
    on_top_of: str
    change: VersionChange
    why: str
    justification: list[Justification]
    version: str  # verify
    against: str
    run_dir: str
    verdict: str
    headline: str
    speedup: StepSpeedup | None
    speedups: dict[str, dict[str, float] | None] | None
    throughput: Throughput
    v0_throughput: Throughput
    fingerprint: Fingerprint | None
    steps: list[VerifyStep]


class LineageStep(TypedDict):
    """One version of lineage.json's ``versions``."""

    version: str
    parent: str | None
    digest: str
    change: VersionChange | None
    step_speedup: StepSpeedup | None
    cumulative: StepSpeedup | None  # verify's measurement of it against v0
    created_at: str | None
    evidence: list[str | None]  # the justifying campaigns' run directories


class LineageCumulative(TypedDict):
    """lineage.json's ``cumulative``: the newest verify measurement of the version."""

    speedup: StepSpeedup | None
    run_dir: str | None
    at: str | None
    verdict: str | None


class LineageDoc(TypedDict):
    """``lineage.json`` in a run directory: the version it ran against and its lineage."""

    schema_version: int
    workload: str
    version: str
    digest: str
    versions: list[LineageStep]
    cumulative: LineageCumulative | None


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def flatten(tree: Any, prefix: str = "workload") -> dict[str, Any]:
    """A workload as dotted overrides (``workload.model.attention.block_q``: value); lists
    (buckets) are leaves."""
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(flatten(v, f"{prefix}.{k}"))
        return out
    return {prefix: tree}


def digest(data: VersionDoc) -> str:
    """A short content hash of a version (without its own ``digest``)."""
    body = {k: v for k, v in data.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


def display_path(path: str | os.PathLike[str]) -> str:
    """A run directory as a ledger records it: relative to the current directory when it lies
    below it (``outputs/...``), else with home paths and user names replaced."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return Sanitizer.from_config(None).text(str(p))


@dataclass(frozen=True)
class Version:
    data: VersionDoc
    path: Path

    @property
    def id(self) -> str:
        return str(self.data["version"])

    @property
    def number(self) -> int:
        return int(self.id[1:])

    @property
    def parent(self) -> str | None:
        return self.data.get("parent")

    @property
    def overrides(self) -> dict[str, Any]:
        return dict(self.data.get("overrides") or {})

    @property
    def change(self) -> VersionChange | None:
        return self.data.get("change")

    @property
    def fingerprint(self) -> Fingerprint | None:
        return self.data.get("fingerprint")

    @property
    def digest(self) -> str:
        return str(self.data.get("digest") or digest(self.data))

    @property
    def step(self) -> StepSpeedup | None:
        """The measured speedup of this version over its parent (its objective scope)."""
        return self.data.get("step_speedup")

    def label(self) -> str:
        ch = self.change
        return f"{self.id} (+{ch['label']})" if ch else self.id


class Ledger:
    """The versions of one workload under ``root/<workload>/``."""

    def __init__(self, root: str | os.PathLike[str], workload: str) -> None:
        self.root = Path(root)
        self.workload = workload
        self.dir = self.root / workload

    def versions(self) -> list[Version]:
        out = []
        if self.dir.is_dir():
            for p in self.dir.glob("v*.json"):
                if VERSION_RE.match(p.stem):
                    try:
                        data = read_json(p)
                    except (OSError, ValueError) as exc:
                        raise ConfigError("baseline", f"{p.name} in the ledger of "
                                          f"{self.workload} is unreadable ({exc}); restore it "
                                          "from version control") from None
                    out.append(Version(data, p))
        return sorted(out, key=lambda v: v.number)

    def latest(self) -> Version | None:
        vs = self.versions()
        return vs[-1] if vs else None

    def get(self, ref: str, key: str = "baseline") -> Version:
        """``latest`` or ``vN``; ConfigError naming ``key`` and the fix otherwise."""
        vs = self.versions()
        if not vs:
            raise ConfigError(key, f"no baseline ledger for workload {self.workload!r} under "
                              f"{self.root}/; create v0 with: python -m orchestrator.baseline "
                              f"init workload={self.workload}")
        if ref == "latest":
            return vs[-1]
        if not VERSION_RE.match(str(ref)):
            raise ConfigError(key, f"{ref!r} is not a version; use latest or one of: "
                              f"{', '.join(v.id for v in vs)}")
        for v in vs:
            if v.id == ref:
                return v
        raise ConfigError(key, f"{ref!r} is not in the ledger of {self.workload!r}; choose "
                          f"latest or one of: {', '.join(v.id for v in vs)}")

    def next_id(self) -> str:
        last = self.latest()
        return "v0" if last is None else f"v{last.number + 1}"

    def chain(self, ref: str) -> list[Version]:
        """v0 ... ``ref`` along the parents."""
        by_id = {v.id: v for v in self.versions()}
        out: list[Version] = []
        cur: str | None = self.get(ref).id
        while cur is not None:
            v = by_id.get(cur)
            if v is None or v in out:
                raise ConfigError("baseline", f"the ledger of {self.workload!r} is broken: "
                                  f"{cur} is named as a parent but missing; restore it")
            out.append(v)
            cur = v.parent
        return out[::-1]

    def write_version(self, data: VersionDoc) -> Version:
        """Write ``vN.json`` once: whole or not at all, never over an existing version."""
        data = {**data, "digest": digest(data)}
        path = self.dir / f"{data['version']}.json"
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(data, indent=2, default=str) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)  # exclusive: fails when the version exists
            except FileExistsError:
                raise ConfigError("baseline", f"{path.name} already exists in the ledger of "
                                  f"{self.workload!r} (another promote won the race); re-run "
                                  "against the new latest version") from None
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return Version(data, path)

    def write_record(self, kind: str, name: str, data: LedgerRecord) -> Path:
        """``experimental/<name>.json`` or ``verify/<name>.json``, atomically."""
        path = self.dir / kind / f"{name}.json"
        atomic_write_json(path, {"schema_version": LEDGER_SCHEMA, **data})
        return path

    def records(self, kind: str) -> list[LedgerRecord]:
        d = self.dir / kind
        out: list[LedgerRecord] = []
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                out.append({**read_json(p), "file": f"{kind}/{p.name}"})
            except (OSError, ValueError):
                continue
        return sorted(out, key=lambda r: str(r.get("at", "")))

    def verification(self, vid: str) -> LedgerRecord | None:
        """The newest end-to-end measurement of ``vid`` against v0 (``verify``)."""
        got = [r for r in self.records("verify") if r.get("version") == vid]
        return got[-1] if got else None


# --------------------------------------------------------------------------- configuration


def apply_baseline(cfg: Config) -> Version | None:
    """With ``baseline=latest|vN``: the version's overrides applied to ``cfg.workload`` (in
    place) and ``cfg.baseline`` set to the version's id (what config.json records)."""
    if cfg.baseline in (None, ""):
        return None
    ledger = Ledger(cfg.baselines_dir, cfg.workload.name)
    version = ledger.get(str(cfg.baseline))
    workload = to_dict(cfg.workload)
    root = {"workload": workload}
    if REVISION in version.overrides:  # a promoted code revision: the commit it runs
        cfg.source.revision = version.overrides[REVISION]
    for path in version.overrides:
        if not path.startswith("workload."):
            continue
        node: Any = root
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or parts[-1] not in node:
            raise ConfigError("baseline", f"{version.id} sets {path}, which workload="
                              f"{cfg.workload.name} does not have (the schema changed?); "
                              "re-create the ledger with init, or use the matching code")
    try:
        cfg.workload = workload_from_dict(apply_overrides(workload, version.overrides))
    except ConfigError as exc:
        raise ConfigError("baseline", f"{version.id} sets {exc.key}: {exc.message}") from None
    cfg.baseline = version.id
    return version


def check_baseline_arm(cfg: Config, arms: Sequence[Arm]) -> None:
    """A sweep against a version starts from it: the baseline arm may not change a value of
    the version (its ``sweep.baseline`` or ``sweep.fixed`` would make it another config)."""
    if not cfg.baseline or not arms:
        return
    assert cfg.sweep is not None
    current = flatten(to_dict(cfg.workload))
    base = arms[0]
    for path, value in base.overrides.items():
        if path in current and current[path] != value:
            key = (f"sweep.fixed.{path}" if path in cfg.sweep.fixed else arm_key(base))
            raise ConfigError(key, f"sets {path}={value!r}, but baseline {cfg.baseline} has "
                              f"{current[path]!r}; a sweep against a version starts from it: "
                              f"set {key}={json.dumps(current[path])} (the version's value) "
                              "or drop baseline=")


# --------------------------------------------------------------------------- lineage


def objective(speedups: Mapping[str, Mapping[str, float] | None] | None,
              ) -> tuple[str, Mapping[str, float]] | None:
    """(scope, estimate) of the objective: the mixture, else the single bucket."""
    sp = {k: v for k, v in (speedups or {}).items() if v}
    if MIXTURE in sp:
        return MIXTURE, sp[MIXTURE]
    if len(sp) == 1:
        return next(iter(sp.items()))
    return None


def fmt_speedup(e: StepSpeedup | Mapping[str, float] | None) -> str:
    if not e:
        return "—"
    return f"{e['speedup']:.3f}x [{e['low']:.3f}, {e['high']:.3f}]"


def lineage(ledger: Ledger, ref: str) -> LineageDoc:
    """What a campaign against ``ref`` records (``lineage.json``): v0 ... ref, each step's
    measured speedup over its parent, and the measured end-to-end speedup against v0 when
    ``verify`` has measured it (never a product of the steps)."""
    chain = ledger.chain(ref)
    steps: list[LineageStep] = []
    for v in chain:
        ver = ledger.verification(v.id) if v.parent else None
        steps.append({"version": v.id, "parent": v.parent, "digest": v.digest,
                      "change": v.change, "step_speedup": v.step,
                      "cumulative": None if ver is None else ver.get("speedup"),
                      "created_at": v.data.get("created_at"),
                      "evidence": [j.get("run_dir") for j in v.data.get("justification") or []]})
    last = chain[-1]
    ver = ledger.verification(last.id)
    cumulative: LineageCumulative | None = None if ver is None else {
        "speedup": ver.get("speedup"), "run_dir": ver.get("run_dir"), "at": ver.get("at"),
        "verdict": ver.get("verdict")}
    return {"schema_version": LEDGER_SCHEMA, "workload": ledger.workload, "version": last.id,
            "digest": last.digest, "versions": steps, "cumulative": cumulative}


def lineage_path(doc: LineageDoc) -> str:
    """``v0 -> v1 (+128x64) -> v2 (+compile)``."""
    return " -> ".join(s["version"] + (f" (+{cast(VersionChange, s['change'])['label']})"
                                       if s.get("change") else "")
                       for s in doc.get("versions", []))


def lineage_lines(doc: LineageDoc) -> list[str]:
    """Markdown for decisions.md and ``show``: the path, then one row per version."""
    lines = [(f"Ran against `{doc.get('version')}` of the `{doc.get('workload')}` ledger "
              f"(digest `{doc.get('digest')}`): {lineage_path(doc)}"), "",
             ("| version | change | step speedup over parent [CI] | measured in "
              "| cumulative against v0 [CI] (verify) |"),
             "|---|---|---|---|---|"]
    for s in doc.get("versions", []):
        ch = s.get("change")
        what = "—" if not ch else f"+{ch['label']}: " + ", ".join(
            f"{k}={json.dumps(v)}" for k, v in (ch.get("overrides") or {}).items())
        step = s.get("step_speedup")
        where = cast(StepSpeedup, step or {}).get("run_dir") or "—"
        scope = f" ({step['scope']})" if step and step.get("scope") else ""
        lines.append(f"| {s['version']} | {what} | {fmt_speedup(step)}{scope} | {where} "
                     f"| {fmt_speedup(s.get('cumulative'))} |")
    cum = doc.get("cumulative")
    lines.append("")
    if cum and cum.get("speedup"):
        lines.append(f"Cumulative, measured end to end ({doc.get('version')} against v0): "
                     f"**{fmt_speedup(cum['speedup'])}**"
                     f"{' (' + cum['speedup']['scope'] + ')' if cum['speedup'].get('scope') else ''}"  # type: ignore[index,union-attr]  # cum['speedup'] is set: checked above
                     f", `verify` at {cum.get('at')} in {cum.get('run_dir')}.")
    elif len(doc.get("versions", [])) > 1:
        lines.append(f"Cumulative against v0: not measured yet (steps are not multiplied); run "
                     f"`python -m orchestrator.baseline verify workload={doc.get('workload')}`.")
    return lines
