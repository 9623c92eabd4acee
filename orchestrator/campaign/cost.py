"""What a decision costs: node time per process, per arm and per decision; the prediction a
campaign prints before it spends, and the budget that caps it (``protocol.budget_node_hours``).

Node time is the launcher's view: a process's wall time from its start (the launcher's
``on_start``) to its record, times the nodes it spans (``workload.nnodes``): its interpreter and
imports, compile, data, warm-up and measured steps alike, everything a node is held for. Each
process the campaign launches (timed trials, a command's pilots, the correctness probes,
profiled and microbenchmark trials) is one line of ``costs.jsonl`` (:data:`COSTS`), written as
it ends, so a resumed or interrupted campaign still knows what it spent. Measured time is the
sum of the measured steps a trial timed (steps.csv), times its nodes: the share of node time
the comparison rests on.

Queue time (Slurm's pending) is not node time and is not counted; a Slurm trial's start is
when its launcher saw it start.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TypedDict, cast

from orchestrator.core.records import COSTS, STEPS, TrialKind, joint_rounds
from orchestrator.core.section import Section
from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.launch.base import Launcher, OnDone, OnJobDone, OnStart

if TYPE_CHECKING:  # start-up cost: the probe's comparisons import torch; only its record type is used here
    from orchestrator.analysis.correctness.compare import ProbeRecord
from orchestrator.spec.config import Config
from orchestrator.spec.jobs import TrialSpec, WorkerJob, paired_members
from orchestrator.spec.plan import PlannedTrial

log = logging.getLogger("orchestrator.campaign.run")

PILOT = "pilot"  # a command's sizing pilot (orchestrator.campaign.sizing): its trial ids' prefix
PROBE = "probe"  # a correctness probe (orchestrator.campaign.gate)


@dataclass(frozen=True)
class Spent:
    """One process's node time (a line of costs.jsonl)."""

    trial_ids: tuple[str, ...]  # every arm's trial a paired process ran; a probe's job id
    arm_ids: tuple[str, ...]
    kind: str  # timed | profile | microbench | probe
    nodes: int
    wall_s: float
    status: str = ""
    at: float = 0.0
    steps_s: float = 0.0  # its steps' time, warm-up and measured (steps.csv): the rest is start-up
    fill: str = ""  # compile_cache=arm: fills (the arm's caches were empty) | reuses

    @property
    def node_s(self) -> float:
        return self.wall_s * self.nodes

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spent:
        return cls(tuple(d.get("trial_ids") or ()), tuple(d.get("arm_ids") or ()),
                   str(d.get("kind") or TrialKind.TIMED), int(d.get("nodes") or 1),
                   float(d.get("wall_s") or 0.0), str(d.get("status") or ""),
                   float(d.get("at") or 0.0), float(d.get("steps_s") or 0.0),
                   str(d.get("fill") or ""))


def read_spent(run_dir: Path) -> list[Spent]:
    """Every process the run directory's campaign launched, in the order they ended (a line
    cut short by a kill is left out)."""
    path = run_dir / COSTS
    out: list[Spent] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(Spent.from_dict(json.loads(line)))
        except (ValueError, TypeError, AttributeError):
            continue
    return out


def spent_node_s(run_dir: Path) -> float:
    return sum(s.node_s for s in read_spent(run_dir))


