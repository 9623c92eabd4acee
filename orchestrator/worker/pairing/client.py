"""A user's own trainer paired by steps (``protocol.pairing=steps`` for a ``command`` workload
whose trainer calls :mod:`orchestrator.client`).

The trial process starts the command as an external trial does (its own session, the time
limit, ``command.log``) and listens on the channel it names in ``ORCH_CLIENT``. Every rank
of the command connects; the plan here, the same one the in-process paired trial follows
(:mod:`orchestrator.worker.trial`), hands all ranks the same next block at once: each arm warms
up one step at a time to its own steady state, then cycles of one block per arm in the
protocol's order, each block ``switch_warmup_steps`` excluded steps and ``block_steps``
measured ones, until every arm has its measured steps and seconds (an even number of cycles).
So the ranks switch at the same step, and the decision is taken once. A step's time is its
slowest rank's ``client.timed()`` windows (each rank's windows of the step summed; the client
synchronises the device at block boundaries only, :mod:`orchestrator.client`), as for the
in-process recipes; every rank's times are kept beside it in steps.csv
(``step_time_rank<r>_s``, rank 0's among them), with the rank skew (``rank_skew_s``, slowest
minus fastest) and which rank was slowest (``slowest_rank``). The arm's record has the
distributed fields of an in-process trial (:func:`orchestrator.platform.distributed.summary`:
``world_size``, ``rank_skew_median_s``, ``rank_skew_max_s``, ``slowest_rank_counts``,
``step_time_definition``) and each rank's median (``step_time_rank_medians_s``).

The channel is a Unix socket in a temporary directory (``ORCH_CLIENT`` names its path) for a
command on one machine. For one whose ranks span machines, the launcher sets
``ORCH_CLIENT_LISTEN=HOST[:PORT]`` in this process's environment (an address of the first
node that every node reaches; port 0 or none: one the OS picks), and the channel listens on
TCP there instead (``ORCH_CLIENT=tcp://HOST:PORT`` for the command; the record's
``client_channel``). Either way the trial's token (``ORCH_CLIENT_TOKEN``) guards it: a
connection is read no further than its first line (64 KiB) until that hello carries the
token (compared in constant time), one that sends none within a minute is dropped, and every
refused one is recorded in ``client_strays`` (the process's pid on the Unix socket, the
peer's address over TCP) and changes no arm's status.

What goes wrong is a status of the arms with a one-line reason, never a crash: the command
never connects (``no_client``), uses the client wrongly or reads a param the workload does not
declare switchable, or never reads one it does (``client``), exits or hangs mid-block (the
running arm gets the status, the others an infrastructure failure), or an arm reports a
non-finite loss (that arm ``failed``, the others go on).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Any, TypedDict, cast

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator import client as wire
from orchestrator.core import blocks
from orchestrator.core.errors import BackendUnavailable
from orchestrator.core.results import INFRA_STATUS, Status, excluded_tags, trial_record, write_csv
from orchestrator.core.steady import warmup_complete
from orchestrator.platform import distributed as distmod
from orchestrator.worker import nodes
from orchestrator.worker.bootstrap import start_worker
from orchestrator.worker.teardown import teardown_reason
from orchestrator.worker.external import (
    child_peak_rss,
    CommandFields,
    command_fields,
    declared_utilization,
    log_tail,
    run_command,
)
from orchestrator.worker.pairing import client_nodes
from orchestrator.worker.pairing.steps import StepsPart
from orchestrator.worker.pairing.channel import (  # noqa: F401 (its users' names)
    Channel,
    ChannelError,
    Stray,
    listen_address,
    tcp_endpoint,
)

MAX_MEASURED_STEPS = 2000  # as in-process: the most measured steps measured_min_s may ask for
MAX_BATCH_CYCLES = 16  # the most cycles one reply hands out (the rest after the report)


class _ArmFailureCore(TypedDict):
    """The fields every :class:`ArmFailure` has."""

    status: str
    error: str


class ArmFailure(_ArmFailureCore, total=False):
    """An arm that failed in a paired process or command: its trial.json's failure fields
    (``status`` and ``error`` always; the failure kind, or an in-process traceback)."""

    failure_kind: str
    traceback: str


class PlanBlock(TypedDict):
    """One block of a :class:`Plan`: its arm, ``warmup`` or ``cycle``, the cycle (-1 for a
    warm-up), its excluded steps after the switch, and all its steps."""

    arm: str
    kind: str
    cycle: int
    switch: int
    steps: int


class ClientClockFields(TypedDict, total=False):
    """Which clock timed a client-paired arm's windows (its trial.json's ``timed_by``)."""

    timed_by: str
    timed_by_why: str


class PairingSession(TypedDict):
    """A paired process's fields of each arm's trial.json: the pairing, the process and its
    arms, the block sizes and the cycles run (worker.pairing.inprocess, the client's)."""

    pairing: str
    paired_process: str
    paired_arms: list[str]
    block_steps: int
    switch_warmup_steps: int
    cycles: int


class PairedCommandFields(CommandFields, total=False):
    """A client-paired command's arm record before its status (trial.json): the command's
    fields, the refused connections to its channel, and the arm's own."""

    client_strays: list[Stray]


class RankFields(distmod.DistNodes, total=False):
    """A client-paired arm's distributed fields of trial.json (:func:`rank_fields`): the
    fields of :class:`~orchestrator.platform.distributed.DistSummary`, the backend None (the
    command's own), and each rank's median step time."""

    step_agreement_median_s: float | None
    world_size: int
    dist_backend: str | None
    step_time_definition: str
    rank_skew_median_s: float | None
    rank_skew_max_s: float | None
    slowest_rank_counts: dict[int, int]  # rank -> measured steps it was the slowest in
    threads_per_rank: int | None
    step_time_rank_medians_s: dict[int, float]


class Plan:
    """The blocks of one paired command, decided once for every rank: warm-ups, then cycles
    of one block per live arm until each has its measured steps and seconds. ``take`` folds a
    finished batch's step rows in and returns the next batch of blocks (or the end)."""

    def __init__(self, spec: Any, values: dict[str, dict[str, Any]], baseline: str,
                 declared: list[str], lead: int = 0) -> None:
        self.spec = spec
        self.part = StepsPart.of(spec)
        # steps every block loses at its head (an alternated command's step split by its
        # pause, orchestrator.worker.pairing.alternation): a block asks for that many more, excluded
        self.lead = lead
        self.ids = list(values)
        self.values, self.baseline, self.declared = values, baseline, list(declared)
        self.policy = spec.warmup()
        self.min_s = spec.measured_min_s
        self.cap = (max(spec.measured_steps, MAX_MEASURED_STEPS) if self.min_s > 0
                    else spec.measured_steps)
        self.bound = (self.policy.max_steps + 3 * spec.measured_steps + self.cap + 10) * len(
            self.ids) * (1 + self.part.switch_warmup_steps)
        self.warming = list(self.ids)
        self.warm: dict[str, tuple[list[float], bool]] = {a: ([], False) for a in self.ids}
        self.n = dict.fromkeys(self.ids, 0)
        self.got_s = dict.fromkeys(self.ids, 0.0)
        # each arm's last step times (how many steps its measured_min_s still needs)
        self.recent: dict[str, deque[float]] = {a: deque(maxlen=9) for a in self.ids}
        self.failed: dict[str, ArmFailure] = {}
        # per step: (arm, cycle, previous arm, phase, seconds, tags, loss, every rank's seconds,
        # the command's own step number or None)
        self.raw: list[tuple[Any, ...]] = []
        self.steps = 0
        self.clocks: set[str] = set()  # what timed the ranks' windows (each batch's report)
        self.ranks: list[int] = [0]  # the ranks that reported (set by the channel)
        self.blocks: list[PlanBlock] = []  # per block: arm, kind, cycle, switch steps
        self.cycle = 0
        self.folded = 0  # blocks whose steps are in
        self.at = 0  # the block the command is in (rank 0's "at" notes)
        self.prev = ""
        self.read: set[str] = set()
        self.done = False

    def running(self) -> PlanBlock | None:
        """The block the command was in (the arm that was running, should it die)."""
        if self.done or not self.blocks:
            return None
        return self.blocks[min(self.at, len(self.blocks) - 1)]

    def alive(self) -> list[str]:
        return blocks.live_arms(self.ids, self.baseline, self.failed)

    def short(self, a: str) -> bool:
        return blocks.needs_more(self.n[a], self.got_s[a], self.spec.measured_steps,
                                 self.min_s, self.cap)

    def take(self, per_rank: dict[int, list[list[Any]]], read: set[str]) -> wire.Reply:
        """Fold the last batch's blocks in (rank -> [[block, [[seconds, loss, tags] per step]]
        ...]; a step may carry a fourth item, the command's own step number); the next batch
        for every rank, or the end. Raises ChannelError."""
        self.read |= read
        ranks = sorted(per_rank)
        self.ranks = ranks
        lead = per_rank[ranks[0]]
        if any([b for b, _ in per_rank[r]] != [b for b, _ in lead] for r in ranks):
            raise ChannelError("the ranks ran different blocks: they left lockstep")
        for i, (block, _) in enumerate(lead):
            if block != self.folded:
                raise ChannelError(f"a rank reported block {block}, but block {self.folded} "
                                   "was next")
            self._fold(self.blocks[block], {r: per_rank[r][i][1] for r in ranks})
            self.folded += 1
        if self.folded != len(self.blocks):
            raise ChannelError(f"the ranks reported {self.folded} of the {len(self.blocks)} "
                               "blocks handed out")
        if not self.warming and any(k not in self.read for k in self.declared):
            missing = sorted(k for k in self.declared if k not in self.read)
            raise ChannelError(f"workload.switchable declares {', '.join(map(repr, missing))}, "
                               "but the trainer never read it through client.params(): every "
                               "arm would run the same code; read it there, or drop it")
        batch = self._batch()
        if not batch:
            self.done = True
            return {"done": True}
        first = len(self.blocks)
        self.blocks.extend(batch)
        self.at = first
        return {"blocks": [{"block": first + i, "arm": b["arm"], "params": self.values[b["arm"]],
                            "steps": b["steps"]} for i, b in enumerate(batch)]}

    def finish(self, per_rank: dict[int, list[list[Any]]]) -> None:
        """End the plan early: fold the blocks of the last batch that ran (in order; the rest
        were never run) and hand out nothing more. Raises ChannelError as take does."""
        lead = per_rank.get(0, [])
        for block, _ in lead:
            if block != self.folded:
                raise ChannelError(f"block {block} reported, but block {self.folded} was next")
            self._fold(self.blocks[block], {r: next(b for i, b in per_rank[r] if i == block)
                                            for r in per_rank})
            self.folded += 1
        del self.blocks[self.folded:]
        self.done = True

    def _batch(self) -> list[PlanBlock]:
        """The next blocks: a warm-up block (the steps the policy needs at least before it can
        say done), or whole cycles, as many as the arms' step times so far say they still need
        (ending on an even number of cycles); [] when the plan is done."""
        if self.steps >= self.bound:
            raise ChannelError(f"{self.steps} steps run in the paired command: it tags too "
                               "many steps for exclusion (client.report tags)")
        self.warming = [a for a in self.warming if a not in self.failed]
        if self.baseline in self.failed:
            return []
        if self.warming:
            arm = self.warming[0]
            left = self.policy.warmup_steps - len(self.warm[arm][0])
            return [{"arm": arm, "kind": "warmup", "cycle": -1, "switch": 0,
                     "steps": max(1, left) + self.lead}]
        alive = self.alive()
        if not alive or (self.cycle > 0 and not any(self.short(a) for a in alive)):
            return []
        cycles = self._cycles_needed(alive)
        cycles += (self.cycle + cycles) % 2  # end on an even number of cycles
        out: list[PlanBlock] = []
        switch = self.lead + self.part.switch_warmup_steps  # a pause's split step, then these
        per = switch + self.part.block_steps
        for c in range(self.cycle, self.cycle + cycles):
            for arm in blocks.ordered(alive, c, self.part.order, self.part.order_seed):
                out.append({"arm": arm, "kind": "cycle", "cycle": c, "switch": switch,
                            "steps": per})
        self.cycle += cycles
        return out

    def _cycles_needed(self, alive: list[str]) -> int:
        """Cycles until every arm has its measured steps and seconds, from each arm's recent
        step times (at least 1; at most MAX_BATCH_CYCLES in one batch)."""
        need = 1
        for a in alive:
            steps = max(0, self.spec.measured_steps - self.n[a])
            if self.min_s > 0:
                times = self.recent[a]
                if times:
                    steps = max(steps, math.ceil((self.min_s - self.got_s[a])
                                                 / statistics.median(times)))
                steps = min(steps, self.cap - self.n[a])
            need = max(need, math.ceil(steps / self.part.block_steps))
        return min(need, MAX_BATCH_CYCLES)

    def _fold(self, blk: PlanBlock, per_rank: dict[int, list[list[Any]]]) -> None:
        """One block's steps in: phases, the arm's counts, warm-up and failure (the rows kept
        compact here, on the path between two batches; :meth:`rows` builds them). A step's
        time is its slowest rank's window (the lowest rank's loss and tags)."""
        arm, kind, switch = blk["arm"], blk["kind"], blk["switch"]
        ranks = sorted(per_rank)
        lead = per_rank[ranks[0]]
        if any(len(per_rank[r]) != len(lead) for r in ranks):
            counts = ", ".join(f"rank {r}: {len(per_rank[r])}" for r in ranks)
            raise ChannelError(f"the ranks ran different numbers of steps in arm {arm}'s block "
                               f"({counts}): they left lockstep")
        warm, recent = self.warm[arm][0], self.recent[arm]
        for j, (t, loss, tags, *own) in enumerate(lead):
            times = [per_rank[r][j][0] for r in ranks] if len(ranks) > 1 else None
            for x in times or (t,):
                if not isinstance(x, (int, float)) or not x > 0 or x == math.inf:
                    raise ChannelError(f"a rank sent step time {x!r} s in arm {arm}'s block")
            if times is not None:  # the step ends when its slowest rank's window does
                t = max(times)
            tags = str(tags or "")
            if kind == "warmup":
                phase = "excluded" if tags else "warmup"
                if not tags:
                    warm.append(t)
                    recent.append(t)
            elif j < switch:
                phase = "excluded"
                if blocks.SWITCH_TAG not in tags.split(";"):
                    tags = f"{tags};{blocks.SWITCH_TAG}" if tags else blocks.SWITCH_TAG
            elif tags:
                phase = "excluded"
            else:
                phase = "measured"
                self.n[arm] += 1
                self.got_s[arm] += t
                recent.append(t)
            if loss is not None and not math.isfinite(loss) and arm not in self.failed:
                self.failed[arm] = {"status": Status.FAILED, "failure_kind": "nonfinite_loss",
                                    "error": f"non-finite loss {loss} at step {self.steps} "
                                    f"(arm {arm})"}
            self.raw.append((arm, blk["cycle"], self.prev, phase, float(t), tags, loss, times,
                             int(own[0]) if own else None))
            self.steps += 1
        if kind == "warmup" and arm in self.warming:
            done, settled = warmup_complete(warm, self.policy)
            self.warm[arm] = (warm, settled)
            if done:
                self.warming.remove(arm)
        if kind == "cycle":
            self.prev = arm

    def rows(self, arm: str | None = None) -> list[dict[str, Any]]:
        """The steps.csv rows (every arm's, or one arm's), in step order."""
        ranks = sorted(self.ranks)
        out = []
        for step, (a, cycle, prev, phase, t, tags, loss, times, own) in enumerate(self.raw):
            if arm is not None and a != arm:
                continue
            # the command's own step number where each arm ran its own process (alternated):
            # its losses then line up with the baseline's step for step
            at = step if own is None else own
            row: dict[str, Any] = {"step": at, "phase": phase, "step_time_s": t,
                                   "data_wait_s": None, "tags": tags, "arm_id": a,
                                   "block": cycle, "prev_arm": prev, "batch_index": at,
                                   "loss": None if loss is None else float(loss)}
            if times is not None:
                for r, x in zip(ranks, times):
                    row[f"step_time_rank{r}_s"] = x
                row["rank_skew_s"] = max(times) - min(times)
                row["slowest_rank"] = ranks[times.index(max(times))]
            out.append(row)
        return out


def measure(spec: Any, base: TrialBase) -> list[tuple[TrialRecordDict, str]]:
    """The round's arms through one run of the command (its trainer built with the
    baseline's workload); one (record, trial dir) per arm, in the spec's order."""
    base_arm = next((a for a in spec.paired_arms if a.is_baseline), spec.paired_arms[0])
    trainer = start_worker(base_arm.workload, spec.device).trainer(spec.bucket)
    if not getattr(trainer.workload, "switchable", None):
        raise BackendUnavailable("protocol.pairing=steps for a command whose trainer does "
                                 "not switch arms through orchestrator.client alternates "
                                 "its arms' processes (the campaign plans it so)")
    return measure_client_paired(spec, base, trainer)


def measure_client_paired(spec: Any, base: TrialBase, trainer: Any,
                          listen: str | None = None) -> list[tuple[TrialRecordDict, str]]:
    """Every arm of ``spec.paired_arms`` through one run of the command (built with the
    baseline's workload); one (record, trial dir) per arm, in the spec's order. ``listen``:
    where the channel listens over TCP (``HOST`` or ``HOST:PORT``); None: as
    ``ORCH_CLIENT_LISTEN`` in this process's environment says, a Unix socket where it is unset
    or empty ("" asks for the Unix socket whatever the environment says)."""
    listen = os.environ.get(wire.LISTEN_ENV, "") if listen is None else listen
    arms = spec.paired_arms
    plan = _plan_of(spec, trainer)
    tdir = Path(spec.trial_dir)
    tdir.mkdir(parents=True, exist_ok=True)
    inv = trainer.invocation(str(tdir), spec.warmup_steps, spec.measured_steps, spec.timeout_s)
    where = nodes.place(inv.launch_env)
    if where.multi and where.node > 0:  # another node: node 0 holds the channel
        return client_nodes.run_other_node(spec, inv, where, trainer.workload)
    listen = client_nodes.listen_for(where, inv.launch_env, listen.strip())
    channel = Channel(plan, max(1, int(trainer.workload.world_size)), listen or None)
    node_outcome, node_fields = None, client_nodes.NodeFields()
    try:
        if where.multi:
            client_nodes.publish(tdir, channel.env())
        t0 = time.time()
        exits = client_nodes.plan_grace(trainer.workload, plan, tdir, where)
        rc, start_error = run_command(inv.argv, inv.cwd,
                                      {**inv.env, **inv.launch_env, **channel.env()},
                                      tdir / "command.log", inv.time_limit_s, stop_if=exits)
        wall = time.time() - t0
        teardown = teardown_reason(exits, rc, where, tdir, t0 + wall)  # stopped once done: ok
        if where.multi:  # another node's teardown, where node 0 had none
            node_outcome = client_nodes.other_nodes_outcome(tdir, where, node_fields, wall,
                                                            exits, teardown)
            teardown = teardown or node_fields.pop("teardown", None)
    finally:
        channel.close()
        client_nodes.withdraw(tdir)
    common = cast(PairedCommandFields, {**command_fields(spec, base, inv), "command_wall_s": wall,
              "command_returncode": rc, "step_source": "orchestrator.client",  # cast: mypy reads no keys through the conditional **
              # over nodes: the first node's address (a machine) stays out of the record
              "client_channel": ("tcp://<master_addr>:" + channel.address.rsplit(":", 1)[-1]
                                 if where.multi else channel.address)
              if channel.tcp else "unix",
              **({"client_strays": channel.strays} if channel.strays else {}),
              **({"teardown": teardown} if teardown else {})})
    session: PairingSession = {"pairing": "steps", "paired_process": spec.trial_id,
               "paired_arms": plan.ids, "block_steps": plan.part.block_steps,
               "switch_warmup_steps": plan.part.switch_warmup_steps, "cycles": plan.cycle}
    tail = log_tail(tdir / "command.log", str(tdir))
    if where.multi:
        common.update(nodes=where.nnodes, **node_fields)  # type: ignore[call-arg, misc]  # mypy: update takes no keywords
    outcome = _outcome(plan, channel, 0 if teardown else rc, start_error, inv.time_limit_s)
    if node_outcome is not None and (outcome is None or node_outcome["status"] == INFRA_STATUS):
        outcome = node_outcome  # another node failed or was lost: say so, not its effect here
    out = []
    for i, a in enumerate(arms):
        arm = str(a.arm_id)
        own: PairedCommandFields = {**common, "trial_id": a.trial_id, "arm_id": arm,
               "arm_label": a.arm_label, "is_baseline": a.is_baseline, "position": spec.position + i, **session}
        out.append((_arm_record(spec, trainer, plan, own, arm, outcome, tail), a.trial_dir))
    return out


def _plan_of(spec: Any, trainer: Any) -> Plan:
    """The plan of one run of the command: each arm's values of the switchable params (the
    workload's ``switchable``) and which arm is the baseline."""
    arms = spec.paired_arms
    declared = list(trainer.workload.switchable)
    values = {str(a.arm_id): {k: (a.workload.get("params") or {}).get(k) for k in declared}
              for a in arms}
    baseline = next((str(a.arm_id) for a in arms if a.is_baseline), str(arms[0].arm_id))
    return Plan(spec, values, baseline, declared)


def _outcome(plan: Plan, channel: Channel, rc: int | None, start_error: str | None,
             limit_s: float | None) -> client_nodes.Outcome | None:
    """How the command ended when it did not finish the plan cleanly: {status, failure_kind,
    error, culprit (the arm whose block was running, or None: every arm's)}; None when it
    did."""
    running = plan.running()
    where = f" in arm {running['arm']}'s block" if running else ""
    culprit = running["arm"] if running else None
    if start_error:
        return {"status": Status.FAILED, "failure_kind": "cannot_start", "culprit": None,
                "error": f"cannot start the command: {start_error}"}
    if channel.error and channel.error_kind == "client":
        return {"status": Status.FAILED, "failure_kind": "client", "culprit": None,
                "error": f"client: {channel.error}"}
    if rc is None:
        return {"status": Status.TIMEOUT, "failure_kind": "timeout", "culprit": culprit,
                "error": f"the command ran past workload.time_limit_s={limit_s:g} s and was "
                f"killed{where} ({plan.steps} step(s) by then)"}
    if not channel.connected and rc != 0:
        return {"status": Status.FAILED, "failure_kind": "exit_code", "culprit": None,
                "error": f"the command exited with code {rc} before it connected to the client "
                "channel (its log says why)"}
    if not channel.connected and channel.strays:
        return {"status": Status.FAILED, "failure_kind": "no_client", "culprit": None,
                "error": f"the command ran to its end (exit code 0), and every connection to the "
                f"client channel was refused ({len(channel.strays)}; the first: "
                f"{channel.strays[0]['why']})"}
    if not channel.connected:
        return {"status": Status.FAILED, "failure_kind": "no_client", "culprit": None,
                "error": "the command ran to its end (exit code 0) and never connected to the "
                "client channel (ORCH_CLIENT): its trainer does not call orchestrator.client, so its arms "
                "cannot be switched between steps; use protocol.pairing=process"}
    if not plan.done:
        if rc == 0:
            return {"status": Status.FAILED, "failure_kind": "stopped_early", "culprit": None,
                    "error": f"the command exited (code 0){where} before the plan's last "
                    "block: its loop must run every step client.steps() yields"}
        return {"status": Status.FAILED, "failure_kind": "exited_mid_block", "culprit": culprit,
                "error": f"the command exited with code {rc}{where}, step {plan.steps}"}
    if rc != 0:
        return {"status": Status.FAILED, "failure_kind": "exit_code", "culprit": None,
                "error": f"the command exited with code {rc} after the plan's last block"}
    return None


def _arm_record(spec: Any, trainer: Any, plan: Plan, own: PairedCommandFields, arm: str,
                outcome: client_nodes.Outcome | None, tail: str) -> TrialRecordDict:
    rows = plan.rows(arm)
    if rows:
        Path(own_dir := _dir_of(spec, arm)).mkdir(parents=True, exist_ok=True)
        write_csv(Path(own_dir) / "steps.csv", rows)
    if outcome is not None:
        culprit = outcome["culprit"]
        if culprit is None or culprit == arm:
            return trial_record(**own, status=outcome["status"],
                                failure_kind=outcome["failure_kind"], error=outcome["error"],
                                stderr_tail=tail)
        why = f"the paired command ended {outcome['status']} in arm {culprit}'s block"
        return trial_record(**own, status=INFRA_STATUS, infra_reason=why,
                            error=f"not measured: {why} ({outcome['error']})")
    if arm in plan.failed:
        return trial_record(**own, **plan.failed[arm], stderr_tail=tail)
    if arm not in plan.alive():
        why = f"the baseline failed in the paired command ({plan.failed[plan.baseline]['error']})"
        return trial_record(**own, status=INFRA_STATUS, infra_reason=why,
                            error="not measured: the baseline failed first")
    return ok_paired_record(spec, trainer, plan, own, arm, rows)


def _dir_of(spec: Any, arm: str) -> str:
    return next(a.trial_dir for a in spec.paired_arms if str(a.arm_id) == arm)


def ok_paired_record(spec: Any, trainer: Any, plan: Plan, own: CommandFields, arm: str,
                     rows: list[dict[str, Any]], peak: tuple[int, str] | None = None,
                     tokens: tuple[int | None, str] | None = None,
                     **more: Any) -> TrialRecordDict:
    """An arm's ok record from its paired steps: ``peak`` (bytes, source) where the arm's own
    peak is known (else the command's, all arms), ``tokens`` (per step, source) where its log
    says (else the workload's figure); ``more``: fields of its own."""
    measured = [r for r in rows if r["phase"] == "measured"]
    times = [r["step_time_s"] for r in measured]
    median = statistics.median(times)
    meds = blocks.block_medians(times, [r["block"] for r in measured])
    warm, settled = plan.warm[arm]
    losses = [(r["step"], r["loss"]) for r in rows if r["loss"] is not None]
    if peak is None:
        size, source = child_peak_rss()
        peak = (size, f"{source} (the paired command, all arms)")
    n_tokens, tokens_source = tokens or (trainer.tokens_per_step, trainer.tokens_source)
    useful = trainer.useful_flops_per_step()
    excluded = sum(1 for r in rows if r["phase"] == "excluded")
    return trial_record(
        **{**own, "measured_steps": len(times)},
        status=Status.OK,
        torch_version=None,
        step_time_median_s=median,
        step_time_mad_s=statistics.median(abs(v - median) for v in times),
        measured_steps_run=len(times),
        measured_s=sum(times),
        warmup_policy=plan.policy.policy, warmup_steps_used=len(warm), warmup_settled=settled,
        excluded_steps=excluded, excluded_tags=excluded_tags(rows),
        tokens_per_step=n_tokens, tokens_source=tokens_source,
        tokens_per_s=None if n_tokens is None else n_tokens / median,
        peak_mem_bytes=peak[0], peak_mem_source=peak[1],
        useful_flops_per_step=useful,
        final_loss=losses[-1][1] if losses else None,
        nonfinite_loss_steps=[s for s, v in losses if not math.isfinite(v)],
        warmup_excess_s=sum(warm) - len(warm) * median,
        blocks=[{"cycle": c, "median_s": m} for c, m in sorted(meds.items())],
        **rank_fields(measured, plan.ranks),
        **client_clock_fields(plan.clocks),
        **(declared_utilization(spec, trainer, useful, median) if useful is not None else {}),
        **more,
    )


def client_clock_fields(clocks: set[str]) -> ClientClockFields:
    """Which clock timed the client's windows, as an in-process trial's record says it
    (``timed_by``); {} where no rank said (an older client)."""
    if not clocks:
        return {}
    by = "device events" if "device events" in clocks else "host clock"
    why = ("the client's windows: device events at each window's ends, read after the one "
           "sync at each block's boundary" if by == "device events" else
           "the client's windows: the host clock (no device started in the trainer)")
    if len(clocks) > 1:
        why += f"; the ranks differed ({', '.join(sorted(clocks))})"
    return {"timed_by": by, "timed_by_why": why}


CLIENT_STEP_TIME = ("per step, the slowest rank's client.timed() windows (each rank's windows "
                    "of the step summed; the device synchronised at block boundaries, the "
                    "windows timed by device events on a GPU, by the host's clock otherwise)")


def rank_fields(measured: list[dict[str, Any]], ranks: list[int]) -> RankFields:
    """The distributed fields of an arm's record from its measured rows: an in-process
    distributed trial's (the command's backend and threads are its own: None), and each
    rank's median step time; {} for one rank."""
    if len(ranks) < 2 or not measured or "rank_skew_s" not in measured[0]:
        return {}
    ctx = distmod.DistContext(rank=0, world_size=len(ranks), local_rank=0, backend="",
                              threads_per_rank=None)
    out = distmod.summary(ctx, [r["rank_skew_s"] for r in measured],
                          [r["slowest_rank"] for r in measured])  # ranks 0..world-1
    return {**out, "dist_backend": None, "step_time_definition": CLIENT_STEP_TIME,
            "step_time_rank_medians_s": {r: statistics.median(x[f"step_time_rank{r}_s"]
                                                              for x in measured) for r in ranks}}
