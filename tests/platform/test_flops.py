"""FLOP kinds and utilization: hand-worked numbers, and the analytic count checked against
real dispatch counts of real GPT training steps."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.platform import device as devmod
from orchestrator.platform.flops import (
    BucketWork,
    bucket_steps,
    count_executed_flops,
    mixture_utilization,
    profile_trainer_flops,
    utilization,
    utilization_name,
)
from orchestrator.analysis.utilization import campaign_utilization, utilization_section

# analytic (useful) vs dispatch (executed) on the GPT without recompute must agree this closely
AGREEMENT = 1e-3


def test_public_worked_example() -> None:
    # 8 PFLOP useful and 10 PFLOP executed in a window with 16 PFLOP of capacity: 50 % / 62.5 %
    assert utilization(8e15, 1.0, 16_000) == pytest.approx(0.5)
    assert utilization(10e15, 1.0, 16_000) == pytest.approx(0.625)
    assert utilization(2e12, 0.5, 8.0) == pytest.approx(0.5)


def test_names_follow_the_flop_kind() -> None:
    assert utilization_name("useful") == "MFU"
    assert utilization_name("executed") == "HFU"
    assert utilization_name("profiler-attributed") == "profiler-attributed utilization"
    with pytest.raises(ValueError, match="unknown FLOP kind"):
        utilization_name("model")
    with pytest.raises(ValueError, match="step time"):
        utilization(1.0, 0.0, 1.0)


def test_mixture_is_total_flops_over_total_time() -> None:
    # bucket a: 3 TFLOP in 1 s, 1 step share; bucket b: 1 TFLOP in 1 s, 3 step shares
    # total = 3 + 3 = 6 TFLOP in 4 s = 1.5 TFLOP/s; peak 10 -> 15 %; the mean of the bucket
    # figures (30 % and 10 %) would say 20 %
    buckets = [BucketWork("a", 3e12, 1.0, 1.0), BucketWork("b", 1e12, 1.0, 3.0)]
    flops, t, u = mixture_utilization(buckets, 10.0)
    assert (flops, t) == (6e12, 4.0)
    assert u == pytest.approx(0.15)
    assert bucket_steps(samples=96, global_batch=32) == 3.0
    assert bucket_steps(weight=0.25) == 0.25
    with pytest.raises(ValueError, match="global batch"):
        bucket_steps(samples=10)


def _trainer(overrides: list[str], bucket: int = 1) -> Any:
    from orchestrator.cli.main import compose
    from recipes.gpt.recipe import build

    cfg = compose(["workload=gpt_test", "+sweep=fa2", *overrides])
    return build(cfg.workload, cfg.workload.buckets[bucket], "cpu")


def _count(trainer: Any) -> Any:
    batch = next(trainer.batches())
    trainer.train_step(batch)  # first step outside the count (lazy init)
    return count_executed_flops(lambda: trainer.train_step(batch))


@pytest.mark.parametrize("backend", ["eager", "sdpa-math"])
def test_analytic_useful_matches_dispatch_count_without_recompute(backend: str) -> None:
    attn = (["workload.model.attention.backend=eager"] if backend == "eager" else
            ["workload.model.attention.backend=sdpa", "workload.model.attention.sdpa_kernel=math"])
    for bucket in (0, 1):
        tr = _trainer(attn, bucket)
        ex = _count(tr)
        useful = tr.useful_flops_per_step()
        assert abs(ex.flops - useful) <= AGREEMENT * useful, (bucket, ex.flops, useful)
        assert 0 < ex.coverage_time < 1 and 0 < ex.coverage_ops < 1
        assert set(ex.by_op) >= {"aten.mm", "aten.addmm", "aten.bmm"}
        assert any("layer_norm" in op for op in ex.uncovered_ops)  # honest: no formula
        assert not any("layer_norm" in op for op in ex.by_op)
        assert ex.uncovered_top and not any(op in ex.by_op for op, _ in ex.uncovered_top)


def test_flash_sdpa_backward_recomputes_the_scores() -> None:
    # CPU flash SDPA: torch has no formula for it; we supply one. Its backward recomputes
    # QK^T, so executed exceeds useful by exactly one score matmul per layer.
    tr = _trainer(["workload.model.attention.backend=sdpa", "workload.model.attention.sdpa_kernel=auto"])
    ex = _count(tr)
    m, b = tr.workload.model, tr.bucket
    one_score_matmul = 2 * b.micro_batch * b.seq_len**2 * m.d_model * m.n_layer
    assert ex.flops - tr.useful_flops_per_step() == one_score_matmul


def test_activation_checkpointing_executes_more_than_useful() -> None:
    plain = _trainer(["workload.model.attention.backend=eager"])
    ckpt = _trainer(["workload.model.attention.backend=eager",
                     "workload.model.activation_checkpointing=true"])
    assert ckpt.useful_flops_per_step() == plain.useful_flops_per_step()  # recompute excluded
    ex = _count(ckpt)
    recompute = ckpt.recompute_flops_per_step()
    assert recompute > 0 and plain.recompute_flops_per_step() == 0
    assert ex.flops > ckpt.useful_flops_per_step()
    assert ex.flops == ckpt.useful_flops_per_step() + recompute


def test_profiler_attributed_flops_from_a_separate_run() -> None:
    tr = _trainer(["workload.model.attention.backend=eager"])
    ex = _count(tr)
    prof = profile_trainer_flops(tr, devmod.resolve("cpu"), steps=2, warmup=1)
    # the matmul families agree with the dispatch count; the profiler adds elementwise add/mul
    for op in ("mm", "addmm", "bmm"):
        assert prof.by_op[f"aten::{op}"] / prof.steps == ex.by_op[f"aten.{op}"]
    assert prof.flops_per_step > ex.flops
    assert prof.time_basis == "cpu" and 0 < prof.coverage_time < 1


def _analysis() -> Any:
    arms = [SimpleNamespace(arm_id="a0", label="base"), SimpleNamespace(arm_id="a1", label="var")]
    t = {("s1", "a0"): 1.0, ("s2", "a0"): 2.0, ("s1", "a1"): 0.5, ("s2", "a1"): 1.0}
    summaries = {k: SimpleNamespace(step_time_median_s=v, useful_flops_per_step=None)
                 for k, v in t.items()}
    return SimpleNamespace(arms=arms, buckets=["s1", "s2"], summaries=summaries,
                           bucket_weights={"s1": 0.5, "s2": 0.5})


def _record(bucket: str, arm: str, measured: float) -> dict[str, Any]:
    useful = {"s1": 2e12, "s2": 6e12}[bucket]
    return {
        "status": "ok", "kind": "timed", "bucket": bucket, "arm_id": arm,
        "flops": {"useful_per_step": useful, "executed_per_step": useful * 1.5,
                  "useful_definition": "u", "executed_definition": "e",
                  "executed_coverage_time": 0.5},
        "matmul_dtype": "bf16", "matmul_dtype_why": "bf16 autocast",
        "peaks": [
            {"label": "measured", "kind": "measured", "dtype": "bf16", "hardware": "x",
             "peak_tflops": measured, "source": "calibration", "reason": None},
            {"label": "auto", "kind": "datasheet", "dtype": "bf16", "hardware": "y",
             "peak_tflops": None, "source": "registry", "reason": "device 'y' is not in the registry"},
        ],
    }


def test_campaign_utilization_hand_numbers() -> None:
    records = [_record(b, a, p) for (b, a), p in zip(
        [("s1", "a0"), ("s2", "a0"), ("s1", "a1"), ("s2", "a1")], [9.0, 10.0, 11.0, 10.0])]
    records.append({"status": "failed", "bucket": "s1", "arm_id": "a1", "flops": float("nan")})
    peaks, rows = campaign_utilization(records, _analysis())
    by = {p.label: p for p in peaks}
    assert by["measured"].peak_tflops == 11.0  # the best of the trials' measured peaks
    assert by["measured"].spread_tflops == (9.0, 11.0)
    assert by["auto"].peak_tflops is None and "not in the registry" in (by["auto"].note or "")
    r = {(x.bucket, x.arm_id): x for x in rows}
    # base s1: 2 TFLOP / (1 s x 11 TFLOP/s); HFU 1.5x that; the unknown device gives None
    assert r[("s1", "a0")].mfu["measured"] == pytest.approx(2 / 11)
    assert r[("s1", "a0")].hfu["measured"] == pytest.approx(3 / 11)
    assert r[("s1", "a0")].mfu["auto"] is None
    # base mixture: (0.5*2 + 0.5*6) TFLOP / (0.5*1 + 0.5*2) s / 11 = 4 / 1.5 / 11
    assert r[("mixture", "a0")].mfu["measured"] == pytest.approx(4 / 1.5 / 11)
    # variant twice as fast: twice the MFU
    assert r[("mixture", "a1")].mfu["measured"] == pytest.approx(2 * 4 / 1.5 / 11)
    md = "\n".join(utilization_section(records, peaks, rows))
    assert "relative to a **measured** peak" in md
    # a missing peak still says its kind, entry and source beside the reason
    assert "peak `auto` (datasheet entry `y`, bf16): **none** — device 'y' is not in the " \
           "registry; source: registry" in md
    assert "| MFU vs measured (measured) | HFU vs measured (measured) | MFU vs auto (datasheet) |" in md
    assert "| mixture | var |" in md
