"""A ``command`` trial over several machines: one command per node, one record per trial.

launcher=slurm starts the trial's process once per node (one task per node; the command starts
that node's ranks, as ``torchrun --nnodes ... --node-rank ...`` does). Every node runs the same
command with its own ``NODE_RANK``; the trial directory is on the cluster's shared file system.

- Node k > 0 captures its output to ``command.node<k>.log``, reads its step lines where it has
  any (a trainer often prints on global rank 0 only, which rendezvous may put on any node), and
  leaves ``node<k>.json``: its status, exit code, wall time and steps. It writes no trial.json.
- Node 0 runs its command, then waits for every other node's report (at most until the command's
  time limit, and a grace after its own end) and writes the trial's record: a step's time is the
  slowest node's for that step, node 0's kept beside it per step in steps.csv; the skew between
  nodes and which node was slowest are recorded. A node whose command failed fails the trial
  (``node k: <its reason>``); a node that sent nothing makes it ``infra_failed`` (lost or hung:
  a resume runs it again).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from orchestrator.core.logparse import StepRecord, StepRecordDict
from orchestrator.core.results import Status, atomic_write_json

NODE_GRACE_S = 60.0  # after node 0's command ended, how long the other nodes' reports may take
PEER_GRACE_S = 10.0  # after another node failed, how long this node's command may take to end
POLL_S = 0.2


@dataclass(frozen=True)
class NodePlace:
    """Where this process is in a launch over machines."""

    node: int = 0
    nnodes: int = 1

    @property
    def multi(self) -> bool:
        return self.nnodes > 1


def place(launch_env: dict[str, str]) -> NodePlace:
    """This node's place from the command's launch variables (NODE_RANK, NNODES)."""
    nnodes = int(launch_env.get("NNODES") or 1)
    node = int(launch_env.get("NODE_RANK") or 0)
    return NodePlace(node if 0 <= node < nnodes else 0, max(1, nnodes))


def log_name(where: NodePlace) -> str:
    return "command.log" if where.node == 0 else f"command.node{where.node}.log"


def session_name(where: NodePlace, own: str) -> str:
    """The file recording the running command's session: one per node (``own`` on node 0),
    so that one node's command ending does not take another node's record with it."""
    return own if where.node == 0 else own.replace("command.", f"command.node{where.node}.", 1)


def report_path(tdir: Path, node: int) -> Path:
    return tdir / f"node{node}.json"


def launch_id() -> str:
    """The same on every node of one launch, different in a requeued or resumed one (an
    earlier attempt's report never counts): the Slurm job, its restart count and its step."""
    env = os.environ
    return ".".join(env.get(k, "") for k in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT",
                                               "SLURM_STEP_ID"))


@dataclass
class NodeReport:
    node: int
    status: str  # ok | failed | timeout
    error: str | None = None
    returncode: int | None = None
    wall_s: float | None = None
    steps: list[StepRecordDict] = field(default_factory=list)
    note: str | None = None
    at: float = 0.0
    launch: str = ""
    stopped_by: int | None = None  # stopped because that node had failed (not its own failure)
    teardown: str | None = None  # stopped after every step was logged (worker.external.ExitGrace)

    @property
    def ok(self) -> bool:
        """The node's command ended well."""
        return self.status == Status.OK

    def write(self, tdir: Path) -> None:
        atomic_write_json(report_path(tdir, self.node), dict(self.__dict__))

    @classmethod
    def read(cls, path: Path) -> NodeReport | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None


def done_path(tdir: Path) -> Path:
    return tdir / "steps_done.json"


def mark_done(tdir: Path, node: int) -> None:
    """This node's log holds every step the trial asked for: say so to the other nodes (their
    commands get workload.exit_grace_s from then to exit), once per launch."""
    if done_at(tdir) is None:
        atomic_write_json(done_path(tdir), {"launch": launch_id(), "at": time.time(),
                                             "node": node})