class Meter(Launcher):
    """A launcher that writes each process's node time to ``costs.jsonl`` as it ends, and
    otherwise is the launcher it wraps (its attributes read through)."""

    def __init__(self, inner: Launcher, run_dir: Path) -> None:
        self.inner = inner
        self.run_dir = run_dir
        self.name = inner.name
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # device_kind, slots ... of the launcher itself
        return getattr(self.inner, name)

    @property
    def seen_hostnames(self) -> set[str] | frozenset[str]:  # type: ignore[override]
        return self.inner.seen_hostnames

    def close(self) -> None:
        self.inner.close()

    def recover(self) -> None:
        self.inner.recover()

    def run(self, specs: Sequence[TrialSpec], on_done: OnDone, timeout_s: float,
            on_start: Optional[OnStart] = None) -> None:
        starts: dict[str, float] = {}

        def started(spec: TrialSpec) -> None:
            starts[spec.trial_id] = time.time()
            if on_start is not None:
                on_start(spec)

        def done(spec: TrialSpec, record: TrialRecordDict) -> None:
            t0 = starts.pop(spec.trial_id, None)
            wall = time.time() - t0 if t0 is not None else _record_wall(record)
            members = paired_members(spec)
            self._write(Spent(tuple(m.trial_id for m in members),
                              tuple(m.arm_id for m in members), str(spec.kind), spec.nodes(),
                              max(wall, 0.0), str(record.get("status") or ""), time.time(),
                              sum(_steps_s(Path(m.trial_dir)) for m in members),
                              str(record.get("compile_cache_fill") or "")))
            on_done(spec, record)

        self.inner.run(specs, done, timeout_s, on_start=started)

    def run_jobs(self, jobs: Sequence[WorkerJob], on_done: OnJobDone, timeout_s: float) -> None:
        last = [time.time()]  # one after another: a job starts when the one before ended

        def done(job: WorkerJob, record: TrialRecordDict | ProbeRecord) -> None:
            now = time.time()
            wall = record.get("process_seconds")
            wall = float(wall) if isinstance(wall, (int, float)) else now - last[0]
            last[0] = now
            self._write(Spent((str(getattr(job, job.id_field, "")),),
                              (str(getattr(job, "arm_id", "")),), PROBE, job.nodes(),
                              max(wall, 0.0), str(record.get("status") or ""), now))
            on_done(job, record)

        self.inner.run_jobs(jobs, done, timeout_s)

    def _write(self, spent: Spent) -> None:
        line = json.dumps({**asdict(spent), "node_s": spent.node_s}) + "\n"
        with self._lock:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.run_dir / COSTS, "a", encoding="utf-8") as fh:
                fh.write(line)


def _steps_s(trial_dir: Path) -> float:
    """The trial's step times summed, every phase (0 where it logged none)."""
    try:
        with open(trial_dir / STEPS, newline="", encoding="utf-8") as fh:
            return sum(float(r.get("step_time_s") or 0.0) for r in csv.DictReader(fh))
    except (OSError, ValueError):
        return 0.0


def _record_wall(record: TrialRecordDict) -> float:
    """A process the launcher never said it started (it failed to start): what its record
    says, else nothing."""
    a, b = record.get("started_at"), record.get("finished_at")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(b) - float(a)
    return 0.0


# --------------------------------------------------------------------------- the prediction


class PredictionDict(TypedDict):
    """A prediction as plan.json's ``cost.log`` records it (Prediction's fields, the tuples as
    lists)."""

    spent_node_s: float
    lo_node_s: float
    hi_node_s: float
    lo_wall_s: float
    hi_wall_s: float
    per_process_s: list[float]
    processes_left: list[int]
    basis: str


@dataclass(frozen=True)
class Prediction:
    """Node time (and wall time) the campaign will have spent at its end, as a range: ``lo``
    if no adaptive round runs, ``hi`` if every variant runs to ``protocol.max_rounds``."""

    spent_node_s: float
    lo_node_s: float
    hi_node_s: float
    lo_wall_s: float
    hi_wall_s: float
    per_process_s: tuple[float, float]  # the least and most a timed process cost so far
    processes_left: tuple[int, int]  # processes still to run: at least, at most
    basis: str

    def line(self) -> str:
        return (f"predicted node time {_h(self.lo_node_s)}-{_h(self.hi_node_s)} "
                f"(wall {_dur(self.lo_wall_s)}-{_dur(self.hi_wall_s)} more; spent so far "
                f"{_h(self.spent_node_s)}; {self.processes_left[0]}-{self.processes_left[1]} "
                f"more processes at {self.per_process_s[0]:.1f}-{self.per_process_s[1]:.1f} "
                f"node-s each, {self.basis})")

    def to_dict(self) -> PredictionDict:
        return cast(PredictionDict,
                    {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()})


