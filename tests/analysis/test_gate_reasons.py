"""The gates' full outputs where the others test parts: every reason of a variant failing many
checks, worst first; the facts' keys in correctness.json order; the external-loss gate's count
of further non-finite steps and its place after the work-per-step gate (issue 50's splits)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
import torch

from orchestrator.analysis.correctness.gate import evaluate
from orchestrator.analysis.loss_gate import loss_trajectory_gates
from orchestrator.spec.config import ToleranceConfig
from orchestrator.spec.sweep import Arm

FP32 = ToleranceConfig(rel_l2=1e-5, atol=1e-9, rtol=1e-4, trajectory_rtol=1e-5,
                       update_rel_l2=1e-3)
ARMS = [Arm("a0", "base", None, True), Arm("a1", "var", None, False)]
NAN = float("nan")
FACTS = ["data", "round_trip", "forward_repeat", "trajectory", "worst_tensor", "tensors"]


def _rec(losses: list[float] | None = None, **bucket: Any) -> dict[str, Any]:
    losses = losses or [2.0, 1.9, 1.8, 1.7]
    b = {"batch_hashes": ["h0", "h1", "h2", "h3"], "batch_ids": [0, 1, 2, 3], "losses": losses,
         "round_trip": {"resume_step": 2, "losses": losses[2:]}, "from_baseline_weights": True,
         "forward_repeat_rel_l2": 0.0, "final_eval_loss": 1.7}
    b.update(bucket)
    return {"status": "ok", "checkpoint": {"signature": {"w": [[2], "float32"]}},
            "buckets": {"s": b}, "cross_loads": {"a1": {"ok": True, "eval_loss": 1.7}}}


def _tensors(out_scale: float = 1.0) -> dict[str, Any]:
    return {"outputs": torch.tensor([1.0, 2.0, 3.0, 4.0]) * out_scale,
            "loss": torch.tensor([2.0]), "grads": {"w": torch.tensor([0.5, -0.5])},
            "update": {"w": torch.tensor([-1e-3, 1e-3])}, "trajectory": torch.zeros(4)}


def _gate(probes: dict[str, Any], tensors: dict[str, Any]) -> Any:
    _, (g,) = evaluate(ARMS, probes, lambda name, bucket: tensors.get(name), {"fp32": FP32},
                       "fp32")
    return g


def test_every_reason_of_a_variant_failing_many_checks_worst_first() -> None:
    var = _tensors(3.0)
    var["grads"] = {"w": torch.tensor([NAN, 1.0])}
    var["update"] = {"w": torch.tensor([1.0, 1.0])}
    a1 = _rec([2.0, 3.0, 1.8, 1.1], batch_hashes=["x", "h1", "h2", "h3"],
              forward_repeat_rel_l2=0.5, round_trip={"resume_step": 1, "losses": [3.5, 1.8, 1.1]})
    a1["checkpoint"] = {"signature": {"w": [[3], "float16"]}}
    repeat = _rec()
    repeat["cross_loads"] = {"a1": {"ok": True, "eval_loss": 9.0}}
    g = _gate({"a0": _rec(), "a0-repeat": repeat, "a1": a1},
              {"a0": _tensors(), "a0-repeat": _tensors(), "a1": var})
    assert g.status == "fail" and list(g.buckets["s"]) == FACTS
    assert g.reasons == [
        "s grad/w: 1 NaN/Inf of 2 where the baseline is finite",
        ("s data: the batch sequence differs from the baseline's from step 0 (batch ids "
         "[0, 1, 2, 3] vs [0, 1, 2, 3]); data order is not the swept variable"),
        ("s checkpoint round trip: resuming at step 1 changes the loss by 1.67e-01 relative "
         "(> 1e-05)"),
        "checkpoint: w: shape [3] != baseline [2]",
        "checkpoint: w: dtype float16 != baseline float32",
        ("s forward is stochastic: two forwards of the same batch differ by rel_l2 5.00e-01 "
         "(> 1.0e-05; dropout or another random op active?)"),
        "s outputs: rel_l2 2.00e+00 > 1.0e-05 (max_abs 8.00e+00)",
        "s update/w: rel_l2 1.00e+03 > 1.0e-03 (max_abs 1.00e+00)",
        "s loss trajectory: step 1 differs by 5.79e-01 relative (> 1.0e-05)",
        ("final weights: the baseline's code gives a loss 4.29e+00 relative off the variant's "
         "own (> 1e-05)"),
    ]
    worst = g.buckets["s"]["worst_tensor"]
    assert worst == {"name": "update/w", "rel_l2": pytest.approx(1000.0), "threshold": 1e-3}


def test_facts_when_numerics_cannot_be_compared_and_when_tensors_are_missing() -> None:
    tens = {"a0": _tensors(), "a0-repeat": _tensors(), "a1": _tensors()}
    g = _gate({"a0": _rec(), "a0-repeat": _rec(), "a1": _rec(from_baseline_weights=False)},
              tens)
    assert (g.status, g.reasons) == ("pass", [])
    assert list(g.buckets["s"]) == ["data", "round_trip", "numerics"]
    del tens["a1"]
    g = _gate({"a0": _rec(), "a0-repeat": _rec(), "a1": _rec()}, tens)
    assert (g.status, g.reasons) == ("fail", ["s: the variant's tensors are missing"])
    assert g.buckets["s"]["worst_tensor"] is None and g.buckets["s"]["tensors"] == []
    del tens["a0"]
    g = _gate({"a0": _rec(), "a0-repeat": _rec(), "a1": _rec()}, tens)
    assert (g.status, g.reasons) == ("error", ["s: the baseline's tensors are missing"])


def test_loss_gate_counts_further_non_finite_steps_after_the_work_gate(compose: Any) -> None:
    cfg = compose(["workload=command_example", "+sweep=example_delay"])
    arms = [Arm("a0", "base", 0, True), Arm("a1", "nan", 1, False),
            Arm("a2", "work", 2, False)]
    trials = pd.DataFrame([
        {"trial_id": t, "arm_id": a, "bucket": "s32", "round": 0, "status": "ok",
         "tokens_per_step": tokens, "tokens_source": "log", "nonfinite_loss_steps": nf}
        for t, a, tokens, nf in (("t0", "a0", 128, []), ("t1", "a1", 128, [1, 2, 3]),
                                 ("t2", "a2", 256, []))
    ])
    steps = pd.DataFrame([{"trial_id": t, "step": i, "loss": v} for t in ("t0", "t1", "t2")
                          for i, v in enumerate([4.0, 3.5, 3.0])])
    gates = loss_trajectory_gates(cfg, trials, steps, arms)
    ((name, status, detail),) = [(g.name, g.status, g.detail) for g in gates["a1"]]
    assert (name, status) == ("loss trajectory", "fail")
    assert detail == ("non-finite loss nan at s32 round 0 step 1 where the baseline's is 3.5 "
                      "(and 2 more non-finite step(s))")
    assert [(g.name, g.status) for g in gates["a2"]] == [("work per step", "error"),
                                                        ("loss trajectory", "pass")]
