"""Per-tensor characterisation and the gate's judgement, on numbers worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.spec.config import ToleranceConfig
from orchestrator.analysis.correctness.compare import (
    characterize,
    noise_level_mask,
    relative_series,
    signature_diff,
)
from orchestrator.analysis.correctness.gate import evaluate
from orchestrator.campaign.gate import data_order_declared, load_gates, run_gate, section
from orchestrator.core.errors import ConfigError
from orchestrator.spec.sweep import Arm

TOL = ToleranceConfig(rel_l2=0.2, atol=0.0, rtol=0.1, trajectory_rtol=1e-3, update_rel_l2=0.2)
FP32 = ToleranceConfig(rel_l2=1e-5, atol=1e-9, rtol=1e-4, trajectory_rtol=1e-5,
                       update_rel_l2=1e-3)


def test_characterize_by_hand() -> None:
    a, b = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 2.0, 3.0, 5.0])
    d = characterize("x", a, b, TOL)
    assert d.max_abs == 1.0 and d.max_rel == pytest.approx(0.2)
    assert d.rms_err == pytest.approx(0.5)  # sqrt(1 / 4)
    assert d.rel_l2 == pytest.approx(1 / math.sqrt(39))  # ||(0,0,0,1)|| / ||(1,2,3,5)||
    assert d.cosine == pytest.approx(34 / math.sqrt(30 * 39))
    assert d.share_beyond == 0.25  # only |4 - 5| = 1 > 0.1 * 5
    assert d.passed  # 0.5 <= 0.2 * rms(b) = 0.2 * sqrt(39 / 4) = 0.62
    strict = characterize("x", a, b, ToleranceConfig(0.1, 0.0, 0.1, 1e-3, 0.1))
    assert not strict.passed and "rel_l2 1.60e-01 > 1.0e-01" in strict.why
    # a measured noise floor above the tolerance becomes the threshold
    floored = characterize("x", a, b, ToleranceConfig(0.1, 0.0, 0.1, 1e-3, 0.1), floor_rel_l2=0.2)
    assert floored.passed and floored.threshold_rel_l2 == 0.2


def test_nonfinite_is_located_and_fails_whatever_the_tolerance() -> None:
    a = torch.tensor([float("nan"), 2.0, float("inf"), 4.0])
    d = characterize("grad/w", a, torch.tensor([1.0, 2.0, 3.0, 4.0]), TOL, floor_rel_l2=1e9)
    assert not d.passed and d.nonfinite_variant == 2
    assert d.why == "2 NaN/Inf of 4 where the baseline is finite"
    assert d.rel_l2 == 0.0  # the finite elements agree


def test_shape_mismatch_and_mask() -> None:
    d = characterize("w", torch.zeros(3), torch.zeros(4), TOL)
    assert not d.passed and "shape (3,) != baseline (4,)" in d.why
    g = torch.tensor([1e-12, 1.0, -1.0, 0.5])
    assert noise_level_mask(g, FP32).tolist() == [False, True, True, True]
    upd_b, upd_v = torch.tensor([1.0, 1.0, -1.0, 1.0]), torch.tensor([-1.0, 1.0, -1.0, 1.0])
    masked = characterize("update/w", upd_v, upd_b, FP32, mask=noise_level_mask(g, FP32))
    assert masked.passed and masked.excluded == 1  # the flip sits on a noise-level gradient
    assert not characterize("update/w", upd_v, upd_b, FP32).passed


def test_relative_series_and_signatures() -> None:
    assert relative_series([1.0, 2.0], [1.0, 4.0]) == [0.0, 0.5]
    assert relative_series([float("nan")], [1.0]) == [math.inf]
    assert relative_series([1.0], [1.0, 2.0]) == [0.0, math.inf]
    base = {"w": [[2, 2], "float32"], "b": [[2], "float32"]}
    assert signature_diff(base, base) == []
    compiled = {f"_orig_mod.{k}": v for k, v in base.items()}
    lines = signature_diff(compiled, base)
    assert "2 only in the variant (e.g. _orig_mod.b), 2 only in the baseline" in lines[0]
    assert "save the underlying module" in lines[1]
    other = {"w": [[2, 3], "float32"], "b": [[2], "bfloat16"]}
    assert signature_diff(other, base) == ["b: dtype bfloat16 != baseline float32",
                                           "w: shape [2, 3] != baseline [2, 2]"]


# --------------------------------------------------------------------------- the gate, pure

ARMS = [Arm("a0", "base", None, True), Arm("a1", "var", None, False)]
SIG = {"w": [[2], "float32"]}


def _rec(losses: list[float] | None = None, hashes: list[str] | None = None,
         sig: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    losses = losses or [2.0, 1.9, 1.8, 1.7]
    bucket = {"batch_hashes": hashes or ["h0", "h1", "h2", "h3"], "batch_ids": [0, 1, 2, 3],
              "losses": losses, "round_trip": {"resume_step": 2, "losses": losses[2:]},
              "from_baseline_weights": True, "forward_repeat_rel_l2": 0.0,
              "final_eval_loss": 1.7}
    rec = {"status": "ok", "checkpoint": {"signature": sig or SIG}, "buckets": {"s": bucket},
           "cross_loads": {"a1": {"ok": True, "eval_loss": 1.7}}}
    rec.update(extra)
    return rec


def _tensors(out_scale: float = 1.0) -> dict[str, Any]:
    return {"outputs": torch.tensor([1.0, 2.0, 3.0, 4.0]) * out_scale,
            "loss": torch.tensor([2.0]), "grads": {"w": torch.tensor([0.5, -0.5])},
            "update": {"w": torch.tensor([-1e-3, 1e-3])}, "trajectory": torch.zeros(4)}


def _gate(probes: dict[str, Any], tensors: dict[str, Any], declared: bool = False) -> Any:
    return evaluate(ARMS, probes, lambda name, bucket: tensors.get(name), {"fp32": FP32},
                    "fp32", declared)


def test_noise_floor_sets_the_bar_when_the_device_is_nondeterministic() -> None:
    probes = {"a0": _rec(), "a0-repeat": _rec(), "a1": _rec()}
    tens = {"a0": _tensors(), "a0-repeat": _tensors(1 + 1e-3), "a1": _tensors(1 + 5e-4)}
    summary, (g,) = _gate(probes, tens)
    assert summary["noise_floor"]["s"]["tensors"]["outputs"] == pytest.approx(1e-3, rel=1e-3)
    assert g.status == "pass"
    tens["a1"] = _tensors(1 + 2e-3)
    _, (g,) = _gate(probes, tens)
    assert g.status == "fail"
    assert g.reasons[0].startswith("s outputs: rel_l2 2.00e-03 > 1.0e-03")


def test_data_order_fails_unless_it_is_the_swept_variable() -> None:
    probes = {"a0": _rec(), "a0-repeat": _rec(),
              "a1": _rec(losses=[2.0, 1.95, 1.8, 1.7], hashes=["h1", "h0", "h3", "h2"])}
    tens = {"a0": _tensors(), "a0-repeat": _tensors(), "a1": _tensors()}
    _, (g,) = _gate(probes, tens)
    assert g.status == "fail" and g.reasons[0].startswith("s data: the batch sequence differs")
    assert "loss trajectory: step 1" in g.reasons[1]
    _, (g,) = _gate(probes, tens, declared=True)
    assert g.status == "pass" and g.buckets["s"]["data"]["same_batches"] is False


def test_checkpoint_problems_and_blocked_gates() -> None:
    compiled = {"_orig_mod.w": [[2], "float32"]}
    probes = {"a0": _rec(), "a0-repeat": _rec(cross_loads={"a1": {"ok": False,
                                                                    "error": "Missing key w"}}),
              "a1": _rec(sig=compiled)}
    tens = {"a0": _tensors(), "a0-repeat": _tensors(), "a1": _tensors()}
    _, (g,) = _gate(probes, tens)
    assert g.status == "fail" and g.checkpoint["passed"] is False
    assert "keys differ" in g.reasons[0] and "underlying module" in g.reasons[1]
    assert "does not load into the baseline: Missing key w" in g.reasons[2]
    probes["a1"] = {"status": "unavailable", "error": "needs CUDA"}
    _, (g,) = _gate(probes, tens)
    assert (g.status, g.reasons) == ("error", ["unavailable here: needs CUDA"])
    probes["a1"] = {"status": "unsupported", "error": "the recipe's trainer lacks the hooks"}
    _, (g,) = _gate(probes, tens)
    assert g.status == "error" and g.reasons[0].startswith("the variant cannot be probed")
    probes["a0-repeat"] = {"status": "crashed", "error": "signal SIGKILL"}
    _, (g,) = _gate(probes, tens)
    assert g.status == "error" and "noise floor" in g.reasons[0]


def test_gates_read_back_for_decide_and_mode_off(tmp_path: Path, compose: Any) -> None:
    assert load_gates(tmp_path, ARMS, "once")["a1"][0].status == "error"  # never ran
    assert load_gates(tmp_path, ARMS, "off") == {}
    cfg = compose(["workload=gpt_test", "+sweep=fa2", "protocol.correctness.mode=off"])
    doc = run_gate(cfg, tmp_path, ARMS, [])
    assert doc["mode"] == "off" and not (tmp_path / "correctness").exists()
    assert load_gates(tmp_path, ARMS, "off") == {}
    assert "Off (`protocol.correctness.mode=off`)" in section(tmp_path)[0][1][0]


def test_data_order_declared_from_the_sweep(compose: Any) -> None:
    cfg = compose(["workload=gpt_test", "+sweep=fa2"])
    assert not data_order_declared(cfg)
    cfg = compose(["workload=gpt_test", "+sweep=fa2", "invariants.frozen=[]", "sweep.knob=null",
                   "sweep.variable=workload.data.seed", "sweep.baseline=1", "sweep.values=[2]",
                   "sweep.labels=null", "sweep.fixed={}", "sweep.baseline_label=null"])
    assert data_order_declared(cfg)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["protocol.correctness.mode=sometimes"],
         r"protocol\.correctness\.mode: 'sometimes' is not a valid choice; choose one of: once, off"),
        (["protocol.correctness.steps=1"], r"protocol\.correctness\.steps: must be >= 2"),
        (["protocol.correctness.stpes=3"],
         r"protocol\.correctness\.stpes: unknown key; did you mean protocol\.correctness\.steps\?"),
        (["invariants.tolerances.fp32.rel_l2=-1"],
         r"invariants\.tolerances\.fp32\.rel_l2: must be >= 0"),
        (["workload.precision=bf16", "~invariants.tolerances.bf16"],
         r"invariants\.tolerances: has no entry for workload\.precision=bf16"),
    ],
)
def test_bad_correctness_config_names_the_key(compose: Any, overrides: list[str],
                                              match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose(["workload=gpt_test", "+sweep=fa2", *overrides])


def test_tolerance_for_an_unknown_precision_is_refused(compose: Any) -> None:
    from orchestrator.campaign.validate import validate

    cfg = compose(["workload=gpt_test", "+sweep=fa2"])
    cfg.invariants.tolerances["fp8"] = ToleranceConfig(1.0, 0.0, 0.0, 0.0, 1.0)
    with pytest.raises(ConfigError, match=r"invariants\.tolerances\.fp8: 'fp8' is not a valid "
                       r"choice; choose one of: fp32, tf32, bf16, fp16"):
        validate(cfg)


def test_the_optimizer_update_is_judged_on_its_own_scale() -> None:
    probes = {"a0": _rec(), "a0-repeat": _rec(), "a1": _rec()}
    var = _tensors()
    var["update"] = {"w": torch.tensor([-1e-3, 1e-3]) * (1 + 5e-4)}  # within update_rel_l2 1e-3
    tens = {"a0": _tensors(), "a0-repeat": _tensors(), "a1": var}
    _, (g,) = _gate(probes, tens)
    assert g.status == "pass"
    var["update"] = {"w": torch.tensor([-1e-3, 1e-3]) * 1.1}  # a 10 % larger learning rate
    _, (g,) = _gate(probes, tens)
    assert g.reasons == ["s update/w: rel_l2 1.00e-01 > 1.0e-03 (max_abs 1.00e-04)"]


def test_data_order_sweep_needs_its_invariants_and_then_passes_the_data_check(
        compose: Any, run_dir: Path) -> None:
    """conf/invariants/data_order.yaml: a sweep over workload.data.seed is refused under the
    default invariants; under invariants=data_order it runs, the gate reports the differing
    batch sequence and passes, and which data (kind, file) stays frozen."""
    import json

    from orchestrator.campaign.run import run_campaign

    seed_sweep = ["+sweep=fa2", "sweep.knob=null", "sweep.variable=workload.data.seed",
                  "sweep.baseline=1234", "sweep.values=[99]", "sweep.labels=[reshuffled]",
                  "sweep.fixed={}", "sweep.baseline_label=original"]
    tiny = ["workload=gpt_test", "protocol=quick", "launcher=inline", "protocol.repeats=1",
            "sweep.buckets=[s32]"]
    with pytest.raises(ConfigError, match=r"sweep\.variable: 'workload\.data\.seed' is frozen by "
                       r"invariants \(workload\.data: data order\).*choose invariants=NAME"):
        compose([*tiny, *seed_sweep])
    with pytest.raises(ConfigError, match=r"'workload\.data\.kind' is frozen by invariants "
                       r"\(workload\.data\.kind: which data \(not its order\)\)"):
        compose([*tiny, "invariants=data_order", *seed_sweep[:2], "sweep.variable=workload.data.kind",
                 "sweep.baseline=synthetic", "sweep.values=[text]", *seed_sweep[5:]])
    cfg = compose([*tiny, "invariants=data_order", *seed_sweep])
    assert data_order_declared(cfg)
    result = run_campaign(cfg, run_dir)
    (v,) = result.verdicts
    assert any(r.startswith("correctness gate passed") for r in v.reasons), v.reasons
    doc = json.loads((run_dir / "correctness.json").read_text())
    assert doc["data_order_declared"] is True
    data = doc["arms"][v.arm_id]["buckets"]["s32"]["data"]
    assert data["same_batches"] is False