def _h(node_s: float) -> str:
    if node_s >= 3600:
        return f"{node_s / 3600:.2f} node-h"
    if node_s >= 60:
        return f"{node_s / 60:.1f} node-min"
    return f"{node_s:.0f} node-s"


def _dur(s: float) -> str:
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def processes(cfg: Config, trials: Sequence[PlannedTrial]) -> int:
    """Processes that run these planned trials: one per trial, or one per round and bucket
    where a round's arms share it (pairing by steps, duet)."""
    if joint_rounds(cfg.protocol.pairing):
        return len({(t.round, t.bucket) for t in trials})
    return len(trials)


def adaptive_processes(cfg: Config, arms: int, buckets: int, rounds_done: int) -> int:
    """At most this many processes in the adaptive rounds still possible."""
    p = cfg.protocol
    left = max(max(p.max_rounds, p.repeats) - max(rounds_done, p.repeats), 0)
    per_round = buckets if joint_rounds(p.pairing) else arms * buckets
    return left * per_round


def predict(cfg: Config, run_dir: Path, planned_left: Sequence[PlannedTrial],
            adaptive_left: int) -> Prediction | None:
    """The range from what timed processes cost so far (None: none has ended yet)."""
    spent = read_spent(run_dir)
    ran = [s for s in spent if s.kind == TrialKind.TIMED and s.node_s > 0]
    timed = [s.node_s for s in ran]
    if not timed:
        return None
    total = sum(s.node_s for s in spent)
    n_left = processes(cfg, planned_left)
    basis = f"from {len(timed)} timed process(es) of this campaign"
    # the campaign's first process also started what every later one finds running (the
    # launcher's fork server, the page cache's first read of torch): where a timed process
    # was that first one (no pilot or probe before it), once another has ended the dearest of
    # the others sets the upper end. The adaptive rounds' processes start with every arm's
    # caches filled (compile_cache=arm): the dearest that reused them sets theirs
    c = recorded_costs(spent)
    assert c is not None  # a timed process has ended
    lo_each, hi_each, hi_adaptive = c["least_node_s"], c["dearest_node_s"], c["reuse_node_s"]
    if max(timed) > hi_each:
        basis += "; the upper end leaves out the first process's own start"
    if ran and all(s.fill == "fills" for s in ran):
        # every process so far filled its arm's caches: until an arm's second trial shows what
        # a warm start saves, the low end lets a warm cache skip all of a start-up
        lo_each = min(max(s.steps_s, 0.0) * s.nodes for s in ran) or lo_each
        basis += ("; each filled its arm's compile caches, so the low end assumes a warm "
                  "start could skip the whole start-up")
    lo = total + n_left * lo_each
    hi = total + n_left * hi_each + adaptive_left * hi_adaptive
    nodes = max((s.nodes for s in spent if s.kind == TrialKind.TIMED), default=1)
    par = max(1, int(getattr(cfg.launcher, "max_parallel", 1) or 1))
    return Prediction(total, lo, hi, (lo - total) / nodes / par, (hi - total) / nodes, (
        lo_each, hi_each), (n_left, n_left + adaptive_left), basis)


def recorded_costs(spent: Sequence[Spent]) -> dict[str, float] | None:
    """What a campaign's processes cost, for its calibration record (None: no timed process
    ended): its first process (whatever its kind: it started what later ones find running),
    the cheapest timed process, the dearest other than the first, the dearest that reused its
    arm's caches, and the most nodes one used."""
    ran = [s for s in spent if s.kind == TrialKind.TIMED and s.node_s > 0]
    if not ran:
        return None
    later = [s.node_s for s in ran if s is not spent[0]] or [s.node_s for s in ran]
    reused = [s.node_s for s in ran if s.fill == "reuses"]
    return {"first_node_s": spent[0].node_s, "least_node_s": min(s.node_s for s in ran),
            "dearest_node_s": max(later), "reuse_node_s": max(reused or later),
            "nodes": float(max(s.nodes for s in ran))}


