"""The A/A control without paying for it in every campaign: a calibration record per machine,
workload and pairing, reused while it is fresh.

A campaign that runs the A/A control (``protocol.aa_arm=true``) ends by writing what it found to
the user's calibration store (``$ORCH_CALIBRATION_DIR``, else ``~/.cache/orchestrator/calibration``,
outside every run directory): when, the key it holds for, whether the A/A interval covered 1 in
every scope and how far apart two identical arms were, and (one arm per process) the
baseline's variance components and costs per bucket, from which the next campaign sizes its
first rounds' trials (campaign.lengths.first_round_plan; used while fresh, A/A arm or not). The key is a hash (no host or user name
in it) of the machine (this host's name, CPU model and count; on Slurm the partition and the
device the probe job found), the device kind, the launcher, the pairing the planner chose, the
compile-cache mode the trials run under (``protocol.compile_cache`` resolved: a cold cache's
start-up cost and spread are not a warm one's) and the baseline arm's resolved workload.

A later campaign with the same key whose record is younger than
``protocol.calibration_max_age_h`` and calibrated runs without the A/A arm (a third fewer
processes under one arm per process); plan.json and decisions.md name the record it relied on and
its age. A stale or uncalibrated record, none, or ``calibration_max_age_h=0`` runs the A/A arm
as before. A resume follows its plan: the control arm runs where it was planned.

The A/A control sets no threshold (docs/protocol.md): it only checks, per campaign, that the
intervals are calibrated on this machine. Reusing a fresh check from the same machine and
workload leaves every verdict's interval and rule as they were; what is given up is the check
catching a machine that changed within the record's age without changing its fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from orchestrator.launch.device_probe import DeviceResolved

from orchestrator.core.results import atomic_write_json
from orchestrator.core.sanitize import user_store
from orchestrator.platform.compile_stats import resolve_mode
from orchestrator.spec.config import Config
from orchestrator.spec.sweep import ResolvedArm, varies_compilation

log = logging.getLogger("orchestrator.campaign.run")

STORE_VAR = "ORCH_CALIBRATION_DIR"
VERSION = 1


def store_dir() -> Path:
    return user_store("calibration", STORE_VAR)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def key_of(cfg: Config, arms: list[ResolvedArm], device: DeviceResolved | None) -> str:
    """The hash a record is filed under (see the module)."""
    dev: DeviceResolved = device or cast(DeviceResolved, {})
    if cfg.launcher.name == "slurm":
        where: dict[str, Any] = {"slurm": getattr(getattr(cfg.launcher, "slurm", None),
                                                  "partition", None), "device": dev.get("name")}
    else:
        where = {"host": platform.node(), "cpu": _cpu_model(), "cores": os.cpu_count(),
                 "device": dev.get("name")}
    fields = {"v": VERSION, "where": where, "kind": dev.get("kind") or cfg.device,
              "launcher": cfg.launcher.name, "pairing": str(cfg.protocol.pairing),
              "affinity": cfg.launcher.cpu_affinity,
              "cache": resolve_mode(str(cfg.protocol.compile_cache), varies_compilation(arms)),
              "workload": arms[0].workload if arms else None}
    blob = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Calibration:
    record_id: str  # the key's hash (a field named "key" would read as a secret to the sanitizer)
    at: float  # when the campaign that checked it ended (Unix time)
    calibrated: bool  # its A/A interval covered 1 in every scope
    floor: float | None  # two identical arms this far apart (relative)
    interval: list[float] | None  # the A/A interval (the mixture's, else the first bucket's)
    rounds: int | None
    workload: str
    pairing: str
    campaign: str  # the run directory's name (not its path)
    # one arm per process: the baseline's variance components and costs per bucket (within and
    # between processes, step time, fixed cost: campaign.lengths), which size the first rounds
    components: dict[str, dict[str, float]] | None = None
    # what its processes cost (campaign.cost.recorded_costs): the next campaign's prediction
    # before any process of its own has run
    costs: dict[str, float] | None = None

    def age_h(self, now: float | None = None) -> float:
        return ((now if now is not None else time.time()) - self.at) / 3600.0

    def line(self, now: float | None = None) -> str:
        iv = (f"A/A interval [{self.interval[0]:.3f}, {self.interval[1]:.3f}] covered 1"
              if self.interval else "A/A covered 1")
        floor = f", two identical arms {self.floor:.1%} apart" if self.floor is not None else ""
        return (f"the calibration of campaign {self.campaign} ({self.age_h(now):.1f} h old; same "
                f"machine, workload {self.workload} and pairing {self.pairing}: record "
                f"{self.record_id}): its {iv}{floor}")


def _path(key: str) -> Path:
    return store_dir() / f"{key}.json"


def find(key: str) -> Calibration | None:
    try:
        doc = json.loads(_path(key).read_text(encoding="utf-8"))
        if doc.get("version") != VERSION:
            return None
        doc.pop("version")
        return Calibration(**doc)
    except (OSError, ValueError, TypeError):
        return None


def reusable(cfg: Config, key: str, now: float | None = None) -> tuple[Calibration | None, str]:
    """(the record to rely on instead of an A/A arm, or None; why not, for the log)."""
    max_age = float(cfg.protocol.calibration_max_age_h)
    if not cfg.protocol.aa_arm:
        return None, "protocol.aa_arm=false"
    if max_age <= 0:
        return None, "protocol.calibration_max_age_h=0: the A/A arm runs in every campaign"
    rec = find(key)
    if rec is None:
        return None, "no calibration record for this machine, workload and pairing yet"
    if rec.age_h(now) > max_age:
        return None, (f"the calibration record is {rec.age_h(now):.0f} h old "
                      f"(protocol.calibration_max_age_h={max_age:g})")
    if not rec.calibrated:
        return None, "the last A/A check found the intervals not calibrated here"
    return rec, ""


def _fresh(cfg: Config, key: str, now: float | None) -> Calibration | None:
    """The record of ``key`` while it is younger than ``calibration_max_age_h`` (0: never)."""
    max_age = float(cfg.protocol.calibration_max_age_h)
    rec = find(key) if max_age > 0 else None
    return rec if rec is not None and rec.age_h(now) <= max_age else None


def components(cfg: Config, key: str, now: float | None = None
               ) -> tuple[dict[str, dict[str, float]] | None, str]:
    """(the variance components a fresh record of ``key`` kept, the record's line), or (None,
    ""): none, stale, or ``calibration_max_age_h=0``. Used whether or not the A/A arm runs: the
    components describe the machine's noise, not the A/A check."""
    rec = _fresh(cfg, key, now)
    if rec is None or not rec.components:
        return None, ""
    return rec.components, rec.line(now)