def done_at(tdir: Path) -> float | None:
    """When a node of this launch first had every step in its log (None: none yet)."""
    try:
        doc = json.loads(done_path(tdir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(doc, dict) and doc.get("launch") == launch_id()
    return float(doc["at"]) if ok and isinstance(doc.get("at"), (int, float)) else None


def gather(tdir: Path, where: NodePlace, ended_at: float,
           grace_s: float = NODE_GRACE_S) -> tuple[dict[int, NodeReport], list[int]]:
    """Node 0: every other node's report of this launch, waiting for them up to ``grace_s``
    after its own command ended (the nodes of a synchronous trainer end together; once one
    node has failed, 10 s more). (reports by node, nodes that sent none)."""
    until = ended_at + grace_s
    got: dict[int, NodeReport] = {}
    want = set(range(1, where.nnodes))
    me = launch_id()
    while True:
        for k in sorted(want - set(got)):
            rep = NodeReport.read(report_path(tdir, k))
            if rep is not None and rep.launch == me:
                got[k] = rep
        if set(got) == want or time.time() >= until:
            return got, sorted(want - set(got))
        if any(not r.ok for r in got.values()):
            until = min(until, max(ended_at, max(r.at for r in got.values())) + 10.0)
        time.sleep(POLL_S)


class PeerWatch:
    """While this node's command runs: has another node of this launch failed? Its command is
    then stopped ``grace_s`` later if it has not ended by itself: a synchronous trainer whose
    peer is gone waits in its next collective until a timeout (NCCL's is 10 min and more),
    which would hold every node of the trial until ``workload.time_limit_s``. Each node's
    report is the signal (node 0 leaves one when its own command failed)."""

    def __init__(self, tdir: Path, where: NodePlace, grace_s: float = PEER_GRACE_S) -> None:
        self.tdir, self.where, self.grace_s = tdir, where, grace_s
        self.launch = launch_id()
        self.seen: NodeReport | None = None
        self.seen_at = 0.0
        self.stopped = False

    def __call__(self) -> bool:
        if self.seen is None:
            for k in range(self.where.nnodes):
                if k == self.where.node:
                    continue
                rep = NodeReport.read(report_path(self.tdir, k))
                if rep is not None and rep.launch == self.launch and not rep.ok:
                    self.seen, self.seen_at = rep, time.time()
                    break
            return False
        self.stopped = time.time() - self.seen_at >= self.grace_s
        return self.stopped

    def reason(self) -> str:
        """Why this node's command was stopped (one line)."""
        r = self.seen
        assert r is not None
        return (f"stopped {self.grace_s:g} s after node {r.node} failed "
                f"({r.error or r.status})")


def node_failure(reports: dict[int, NodeReport], missing: list[int], waited_s: float,
                 own: str | None = None) -> tuple[str, str, str] | None:
    """(status, failure kind, one-line error) when another node failed or sent nothing;
    None when every other node's command ended well. ``own``: node 0's own failure, if any
    (a node that sent nothing while node 0's command failed is the likelier cause: its
    collectives lost a peer)."""
    # a node stopped because another had failed comes last: the first failure is the cause
    bad = sorted((r for r in reports.values() if not r.ok),
                 key=lambda r: (r.stopped_by is not None, r.node))
    if missing:
        names = ", ".join(map(str, missing))
        why = (f"node(s) {names} sent no report within {waited_s:.0f} s of node 0's end "
               "(lost, hung or never started: a resume runs the trial again)")
        return "infra_failed", "node_lost", why + (f"; node 0: {own}" if own else "")
    if bad:
        r = bad[0]
        more = f" (and {len(bad) - 1} more node(s))" if len(bad) > 1 else ""
        return r.status, "node_failed", f"node {r.node}: {r.error or r.status}{more}"
    return None


def steps_of(records: list[StepRecord]) -> list[StepRecordDict]:
    return [r.to_dict() for r in records]


class NodeStepFields(TypedDict):
    """A multi-node command trial's fields of its trial.json on the nodes' step lines."""

    nodes_logging_steps: list[int]
    node_skew_median_s: float | None
    slowest_node_counts: dict[str, int] | None  # node -> the steps it was slowest in
    step_time_from: str


def merge_steps(own: list[StepRecord], reports: dict[int, NodeReport],
                ) -> tuple[list[StepRecord], NodeStepFields, dict[int, dict[int, float]]]:
    """(the trial's step records, node fields of its record, each node's time per step).

    A step's time is the slowest node's among the nodes that logged it (a synchronous
    trainer's nodes finish a step together; the slowest bounds it); the other fields come from
    the first node that logged the step, node 0 first."""
    per_node: dict[int, dict[int, float]] = {}
    first: dict[int, StepRecord] = {}
    sources = [(0, own)] + [(k, [StepRecord(**d) for d in reports[k].steps])
                            for k in sorted(reports)]
    for node, recs in sources:
        if not recs:
            continue
        per_node[node] = {}
        for r in recs:
            if r.step in per_node[node]:
                continue  # several ranks of one node printing the same step: the first
            per_node[node][r.step] = r.step_time_s
            first.setdefault(r.step, r)
    merged: list[StepRecord] = []
    skews: list[float] = []
    slowest: dict[str, int] = {}
    for step in sorted(first):
        times = {n: t[step] for n, t in per_node.items() if step in t}
        worst = max(times, key=lambda n: times[n])
        base = first[step]
        merged.append(replace(base, step_time_s=times[worst]))  # its steps (an interval line) too
        if len(times) > 1:
            skews.append(max(times.values()) - min(times.values()))
            slowest[str(worst)] = slowest.get(str(worst), 0) + 1
    fields: NodeStepFields = {
        "nodes_logging_steps": sorted(per_node),
        "node_skew_median_s": statistics.median(skews) if skews else None,
        "slowest_node_counts": slowest or None,
        "step_time_from": ("the slowest node's time for each step" if len(per_node) > 1 else
                           f"node {next(iter(per_node), 0)}'s step lines (the only node "
                           "that logged steps)"),
    }
    return merged, fields, per_node


def node_columns(rows: list[dict[str, Any]], per_node: dict[int, dict[int, float]]) -> None:
    """steps.csv: each logging node's own time for the step beside the trial's."""
    if len(per_node) < 2:
        return
    for row in rows:
        for n in sorted(per_node):
            v = per_node[n].get(int(row["step"]))
            row[f"step_time_node{n}_s"] = v if v is not None and math.isfinite(v) else None


def env_node_rank() -> int:
    """The node rank Slurm's task for a command trial was given (0 elsewhere)."""
    try:
        return int(os.environ.get("NODE_RANK") or 0)
    except ValueError:
        return 0