def predict_from_record(cfg: Config, planned_left: Sequence[PlannedTrial], adaptive_left: int,
                        costs: dict[str, float], source: str,
                        shift: tuple[float, float] = (0.0, 0.0),
                        spent_node_s: float = 0.0) -> Prediction | None:
    """Before any process of this campaign: the range from what the recorded campaign's
    processes cost (:func:`recorded_costs`), each moved by ``shift`` (the least and most its
    measured steps run longer here). The low end: every process as cheap as its cheapest; the
    high end: a first process as dear as its first, every other as its dearest, the adaptive
    rounds' as its dearest warm start."""
    try:
        first, least, dearest, reuse = (float(costs[k]) for k in (
            "first_node_s", "least_node_s", "dearest_node_s", "reuse_node_s"))
        nodes = max(1, int(costs.get("nodes") or 1))
    except (KeyError, TypeError, ValueError):
        return None
    n_left = processes(cfg, planned_left)
    if n_left <= 0:
        return None
    lo_each, hi_each = max(least + shift[0], 0.0), max(dearest + shift[1], 0.0)
    lo = spent_node_s + n_left * lo_each  # spent: a gate's probes, a pilot, before any trial
    hi = spent_node_s + (max(first, dearest) + shift[1]) + (n_left - 1) * hi_each \
        + adaptive_left * max(reuse + shift[1], 0.0)
    par = max(1, int(getattr(cfg.launcher, "max_parallel", 1) or 1))
    basis = (f"before any timed process of this campaign, from what the processes of {source} "
             f"cost (its first {first:.1f} node-s)")
    if shift != (0.0, 0.0):
        basis += f"; this campaign's measured steps run {shift[0]:+.1f} to {shift[1]:+.1f} s longer"
    return Prediction(spent_node_s, lo, hi, (lo - spent_node_s) / nodes / par,
                      (hi - spent_node_s) / nodes, (lo_each, hi_each),
                      (n_left, n_left + adaptive_left), basis)


def budget_s(cfg: Config) -> float:
    """protocol.budget_node_hours in node-seconds (0: no budget)."""
    return float(cfg.protocol.budget_node_hours) * 3600.0


def affordable(cfg: Config, run_dir: Path, trials: Sequence[PlannedTrial]) -> tuple[bool, str]:
    """Whether ``trials`` fit in what is left of the budget, by the dearest timed process so
    far (no budget, or no process ended yet: yes), and what it found."""
    cap = budget_s(cfg)
    if cap <= 0 or not trials:
        return True, ""
    spent = read_spent(run_dir)
    total = sum(s.node_s for s in spent)
    timed = [s.node_s for s in spent if s.kind == TrialKind.TIMED and s.node_s > 0]
    if total >= cap:
        return False, f"{_h(total)} spent of a budget of {_h(cap)}"
    if not timed:
        return True, ""
    need = processes(cfg, trials) * max(timed)
    if total + need > cap:
        return False, (f"{_h(total)} spent of a budget of {_h(cap)}; the next "
                       f"{processes(cfg, trials)} process(es) would need up to {_h(need)}")
    return True, ""


# --------------------------------------------------------------------------- the accounts


@dataclass(frozen=True)
class Accounts:
    """Node time in all, by kind of process, per arm (a shared process split evenly among its
    arms; timed processes only), and the measured steps' node time per arm."""

    total_node_s: float
    by_kind: dict[str, float]
    by_arm: dict[str, float]
    measured_by_arm: dict[str, float]
    processes: int


