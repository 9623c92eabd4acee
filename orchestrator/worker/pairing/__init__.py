"""The ways a trial process measures its arms, one module each, behind one small interface.

A timed trial process measures one arm (``protocol.pairing=process``) or every arm of its
round paired (the rest). :data:`MODES` lists them in the order the worker tries them; the
first whose :meth:`Mode.applies` holds for the spec measures it, and returns one (record,
trial directory) per arm, in the spec's order:

===============  ===========  ==================================================================
mode             plan.json    module
===============  ===========  ==================================================================
``duet``         duet         :mod:`.duet`: a round's commands side by side, each on its slice
``alternation``  steps        :mod:`.alternation`: a plain command's arms, their own processes
                              taking turns under SIGSTOP/SIGCONT
``client``       steps        :mod:`.client`: a command whose trainer calls orchestrator.client
``in-process``   steps        :mod:`.inprocess`: an embedded recipe's arms in one process
``process``      process      :mod:`.process`: one arm (a recipe here, or a command)
===============  ===========  ==================================================================

Every mode writes the same record fields for the analysis: ``pairing`` (the plan's word),
``paired_by`` where it pairs by steps another way than in one process, and for arms paired by
steps ``paired_process``, ``paired_arms``, ``cycles`` and per-cycle ``blocks``; a failure of one
arm is that arm's status, and a failure that leaves an arm unmeasured on no fault of its own is
``infra_failed``. tests/worker/test_pairing_contract.py holds every mode to that.

A paired mode plans its trials too: :data:`PLANNERS` (the planner's choice, by protocol.pairing)
names the module that joins a round's one-arm specs into one trial carrying its part
(``spec.jobs.PairingPart``: the arms, the module's tag and its settings, which the module types
and reads back itself: :class:`.steps.StepsPart`, :class:`.duet.DuetPart`). The spec layer
below knows no mode's settings, so a new mode is its module, its entry here and its case in
the contract test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.core.records import Pairing
from orchestrator.spec.config import Config
from orchestrator.spec.jobs import TrialSpec
from orchestrator.worker.pairing import alternation, client, duet, inprocess, process, steps
from recipes.registry import workload_from_dict

Records = list[tuple[TrialRecordDict, str]]  # one (record, trial dir) per arm, in spec order


@dataclass(frozen=True)
class Mode:
    """One way of measuring a trial's arms."""

    name: str
    pairing: Pairing  # the word plan.json and the records carry
    applies: Callable[[TrialSpec], bool]
    measure: Callable[[TrialSpec, TrialBase, float | None], Records]


def _own_process(spec: TrialSpec) -> bool:
    """The round's baseline runs as a program of its own (a command workload)."""
    base = next((a for a in spec.paired_arms if a.is_baseline), spec.paired_arms[0])
    return workload_from_dict(base.workload).runs_own_process()


def _part(*tags: str) -> Callable[[TrialSpec], bool]:
    """Whether a spec carries the part of one of these tags (a paired mode's module's)."""
    return lambda s: s.paired is not None and s.paired.mode in tags


MODES: tuple[Mode, ...] = (
    Mode("duet", Pairing.duet, _part(duet.TAG), lambda s, base, t0: duet.measure_duet(s, base)),
    Mode("alternation", Pairing.steps, _part(steps.ALTERNATION_TAG),
         lambda s, base, t0: alternation.measure_alternated(s, base)),
    Mode("client", Pairing.steps, lambda s: _part(steps.TAG)(s) and _own_process(s),
         lambda s, base, t0: client.measure(s, base)),
    Mode("in-process", Pairing.steps, _part(steps.TAG), inprocess.measure_inprocess),
    Mode("process", Pairing.process, lambda s: s.paired is None,
         lambda s, base, t0: [(process.measure_one(s, base, t0), s.trial_dir)]),
)


@dataclass(frozen=True)
class Planner:
    """How a paired mode's module plans a campaign's trials."""

    # a round's one-arm specs joined into the mode's trials (each with the mode's part)
    plan: Callable[[Config, Sequence[TrialSpec], Sequence[Any]], list[TrialSpec]]
    # what plan.json's pairing section says of it, for this many arms
    facts: Callable[[Config, int], dict[str, Any]]


# the planner's choice: protocol.pairing's word -> the module that joins a round's one-arm
# specs into its paired trials (protocol.pairing=process: one arm per process, as planned)
PLANNERS: dict[Pairing, Planner] = {
    Pairing.steps: Planner(steps.plan, steps.facts),
    Pairing.duet: Planner(duet.plan, duet.facts),
}


def plan_specs(cfg: Config, specs: Sequence[TrialSpec], arms: Sequence[Any]) -> list[TrialSpec]:
    """The trials of ``specs`` (one per planned trial: ``spec.jobs.make_specs``) as
    protocol.pairing measures them: a paired mode's module joins each round's arms into one."""
    planner = PLANNERS.get(Pairing(cfg.protocol.pairing))
    return planner.plan(cfg, specs, arms) if planner else list(specs)


def plan_facts(cfg: Config, n_arms: int) -> dict[str, Any]:
    """What plan.json's pairing section says of protocol.pairing's planner (its settings)."""
    planner = PLANNERS.get(Pairing(cfg.protocol.pairing))
    return planner.facts(cfg, n_arms) if planner else {}


def mode_for(spec: TrialSpec) -> Mode:
    """The mode that measures this timed trial."""
    return next(m for m in MODES if m.applies(spec))


def measure(spec: TrialSpec, base: TrialBase, launch_t0: float | None) -> Records:
    """Every arm of the timed trial ``spec``: one (record, trial dir) per arm."""
    return mode_for(spec).measure(spec, base, launch_t0)