def costs(cfg: Config, key: str, now: float | None = None
          ) -> tuple[dict[str, float] | None, str]:
    """(what a fresh record of ``key`` found its processes cost, the record's short name), or
    (None, ""): none, stale, or ``calibration_max_age_h=0`` (as :func:`components`)."""
    rec = _fresh(cfg, key, now)
    if rec is None or not rec.costs:
        return None, ""
    return rec.costs, (f"campaign {rec.campaign} ({rec.age_h(now):.1f} h old; calibration "
                       f"record {rec.record_id})")


def record(cfg: Config, run_dir: Path, key: str, analysis: Any, calibrated: bool,
           comps: dict[str, dict[str, float]] | None = None,
           spent: dict[str, float] | None = None) -> None:
    """After a campaign that ran the A/A arm: its check, filed under ``key`` (``comps``: the
    variance components per bucket, where the planner could fit them; ``spent``: what its
    processes cost)."""
    if analysis.control is None or not analysis.noise:
        return
    c = analysis.noise.get("mixture") or next(iter(analysis.noise.values()))
    if c is None or c.estimate is None:
        return
    rec = Calibration(key, time.time(), calibrated, c.noise_floor,
                      [c.estimate.low, c.estimate.high], c.paired_rounds, cfg.workload.name,
                      str(cfg.protocol.pairing), run_dir.name, comps or None, spent or None)
    try:
        store_dir().mkdir(parents=True, exist_ok=True)
        atomic_write_json(_path(key), {"version": VERSION, **asdict(rec)})
    except OSError as exc:  # a read-only home: the next campaign runs its A/A arm again
        log.warning("calibration record not written (%s): %s", store_dir(), exc)