def accounts(run_dir: Path, measured_s: dict[str, float]) -> Accounts | None:
    """``measured_s``: trial id -> seconds of its measured steps (None: nothing launched)."""
    spent = read_spent(run_dir)
    if not spent:
        return None
    by_kind: dict[str, float] = {}
    by_arm: dict[str, float] = {}
    owner: dict[str, tuple[str, int]] = {}  # trial id -> (arm, nodes)
    for s in spent:
        by_kind[s.kind] = by_kind.get(s.kind, 0.0) + s.node_s
        if s.kind != TrialKind.TIMED or not s.arm_ids:
            continue
        for arm, tid in zip(s.arm_ids, s.trial_ids):
            by_arm[arm] = by_arm.get(arm, 0.0) + s.node_s / len(s.arm_ids)
            owner[tid] = (arm, s.nodes)
    measured: dict[str, float] = {}
    for tid, secs in measured_s.items():
        if tid in owner and math.isfinite(secs):
            arm, nodes = owner[tid]
            measured[arm] = measured.get(arm, 0.0) + secs * nodes
    return Accounts(sum(by_kind.values()), by_kind, by_arm, measured, len(spent))


def cost_section(cfg: Config, run_dir: Path, measured_s: dict[str, float],
                 labels: dict[str, str], decided: int, plan: dict[str, Any] | None
                 ) -> list[Section]:
    """decisions.md: what the campaign cost in node time, per arm and per decision, the
    share that was measured steps, the prediction made before it spent and the budget."""
    acc = accounts(run_dir, measured_s)
    if acc is None:
        return []
    measured = sum(acc.measured_by_arm.values())
    kinds = ", ".join(f"{k} {_h(v)}" for k, v in sorted(acc.by_kind.items()))
    lines = [
        "Node time = each process the campaign launched, from its start to its record, times "
        "the nodes it spans (start-up, compile, warm-up and measured steps alike; queue time "
        "not counted); measured = the measured steps' time, what the comparison rests on.",
        "",
        f"- In all: {_h(acc.total_node_s)} ({acc.total_node_s:.0f} node-s) over "
        f"{acc.processes} process(es): {kinds}.",
        f"- Measured steps: {measured:.0f} node-s, "
        f"{100 * measured / acc.total_node_s if acc.total_node_s else 0:.1f} % of it.",
        (f"- Per decision: {_h(acc.total_node_s / decided)} for each of {decided} decided "
         "variant(s) (retain, reject or equivalent)." if decided else
         "- Per decision: no variant was decided."),
    ]
    log_ = ((plan or {}).get("cost") or {}).get("log") or []
    first = next((x for x in log_ if "lo_node_s" in x), None)
    if first is not None:
        inside = first["lo_node_s"] <= acc.total_node_s <= first["hi_node_s"] * 1.0001
        when = ("before any timed process (from a calibration record's costs)"
                if first.get("from_record") else
                f"after the first {first.get('after_processes')} process(es)")
        lines.append(f"- Predicted {when}: "
                     f"{first['lo_node_s']:.0f}-{first['hi_node_s']:.0f} node-s; spent "
                     f"{acc.total_node_s:.0f} ({'inside' if inside else 'outside'} the range).")
    cap = budget_s(cfg)
    stop = next((x for x in log_ if "budget_stop" in x), None)
    if cap > 0:
        lines.append(f"- Budget: {cfg.protocol.budget_node_hours:g} node-h "
                     f"(`protocol.budget_node_hours`)" + (
                         f"; reached: {stop['budget_stop']}; {stop['not_run']} not run, so the "
                         "verdicts rest on the trials before it" if stop else "; not reached"))
    lines += ["", "| arm | node-s | measured node-s | measured share |", "|---|---|---|---|"]
    for arm, node_s in acc.by_arm.items():
        m = acc.measured_by_arm.get(arm, 0.0)
        lines.append(f"| {labels.get(arm, arm)} | {node_s:.0f} | {m:.1f} | "
                     f"{100 * m / node_s if node_s else 0:.1f} % |")
    return [Section("Cost (node time)", lines)]
