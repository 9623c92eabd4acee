"""The client path over several machines: one command per node, one channel for all ranks.

Node 0's trial process holds the round's block schedule (:class:`~.channel.Channel`) and listens
over TCP on the first node's address (``MASTER_ADDR``, or ``ORCH_CLIENT_LISTEN`` where it names
the interface), so that every rank of every node reaches it. It hands the address and the
trial's token to the other nodes through ``client.json`` in the trial directory (the cluster's
shared file system, readable by this user only, removed when the command ends): nothing on
the network can join or feed params without the token. Node k > 0 waits for it, runs its
command with the channel in its environment and leaves its report (orchestrator.worker.nodes);
node 0 writes every arm's record, a failed node failing the round, a silent one making it
infra_failed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, TypedDict

from orchestrator.core.trial_record import TrialRecordDict
from orchestrator.core.results import Status, trial_record
from orchestrator.platform.children import COMMAND_SESSION
from orchestrator.worker import nodes
from orchestrator.worker.external import run_command
from orchestrator.worker.teardown import ExitGrace, exit_grace, seen_done, teardown_reason

CLIENT_FILE = "client.json"
WAIT_S = 120.0  # how long node k waits for node 0's channel


def listen_for(where: nodes.NodePlace, launch_env: dict[str, str], listen: str) -> str:
    """Where node 0's channel listens: ``listen`` (ORCH_CLIENT_LISTEN) when set, else the first
    node's address (MASTER_ADDR, which every node resolves), on a free port."""
    if listen or not where.multi:
        return listen
    return launch_env.get("MASTER_ADDR") or ""


def publish(tdir: Path, channel_env: dict[str, str]) -> Path:
    """Node 0: the channel's address and token for the other nodes (mode 0600)."""
    path = tdir / CLIENT_FILE
    tmp = tdir / f".{CLIENT_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"env": channel_env, "launch": nodes.launch_id()}, fh)
    os.replace(tmp, path)
    return path


def withdraw(tdir: Path) -> None:
    (tdir / CLIENT_FILE).unlink(missing_ok=True)


def await_channel(tdir: Path, limit_s: float = WAIT_S) -> dict[str, str] | None:
    """Node k: node 0's channel environment of this launch, or None after ``limit_s``."""
    end = time.time() + limit_s
    me = nodes.launch_id()
    while time.time() < end:
        try:
            data = json.loads((tdir / CLIENT_FILE).read_text(encoding="utf-8"))
            if data.get("launch") == me and isinstance(data.get("env"), dict):
                return {str(k): str(v) for k, v in data["env"].items()}
        except (OSError, ValueError):
            pass
        time.sleep(nodes.POLL_S)
    return None


def plan_grace(workload: Any, plan: Any, tdir: Path, where: nodes.NodePlace,
               ) -> ExitGrace | None:
    """Node 0's :class:`~orchestrator.worker.teardown.ExitGrace` (None: workload.exit_grace_s
    is null): the command has run every block of the round's plan (the channel's ``plan.done``);
    over several nodes that is said to the others (nodes.mark_done), whose commands get the
    same grace from then (:func:`run_other_node`)."""
    return exit_grace(workload, seen_done(lambda: bool(plan.done), tdir, where),
                      "run every block of its plan")


def run_other_node(spec: Any, inv: Any, where: nodes.NodePlace, workload: Any,
                   ) -> list[tuple[TrialRecordDict, str]]:
    """Node k > 0 of a client round: its command with node 0's channel, its report. Its
    records are not written (node 0 writes every arm's); they only end this process. Once
    node 0's channel has run every block of the plan (nodes.done_at), the command gets
    ``workload.exit_grace_s`` to exit, then is stopped, its node ok (a hang at teardown); one
    that exits non-zero as node 0's is stopped lost its peers to that stop, and is ok too."""
    tdir = Path(spec.trial_dir)
    t0 = time.time()
    channel = await_channel(tdir, min(WAIT_S, inv.time_limit_s or WAIT_S))
    rc: int | None = None
    error = teardown = None
    if channel is None:
        error = (f"node 0 published no client channel within {WAIT_S:.0f} s (it failed to "
                 "start or is on another launch)")
    else:
        exits = exit_grace(workload, lambda: nodes.done_at(tdir) is not None,
                           "seen every block of the round's plan run (node 0's channel)")
        rc, start_error = run_command(inv.argv, inv.cwd,
                                      {**inv.env, **inv.launch_env, **channel},
                                      tdir / nodes.log_name(where), inv.time_limit_s,
                                      nodes.session_name(where, COMMAND_SESSION), stop_if=exits)
        teardown = None if start_error else teardown_reason(exits, rc, where, tdir, time.time())
        if start_error:
            error = f"cannot start the command: {start_error}"
        elif teardown:
            pass  # stopped by the grace, or by node 0's stop: its blocks all ran
        elif rc is None:
            error = f"the command ran past workload.time_limit_s={inv.time_limit_s:g} s"
        elif rc != 0:
            error = f"the command exited with code {rc}"
    status = Status.OK if error is None else (Status.TIMEOUT if channel and rc is None
                                              and not error.startswith("cannot")
                                              else Status.FAILED)
    nodes.NodeReport(node=where.node, status=str(status), error=error, returncode=rc,
                     wall_s=time.time() - t0, at=time.time(),
                     launch=nodes.launch_id(), teardown=teardown).write(tdir)
    rec = trial_record(trial_id=spec.trial_id, status=status, error=error, node=where.node)
    return [(rec, a.trial_dir) for a in spec.paired_arms]


class Outcome(TypedDict):
    """How a paired command's round ended when not cleanly (the arms' status, failure_kind
    and error in their trial.json; ``culprit``: the arm whose block was running, or None:
    every arm's)."""

    status: str
    failure_kind: str
    culprit: str | None
    error: str


class NodeFields(TypedDict, total=False):
    """The other nodes' fields of a multi-node round's records (trial.json)."""

    node_wall_s: dict[str, float | None]  # node -> its command's wall time (None: not known)
    teardown: str  # another node's command stopped by the exit grace (its report's words)


def other_nodes_outcome(tdir: Path, where: nodes.NodePlace, common: NodeFields,
                        wall_s: float | None = None, exits: ExitGrace | None = None,
                        teardown: str | None = None) -> Outcome | None:
    """Node 0, its command ended: the round's outcome decided by another node (failed, or
    sent nothing: infra_failed), in the form of client._outcome's; None when they all ended
    well. Waits for their reports past the exit grace (``exits``) they may be sitting out; a
    node stopped by it is said in ``common["teardown"]`` where node 0's own ``teardown`` is
    None."""
    ended = time.time()
    wait_s = max(nodes.NODE_GRACE_S, (exits.grace_s if exits else 0) + nodes.PEER_GRACE_S)
    others, missing = nodes.gather(tdir, where, ended, wait_s)
    common["node_wall_s"] = {"0": wall_s, **{str(k): r.wall_s for k, r in others.items()}}
    late = next((f"node {k}: {r.teardown}" for k, r in sorted(others.items()) if r.teardown),
                None)
    if late and not teardown:
        common["teardown"] = late
    bad = nodes.node_failure(others, missing, time.time() - ended)
    if bad is None:
        return None
    status, kind, error = bad
    return {"status": status, "failure_kind": kind, "culprit": None, "error": error}
