"""Where ``device=auto`` is decided: on the machine the trials run on.

``device=auto`` means "musa if torch_musa sees a device, else cuda, else cpu", and what it
resolves to decides more than the trials' device: the planner's pairing (a plain command's
arms take turns on the CPU, but not on a GPU, where each would hold its memory at once:
:func:`orchestrator.spec.sweep.choose_pairing`) and the attention pre-flight
(:func:`orchestrator.campaign.validate.check_attention_arms`). With ``launcher=slurm`` the
trials run on a compute node, so asking the submitting host (a login node, often without a
GPU) would plan for the wrong machine. Before anything is planned, the campaign therefore
submits one small **probe job** through submitit with the trials' own Slurm settings
(:func:`orchestrator.launch.slurm.executor_parameters`: partition, account, GPUs per node,
setup lines ...), one task, a time limit of at most :data:`PROBE_JOB_MIN` minutes. In the job
a fresh interpreter (``launcher.python``'s, as the trials') runs :func:`describe` and prints
what the node sees: the device kinds available, the resolved device's kind, name and count,
torch's version, and the attention facts the pre-flight needs. Its answer becomes plan.json's
``device_resolved`` (``where``: ``compute node (slurm probe job <id>)``); a resume reuses it
and probes nothing. A probe that fails, ends without a result or does not finish within
:data:`PROBE_WAIT_S` (queue wait included) refuses the campaign in one line (exit 2, nothing
written to the run directory) naming the fix: ``device=cuda|musa|cpu`` explicitly, which is
then never resolved anywhere but in the trials.

Local and inline launchers run the trials on this host, which resolves ``auto`` itself
(``where``: ``this host``; through ``launcher.python``'s interpreter when that is another one).

The probe job's submitit files go to a temporary directory beside the run directory (the
same, shared, file system the trials' jobs use) and are removed once it is collected: the
run directory receives nothing before its plan. No host name is recorded (an anonymous
``node_id`` instead, as the trials').

``ORCH_FAKE_DEVICE_KINDS`` (:mod:`orchestrator.platform.device`) is the test seam: set in the
job's environment only (``launcher.slurm.setup``), it makes the node report those kinds.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, TypedDict, cast

from orchestrator.core.errors import ConfigError
from orchestrator.launch.slurm import (
    TERMINAL_STATES,
    executor_parameters,
    job_state,
    node_id,
    partition_gpus,
    scancel,
    squeue_states,
)
from orchestrator.platform import device as devmod
from orchestrator.spec.config import Config, SlurmLauncherConfig

log = logging.getLogger(__name__)

PROBE_WAIT_S = 900.0  # the probe job's queue wait and run, at most (then refused)
PROBE_JOB_MIN = 10  # the probe job's Slurm time limit (minutes), at most the trials' own
CHILD_TIMEOUT_S = 300.0  # the interpreter that describes the node's device, in the job
MODULE = "orchestrator.launch.device_probe"  # run as `python -m MODULE KIND` in the job
MARK = "ORCH_DEVICE_PROBE "  # the line of the child's stdout that carries its answer
FIX = "set device=cuda|musa|cpu explicitly"


class ProbeFailed(Exception):
    """The probe job gave no answer; the message says why, in one line."""


def _err(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".rstrip(": ")


class _DeviceDescriptionBase(TypedDict):
    kinds: list[str]
    kind: str | None
    name: str | None
    count: int | None
    torch: str | None


class DeviceDescription(_DeviceDescriptionBase, total=False):
    """What :func:`describe` prints (after :data:`MARK`): what a process sees of a device;
    the probe job adds ``node_id`` and ``slurm_job_id``."""

    error: str
    faked: list[str]  # the kinds ORCH_FAKE_DEVICE_KINDS faked
    attention: dict[str, Any] | None  # attention_target()'s facts
    node_id: str
    slurm_job_id: str


class _DeviceResolvedBase(TypedDict):
    requested: str
    where: str


class DeviceResolved(_DeviceResolvedBase, total=False):
    """plan.json ``device_resolved``: what ``device=`` resolved to and where it was decided
    (the keys of :class:`DeviceDescription` the probe gave)."""

    kind: str | None
    name: str | None
    count: int | None
    kinds: list[str]
    torch: str | None
    error: str
    faked: list[str]
    attention: dict[str, Any] | None  # attention_target()'s facts
    node_id: str
    slurm_job_id: str


def describe(requested: str = "auto") -> DeviceDescription:
    """What this process sees of ``requested`` (run where the trials run): the kinds
    available, the resolved device's kind, name and count, torch's version and the attention
    pre-flight's facts (:func:`orchestrator.platform.device.attention_target`). Never raises:
    what could not be asked is said in ``error``."""
    out: DeviceDescription = {"kinds": ["cpu"], "kind": None, "name": None, "count": None,
                              "torch": None}
    try:
        kinds = devmod.available_kinds()
    except Exception as exc:  # noqa: BLE001 - a vendor stack can raise anything here
        out["error"] = _err(exc)
        return out
    kind = kinds[0] if requested == "auto" else requested.partition(":")[0]
    # mypy checks no TypedDict.update(**kw)
    cast("dict[str, str | list[str] | int | None]", out).update(kinds=kinds, kind=kind)
    faked = devmod.fake_kinds()
    if kind in faked:  # the test seam: nothing of this device can be asked of torch
        cast("dict[str, str | list[str] | int | None]", out).update(
            name=f"{kind} (faked by {devmod.FAKE_KINDS_VAR})", faked=faked)
    else:
        try:
            info = devmod.resolve(requested)
            cast("dict[str, str | list[str] | int | None]", out).update(
                kind=info.kind, name=info.name, count=info.count)
        except Exception as exc:  # noqa: BLE001 - the trials will record it as unavailable
            out["error"] = _err(exc)
    try:
        out["torch"] = devmod.torch_build().get("version")
    except Exception as exc:  # noqa: BLE001
        out.setdefault("error", _err(exc))
    try:
        out["attention"] = devmod.attention_target(requested)
    except Exception as exc:  # noqa: BLE001 - the attention pre-flight then cannot refuse
        log.debug("no attention facts: %s", exc)
        out["attention"] = None
    return out


def describe_in(python: str, requested: str,
                timeout_s: float = CHILD_TIMEOUT_S) -> DeviceDescription:
    """:func:`describe` in a fresh ``python`` (``python -m orchestrator.launch.device_probe``),
    with this process's environment; ProbeFailed when it gives no answer."""
    try:
        proc = subprocess.run([python, "-m", MODULE, requested], capture_output=True,
                              text=True, timeout=timeout_s, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeFailed(f"{python} -m {MODULE} did not answer ({_err(exc)})") from None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            doc = json.loads(line[len(MARK):])
            assert isinstance(doc, dict)
            return cast("DeviceDescription", doc)
    tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    raise ProbeFailed(f"{python} -m {MODULE} gave no answer ({tail})")


@dataclass
class ProbeJob:
    """The probe job's body (pickled by submitit, run on the compute node)."""

    requested: str
    python: Optional[str] = None

    def __call__(self) -> DeviceDescription:
        doc = describe_in(self.python or sys.executable, self.requested)
        doc["node_id"] = node_id()
        return doc


def probe_slurm(cfg: SlurmLauncherConfig, requested: str, folder: Path,
                python: Optional[str] = None, wait_s: float = PROBE_WAIT_S) -> DeviceDescription:
    """Submit :class:`ProbeJob` with the trials' Slurm settings (files under ``folder``), wait
    for it (squeue, as the launcher does) and return its answer with ``slurm_job_id``.
    ProbeFailed (one line) when it fails, ends without a result or outlasts ``wait_s``; the
    job is cancelled when it is left behind (a time-out, an interrupt)."""
    import submitit  # start-up cost: only launcher=slurm with device=auto imports submitit

    params = executor_parameters(cfg, ntasks=1, job_name="orch-device-probe")
    if not cfg.gpus_per_node and partition_gpus(cfg.partition):
        # a cluster that shows a job only the GPUs it asked for: ask for one, or the node
        # would look like a CPU node (the count the probe reports is then that one)
        params["gpus_per_node"] = 1
    params["time"] = max(1, min(int(cfg.time_limit_min), PROBE_JOB_MIN))
    ex = submitit.SlurmExecutor(folder=str(folder / "%j"), max_num_timeout=0)
    ex.update_parameters(**params)
    job = ex.submit(ProbeJob(requested, python))
    log.info("device=auto: probe job %s submitted (the compute node decides the device)",
             job.job_id)
    done = False
    try:
        doc = _wait(job, cfg, wait_s)
        done = True
    finally:
        if not done:
            scancel([job.job_id])
    doc["slurm_job_id"] = str(job.job_id)
    return doc


def _wait(job: Any, cfg: SlurmLauncherConfig, wait_s: float) -> DeviceDescription:
    jid = str(job.job_id)
    end = time.time() + wait_s
    gone_since: Optional[float] = None
    state: Optional[str] = None
    while True:
        if job.paths.result_pickle.exists():
            try:
                doc = job.result()
            except Exception as exc:  # submitit's FailedJobError: the body raised
                raise ProbeFailed(f"probe job {jid} failed: {_err(exc)}") from None
            if not isinstance(doc, dict):
                raise ProbeFailed(f"probe job {jid} returned {type(doc).__name__}, not a dict")
            return cast("DeviceDescription", doc)  # ProbeJob's answer
        states = squeue_states()
        if states is not None:
            state = job_state(states, jid)
            if state in TERMINAL_STATES or state is None:
                gone_since = gone_since or time.time()
                grace = 5.0 if state else cfg.lost_after_s
                if time.time() - gone_since >= grace:
                    tail = _last_line(Path(job.paths.stderr))
                    raise ProbeFailed(f"probe job {jid} ended {state or 'without trace in squeue'}"
                                      f" with no result{f' ({tail})' if tail else ''}")
            else:
                gone_since = None
        if time.time() >= end:
            raise ProbeFailed(f"probe job {jid} did not finish within {wait_s:.0f} s (state "
                              f"{state or 'unknown'})")
        time.sleep(min(cfg.poll_interval_s, 2.0))


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip()[:200] if lines else ""


def _probe_folder(cfg: SlurmLauncherConfig, run_dir: Path) -> Path:
    """A temporary directory for the probe's submitit files, on the file system the compute
    nodes share with this host (launcher.slurm.folder's, else the run directory's parent)."""
    base = Path(cfg.folder) if cfg.folder else run_dir.absolute().parent
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".orch-device-probe-", dir=base))


