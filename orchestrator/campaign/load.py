"""The machine's load: sampled before a campaign (:func:`check_quiet`, kept in
machine_load.json beside every resume's sample), found persistent when it was there before,
during and after a pass's trials (:func:`persistent_load`: re-runs cannot help then), read off
a trial's record (:func:`interfered`), and said in one line for the verdict rule
(:func:`detected_load`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, cast

from orchestrator.core import stats
from orchestrator.core.errors import ConfigError
from orchestrator.core.results import Status, atomic_write_json, read_json
from orchestrator.core.trial_record import CpuWindowFigures, TrialRecordDict
from orchestrator.launch.base import INFRA_STATUS
from orchestrator.platform.interference import core_speed_problem, core_speeds, machine_load
from orchestrator.spec.config import Config
from orchestrator.spec.jobs import TrialSpec

# the campaign's one logger, as campaign/progress's: these lines are the run's (campaign.log,
# and the tests that listen to "orchestrator.campaign.run")
log = logging.getLogger("orchestrator.campaign.run")


def check_quiet(cfg: Config) -> dict[str, Any]:
    """Sample the machine's load before any trial: other processes busy on the CPU or the GPUs
    are a warning, or with protocol.require_quiet a refusal (exit 2). Returns the record the
    campaign keeps in machine_load.json for decisions.md (written only once nothing refuses)."""
    ml = machine_load(0.5)
    problems = ml.problems(cfg.protocol.interference_cores)
    doc = {**ml.__dict__, "problems": problems}
    if cfg.launcher.cpu_affinity is None:  # where the OS may put a trial: are they alike?
        speeds = core_speeds()
        doc["core_probe_s"] = {str(c): t for c, t in (speeds or {}).items()} or None
        if (warn := core_speed_problem(speeds)):
            doc["core_speed"] = warn
            log.warning("%s", warn)
    if not problems:
        return doc
    what = "; ".join(problems)
    if cfg.protocol.require_quiet:
        raise ConfigError("protocol.require_quiet", f"the machine is busy ({what}): wait until "
                          "it is quiet, or run with protocol.require_quiet=false (trials "
                          "measured under interference are then re-run)")
    log.warning("the machine is busy before the campaign (%s): timings will be noisier; "
                "trials measured under interference are re-run", what)
    return doc


MAX_LATER_SAMPLES = 100  # resumes whose load machine_load.json keeps one by one


def record_machine_load(run_dir: Path, sample: dict[str, Any]) -> None:
    """machine_load.json: the load before the campaign's first invocation, at its top level;
    a resume's (or a rerun into a finished directory: nothing may be left to run) goes under
    ``later``, beside it and never over it, so the load the first trials met is kept."""
    sample = {**sample, "at": time.time()}
    path = run_dir / "machine_load.json"
    doc = read_optional(path)
    if doc is None:
        atomic_write_json(path, sample)
        return
    later = [x for x in doc.get("later") or [] if isinstance(x, dict)]
    doc["later"] = (later + [sample])[-MAX_LATER_SAMPLES:]
    atomic_write_json(path, doc)


def _latest_load(doc: dict[str, Any]) -> dict[str, Any]:
    """The sample taken before this invocation (a resume's, else the first)."""
    later = [x for x in doc.get("later") or [] if isinstance(x, dict)]
    return later[-1] if later else doc


def persistent_load(cfg: Config, run_dir: Path, retry: list[TrialSpec],
                    during: list[float | None]) -> bool:
    """Whether the load that interfered with trials is persistent: other processes were busy
    before the campaign (machine_load.json), during this pass's trials (most of them over
    protocol.interference_cores) and still are now (sampled again). Re-runs then meet the
    same load and cannot help: said once (a warning, and machine_load.json's ``persistent``
    for decisions.md), and from then on trials are not re-run for interference."""
    doc = read_optional(run_dir / "machine_load.json")
    if doc is None or not any(not last_infra(s) for s in retry):
        return False
    if doc.get("persistent"):
        return True
    cores = cfg.protocol.interference_cores
    busy = [c for c in during if c is not None]
    if not _latest_load(doc).get("problems") or not busy or sum(c > cores for c in busy) * 2 < len(busy):
        return False
    now = machine_load(0.5)
    if now.others_cores is None or now.others_cores <= cores:
        return False  # gone: a re-run may find the machine quiet
    doc["persistent"] = {"during_median_cores": stats.median(busy), "trials": len(busy),
                         "after_cores": now.others_cores, "at": time.time()}
    atomic_write_json(run_dir / "machine_load.json", doc)
    log.warning("the load is persistent (before the campaign: %s; during %d trial(s): median "
                "%.2f cores; now %.2f cores): trials measured under it are not re-run, since a "
                "re-run meets the same load; they are pooled (quiet the machine, or "
                "protocol.require_quiet=true to refuse to start on a busy one)",
                "; ".join(doc.get("problems") or []), len(busy), stats.median(busy),
                now.others_cores)
    return True


def detected_load(cfg: Config, run_dir: Path, trials: Any) -> str:
    """The load this campaign's timings met, in one line ("" when none was detected): an ok
    trial still measured under more than protocol.interference_cores after its re-runs, or a
    load found persistent; where no trial measures its own interference (a command's trials),
    a busy sample before an invocation (machine_load.json) that is still busy now, sampled
    again. A busy sample alone does not count: where the trials measured their own load and
    found it gone, or where it was gone again by the decision (a moment's burst at the start
    says nothing of the trials)."""
    records = trials.to_dict("records") if hasattr(trials, "to_dict") else list(trials)
    cores = cfg.protocol.interference_cores
    said = []
    under = cast("list[float]",  # interfered(): each a number
                 [interference_of(r)["others_cores"] for r in records if interfered(r, cores)])
    if under:
        said.append(f"{len(under)} trial(s) measured while other processes took more than "
                    f"{cores:g} cores (up to {max(under):.2f})")
    doc = read_optional(run_dir / "machine_load.json") or {}
    measured = any(r.get("status") == Status.OK and
                   interference_of(r).get("others_cores") is not None for r in records)
    before: list[str] = []
    if doc.get("persistent") or not measured:
        for m in [doc, *[x for x in doc.get("later") or [] if isinstance(x, dict)]]:
            before += [f"before the campaign: {x}" for x in m.get("problems") or []
                       if f"before the campaign: {x}" not in before]
    if before and not doc.get("persistent"):  # still there at the decision?
        now = machine_load(0.5)
        if now.others_cores is not None and now.others_cores <= cores:
            before = []
        elif now.others_cores is not None:
            before.append(f"still {now.others_cores:.2f} cores at the decision")
    return "; ".join(said + before)


def interference_of(record: TrialRecordDict) -> CpuWindowFigures | dict[str, float]:
    """The trial's interference record ({} when absent: a failure, or NaN from a DataFrame)."""
    got = record.get("interference")
    return got if isinstance(got, dict) else {}


def interfered(record: TrialRecordDict, cores: float) -> bool:
    """A timed trial during whose measured steps other processes took more than ``cores``."""
    got = interference_of(record).get("others_cores")
    return record.get("status") == Status.OK and got is not None and got > cores


def last_infra(spec: TrialSpec) -> bool:
    """The trial's last record is a harness failure (re-run whatever the load)."""
    rec = read_optional(Path(spec.trial_dir) / "trial.json") or {}
    return rec.get("status") == INFRA_STATUS


def read_optional(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
