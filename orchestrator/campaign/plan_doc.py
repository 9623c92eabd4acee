"""plan.json's record types: the sections the campaign writes into it.

The sections are built by :mod:`~orchestrator.campaign.run` (the document, ``pairing``,
``adaptive``, ``calibration``, ``cost.log``), :mod:`~orchestrator.campaign.lengths` (the
planner's records: ``first_plan``, ``adaptive[].planner``) and
:mod:`~orchestrator.campaign.sizing` (``sizing``), which read each other's sections back; their
types live here, below all three, so that none imports another for a type (lengths reads
``sizing``, sizing reads ``first_plan``) and run.py stays within its length. Types only: at
run time every record is a plain dict.
"""

from __future__ import annotations

from typing import Any, TypedDict

from orchestrator.core.records import Pairing
from orchestrator.spec.plan import PlannedTrialDict
from orchestrator.spec.sweep import ArmPlan, Bucket


class PlannerBucket(TypedDict, total=False):
    """One bucket of a planner's record (plan.json's ``first_plan.buckets`` and
    ``adaptive[].planner``): the measured steps chosen (None: none yet) and why, with the
    variance components it rests on (core.paired.Components' fields)."""

    choice: int | None
    choice_cycles: int  # pairing=steps: whole cycles per arm
    why: str
    sigma_within: float
    sigma_between: float
    steps: float
    step_s: float
    fixed_s: float
    expected_rounds: int | None  # first_plan: rounds an effect at the margin takes
    process_s: float
    rounds_why: str


# "from" is a keyword: the functional form declares it; FirstPlan adds the rest
_FirstPlanFrom = TypedDict("_FirstPlanFrom", {"from": str}, total=False)


class FirstPlan(_FirstPlanFrom, total=False):
    """plan.json's ``first_plan``: the first rounds' lengths by cost from a calibration
    record's components (``from``: its line; campaign.lengths.first_round_plan), or why not."""

    why: str
    buckets: dict[str, PlannerBucket]


class BucketSizing(TypedDict, total=False):
    """One bucket of plan.json's ``sizing.buckets``: its pilot (or the record's step time), the
    measured steps it sized (None: not sized) and why."""

    pilot: str | None  # the pilot's trial id (None: sized from a calibration record)
    recorded_step_s: float
    pilot_step_s: float
    measured_steps: int | None
    why: str


class Sizing(TypedDict, total=False):
    """plan.json's ``sizing``: a command's trials sized by time from its pilots."""

    target_s: float
    margin: float
    alternated: bool
    buckets: dict[str, BucketSizing]
    why: str  # the command cannot be sized (no {steps})


class PairingDoc(TypedDict, total=False):
    """plan.json's ``pairing``: the pairing the planner chose and why (campaign.run.prepare)."""

    mode: Pairing
    why: str
    block_steps: int  # pairing=steps
    switch_warmup_steps: int  # pairing=steps
    slices: list[dict[str, Any]]  # pairing=duet: orchestrator.platform.slices.duet_slices'
    placement: str  # pairing=duet


class AdaptiveRound(TypedDict):
    """One entry of plan.json's ``adaptive``: the rounds added after a look, for which arms
    and why, and the planner's record of their lengths (or why it did not size them)."""

    after_rounds: int
    added_rounds: list[int]
    arms: list[str]
    reasons: dict[str, str]  # arm id -> why it needs more rounds
    planner: dict[str, PlannerBucket] | dict[str, str]  # per bucket, or {"why": ...}


class CalibrationDoc(TypedDict, total=False):
    """plan.json's ``calibration``: the calibration record relied on instead of an A/A arm
    (campaign.calibration.Calibration's fields and its line)."""

    record_id: str
    at: float
    calibrated: bool
    floor: float | None
    interval: list[float] | None
    rounds: int | None
    workload: str
    pairing: str
    campaign: str
    components: dict[str, dict[str, float]] | None
    costs: dict[str, float] | None
    line: str


class CostLogEntry(TypedDict, total=False):
    """One entry of plan.json's ``cost.log``: a prediction (campaign.cost.Prediction's fields,
    after how many processes, from a calibration record's costs or not) or a budget's stop
    (what was not run, what was spent)."""

    spent_node_s: float
    lo_node_s: float
    hi_node_s: float
    lo_wall_s: float
    hi_wall_s: float
    per_process_s: list[float]
    processes_left: list[int]
    basis: str
    after_processes: int
    from_record: bool
    budget_stop: str
    not_run: str


class PlanRounds(TypedDict):
    """plan.json's ``rounds``: the protocol's initial and most rounds, and the adaptive step."""

    initial: int
    max: int
    adaptive_step: int


class PlanSpending(TypedDict):
    """plan.json's ``spending``: the error rate, the spending function's rho and the looks'
    shares [round, alpha] (frozen at the first plan)."""

    alpha: float
    rho: float
    looks: list[list[float]]


class PlanCost(TypedDict):
    """plan.json's ``cost``: the node-hour budget and the predictions and stops so far."""

    budget_node_hours: float
    log: list[CostLogEntry]


class PlanDoc(TypedDict, total=False):
    """plan.json (campaign.run._plan_doc): the arms, buckets, rounds, pairing, spending, cost
    and trials a campaign plans, which a resume must find unchanged."""

    schema_version: int
    sweep: str
    arms: list[ArmPlan]
    control_arm: ArmPlan | None
    calibration: CalibrationDoc
    buckets: list[Bucket]
    rounds: PlanRounds
    first_plan: FirstPlan
    adaptive: list[AdaptiveRound]
    pairing: PairingDoc
    launcher: dict[str, Any]  # orchestrator.launch.slurm_alloc.plan_entry's
    device_resolved: dict[str, Any]  # orchestrator.launch.device_probe.resolve_device's
    spending: PlanSpending
    sizing: Sizing
    cost: PlanCost
    trials: list[PlannedTrialDict]