_DescriptionKey = Literal["kind", "name", "count", "kinds", "torch", "error", "faked",
                         "attention", "node_id", "slurm_job_id"]


def _record(requested: str, doc: DeviceDescription, where: str) -> DeviceResolved:
    keep: tuple[_DescriptionKey, ...] = (
        "kind", "name", "count", "kinds", "torch", "error", "faked", "attention", "node_id",
        "slurm_job_id")
    return cast(DeviceResolved,
                {"requested": requested, **{k: doc[k] for k in keep if k in doc}, "where": where})


def resolve_device(cfg: Config, run_dir: Path,
                   previous: Optional[DeviceResolved] = None) -> DeviceResolved:
    """plan.json's ``device_resolved``: what ``device=`` resolved to and where it was decided.
    ``previous``: a resumed plan's record, reused as it is when it was for the same
    ``device=`` (no new probe). An explicit device is recorded as set; ``auto`` is asked of a
    Slurm compute node through a probe job (ConfigError, one line, when it gives no answer),
    or of this host for the local and inline launchers. Writes nothing to ``run_dir``."""
    requested = str(cfg.device)
    if previous and previous.get("requested") == requested:
        return cast(DeviceResolved, dict(previous))
    if requested != "auto":
        return {"requested": requested, "kind": requested.partition(":")[0], "name": None,
                "count": None, "where": f"set by device={requested} (not resolved before the "
                "trials)"}
    if cfg.launcher.name == "slurm":
        scfg = cfg.launcher.slurm
        try:
            folder = _probe_folder(scfg, run_dir)
        except OSError as exc:
            raise ConfigError("device", f"auto: no directory for the Slurm probe job "
                              f"({_err(exc)}); {FIX}") from None
        try:
            doc = probe_slurm(scfg, requested, folder, cfg.launcher.python)
        except ProbeFailed as exc:
            raise ConfigError("device", f"auto is decided on a compute node, but {exc}; {FIX} "
                              "(or fix launcher.slurm)") from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        where = f"compute node (slurm probe job {doc.get('slurm_job_id')})"
        log.info("device=auto resolved on a compute node: %s (%s)", doc.get("kind"), where)
        return _record(requested, doc, where)
    python = cfg.launcher.python
    if python and os.path.realpath(shutil.which(python) or python) != os.path.realpath(
            sys.executable):
        try:
            doc = describe_in(python, requested)
        except ProbeFailed as exc:
            raise ConfigError("launcher.python", f"cannot resolve device=auto with it: {exc}; "
                              f"{FIX}") from None
        return _record(requested, doc, "this host (launcher.python's interpreter)")
    return _record(requested, describe(requested), "this host")


def device_line(doc: Optional[DeviceResolved]) -> str:
    """decisions.md's line: what device= resolved to and where ("" without a record)."""
    if not isinstance(doc, dict) or not doc.get("requested"):
        return ""
    if doc.get("requested") != "auto":
        return f"`device={doc['requested']}`, set explicitly (nothing resolved before the trials)"
    count = doc.get("count")
    what = str(doc.get("kind") or "unknown") + (f": {doc['name']}" if doc.get("name") else "") + (
        f" (x{count})" if isinstance(count, int) and count > 0 else "")
    return (f"`device=auto` resolved to {what} on {doc.get('where') or 'an unknown machine'}; "
            "the plan follows it (protocol.pairing=auto, the attention pre-flight)")


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    doc = describe(args[0] if args else "auto")
    print(MARK + json.dumps(doc, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
