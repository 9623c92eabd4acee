"""The objective is time (orchestrator.core.objective): how a trial's steps are summarised and
which tagged steps are charged, and end to end on the synthetic load: a variant whose
recurring tagged steps cost time is charged for them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core import objective


def test_summaries() -> None:
    xs = [1.0] * 49 + [100.0]
    assert objective.summarize(xs, "median") == 1.0
    assert objective.summarize(xs, "mean") == pytest.approx((49 + 100) / 50)
    # one step in fifty left out at each end: the stray step of a 50-step trial goes
    assert objective.summarize(xs, "trimmed_mean") == pytest.approx(1.0)
    # below fifty steps nothing is trimmed: the mean
    assert objective.summarize([1.0, 1.0, 4.0], "trimmed_mean") == pytest.approx(2.0)
    # charged steps count at their own times per step
    assert objective.summarize([1.0, 1.0], "mean", [4.0]) == pytest.approx(2.0)
    assert objective.charge_factor([1.0, 1.0], "mean", [4.0]) == pytest.approx(2.0)
    assert objective.charge_factor([1.0, 1.0], "mean", []) == 1.0
    with pytest.raises(ValueError, match="unknown trial summary 'mode'"):
        objective.summarize([1.0], "mode")
    with pytest.raises(ValueError, match="no measured steps"):
        objective.summarize([], "mean")


def _row(phase: str, tags: str = "") -> dict[str, Any]:
    return {"phase": phase, "tags": tags, "step_time_s": 2.0 if tags else 1.0}


def test_only_recurring_steady_state_tags_of_the_arm_are_charged() -> None:
    rows = [_row("excluded", "compile"), _row("warmup"), _row("excluded", "compile"),
            _row("measured"),
            _row("excluded", "epoch_boundary"), _row("measured"),
            _row("excluded", "compile"),  # one-off in the steady state: not charged
            _row("excluded", "switch"), _row("excluded", "compile;switch"),  # the harness's
            _row("excluded", "profiler"), _row("excluded", "profiler"),
            _row("excluded", "epoch_boundary"), _row("measured"),
            _row("excluded", float("nan"))]  # type: ignore[arg-type]  # a csv's empty cell
    got = objective.charged_rows(rows)
    assert [r["tags"] for r in got] == ["epoch_boundary", "epoch_boundary"]
    assert objective.charged_tag_counts(got) == {"epoch_boundary": 2}
    # before the first measured step (warm-up) nothing is charged, however often it recurs
    assert objective.charged_rows(rows[:3]) == []


def _campaign(compose: Any, run_dir: Path, *extra: str) -> dict[str, Any]:
    from orchestrator.campaign import run as campaign

    cfg = compose(["workload=synthetic", "+sweep=calibrate", "protocol=quick", "launcher=inline",
                   "workload.units_per_token=0.05", "sweep.variable=workload.epoch_steps",
                   "sweep.baseline=0", "sweep.baseline_label=no-boundaries", "sweep.values=[2]",
                   "sweep.labels=[boundary-every-2]", "protocol.measured_steps=12",
                   # both arms in one process, block by block: a step lasts about a millisecond
                   # and this machine's speed drifts by a third between trials, which one
                   # arm per trial (three rounds) cannot tell from the boundaries' cost
                   "protocol.measured_min_s=0.25", "protocol.pairing=steps",
                   "protocol.max_rounds=3", "protocol.interference_retries=0", *extra])
    campaign.run_campaign(cfg, run_dir)
    (line,) = [json.loads(x) for x in (run_dir / "decisions.jsonl").read_text().splitlines()
               if json.loads(x).get("arm_id") == "a1"]
    return line


@pytest.mark.slow
def test_a_variant_whose_recurring_tagged_steps_cost_time_is_charged(
        compose: Any, run_dir: Path, tmp_path: Path) -> None:
    """Every second step of the variant is an epoch boundary at twice the work: tagged, so
    excluded from its measured steps. Charged (the default), the variant is ~1.5x slower per
    step and not retained; with charge_recurring_tags=false the boundaries are invisible."""
    line = _campaign(compose, run_dir)
    # three rounds of a quick protocol on a busy machine may leave it inconclusive; never
    # retained or equivalent, and its estimate is the charged time
    assert line["verdict"] in ("reject", "inconclusive"), line
    sp = line["speedups"]["t1k"]["speedup"]
    assert 1 / 1.8 < sp < 1 / 1.2, sp  # about (1 + 2) / 2 = 1.5x the work per step
    md = (run_dir / "decisions.md").read_text(encoding="utf-8")
    assert "recur in the steady state (epoch_boundary" in md
    assert "are charged" in md
    assert "its mean step is" in md  # the median column hides the boundaries' time
    assert "recurring steady-state tagged steps charged" in md  # the protocol line
    other = tmp_path / "uncharged"
    other.mkdir()
    line = _campaign(compose, other, "protocol.charge_recurring_tags=false")
    assert line["verdict"] != "reject", line
    assert math.isclose(line["speedups"]["t1k"]["speedup"], 1.0, rel_tol=0.15), line


def test_paired_by_steps_a_charged_cost_scales_the_arms_round_cell() -> None:
    """Pairing by steps: the cycles' median ratio stays the robust within-process contrast, and
    an arm's charged steps scale its round cell by its time with them over its time without,
    so a cost that lands in a few of its blocks is charged in full, not outvoted."""
    from orchestrator.analysis.analyze import block_cells

    per = {(0, "a0"): [(c, 1.0) for c in range(4) for _ in range(3)],
           (0, "a1"): [(c, 1.0) for c in range(4) for _ in range(3)]}
    cells, _ = block_cells(per, "a0", how="trimmed_mean")
    assert cells[(0, "a1")] == pytest.approx(cells[(0, "a0")])
    # two recurring boundary steps of 3 s each in a1's round: (12 x 1 + 2 x 3) / 14 per step
    cells, _ = block_cells(per, "a0", how="trimmed_mean", charged={(0, "a1"): [3.0, 3.0]})
    assert cells[(0, "a1")] / cells[(0, "a0")] == pytest.approx(18 / 14)


def test_own_offset_recipe_draws_one_offset_per_process_for_the_variant_only(
        compose: Any) -> None:
    """recipes/examples/own_offset.py (kind: custom): the variant's work is scaled by a factor
    drawn once per process (kept across switches), the baseline's is not scaled at all."""
    from orchestrator.spec.sweep import resolve_arms
    from recipes.examples.own_offset import build

    cfg = compose(["workload=own_offset", "+sweep=own_offset"])
    base, var = (a.workload_config for a in resolve_arms(cfg))
    bucket = cfg.workload.buckets[0]
    t = build(base, bucket, "cpu")
    assert t.units == t.base_units and t.own_offset == 1.0
    t.switch(var)
    first = t.units
    t.switch(base)
    assert t.units == t.base_units
    t.switch(var)
    assert t.units == first  # one draw per process, kept across switches
    # fresh processes draw afresh: 8 trainers at log SD 5 % of 1024 units are not all alike
    draws = {build(var, bucket, "cpu").units for _ in range(8)}
    assert len(draws) > 1 and all(0.7 < u / t.base_units < 1.4 for u in draws)
