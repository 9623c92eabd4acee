"""Trace analysis on traces the tests build: a hand-made one with figures worked out by hand
(CUDA and MUSA names, a collective overlapping compute), and a real torch.profiler trace."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orchestrator.analysis.profile import trace_stats as A
from orchestrator.analysis.profile import patterns
from orchestrator.core import phases
from orchestrator.analysis.profile.diff import diff_frames, diff_traces
from orchestrator.analysis.profile.trace import events_frame, load_trace, save_trace


def X(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args: Any) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": args}


def device_trace(launch: str = "cudaLaunchKernel", comm: str = "ncclDevKernel_AllReduce",
                 gemm: str = "sm90_gemm", gemm_us: float = 40.0) -> dict:
    """One 100 us step: host phases, and on the device a gemm [10, 10+gemm_us), a collective
    [30, 70) overlapping it, a copy [80, 90) and idle elsewhere."""
    return {"host_name": "secret-host", "traceName": "/home/someone/tmp.json", "traceEvents": [
        X("ProfilerStep#7", 0, 100, cat="user_annotation"),
        X(phases.DATA, 0, 10, cat="user_annotation"),
        X(phases.FORWARD, 10, 30, cat="user_annotation"),
        X(phases.BACKWARD, 40, 40, cat="user_annotation"),
        X(phases.OPTIMIZER, 80, 15, cat="user_annotation"),
        X("aten::mm", 11, 8), X(launch, 12, 3, cat="cuda_runtime"),
        X("aten::item", 85, 4), X("cudaStreamSynchronize", 86, 2, cat="cuda_runtime"),
        X(gemm, 10, gemm_us, cat="kernel", tid=7),
        X(comm, 30, 40, cat="kernel", tid=8),
        X("Memcpy DtoH (Device -> Pageable)", 80, 10, cat="gpu_memcpy", tid=7),
        {"ph": "i", "name": "[memory]", "cat": "cpu_instant_event", "ts": 15, "pid": 1, "tid": 1,
         "args": {"Total Allocated": 1000, "Device Type": 1}},
        {"ph": "i", "name": "[memory]", "cat": "cpu_instant_event", "ts": 50, "pid": 1, "tid": 1,
         "args": {"Total Allocated": 3000, "Device Type": 1}},
    ]}


def test_patterns_cover_cuda_and_musa_names() -> None:
    for name in ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "mcclKernel_AllReduce_Sum_bf16",
                 "gloo:all_reduce", "c10d::allreduce_"):
        assert patterns.classify(name) == patterns.COMMUNICATION, name
    assert patterns.classify("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy") == patterns.MEMORY
    assert patterns.classify("aten::copy_") == patterns.MEMORY
    assert patterns.classify("aten::broadcast_tensors") == patterns.COMPUTE
    assert patterns.classify("ampere_bf16_s16816gemm") == patterns.COMPUTE
    assert all(patterns.is_launch(n) for n in
               ("cudaLaunchKernel", "musaLaunchKernel", "cuLaunchKernel", "muLaunchKernel"))
    assert not patterns.is_launch("cudaMemcpyAsync")
    assert patterns.is_device_sync("musaStreamSynchronize")
    assert patterns.is_device_sync("cudaDeviceSynchronize")
    assert patterns.is_host_readback("aten::_local_scalar_dense")


@pytest.mark.parametrize(("launch", "comm"), [("cudaLaunchKernel", "ncclDevKernel_AllReduce"),
                                              ("musaLaunchKernel", "mcclKernel_AllReduce")])
def test_hand_made_device_trace(launch: str, comm: str) -> None:
    df = events_frame(device_trace(launch, comm))
    steps = A.step_windows(df)
    assert steps["step"].tolist() == [7] and steps["dur"].tolist() == [100]

    pb = A.phase_breakdown(df, steps).set_index("phase")
    assert pb.loc["forward", "time_us"] == 30 and pb.loc["backward", "share"] == 0.4
    assert pb.loc[phases.UNATTRIBUTED, "time_us"] == 5  # 95..100
    check = A.phase_sum_check(pb.reset_index(), 0.10)
    assert check["ok"] and check["covered"] == pytest.approx(0.95)

    t = A.temporal_breakdown(df, steps)
    # comm [30,70) wins over compute where they overlap; compute [10,30); copy [80,90)
    assert t["timeline"] == "device"
    assert (t["communication_us"], t["compute_us"], t["memory_us"]) == (40, 20, 10)
    assert t["idle_us"] == 30 and t["comm_overlap_us"] == 20
    assert t["comm_overlap_share"] == pytest.approx(20 / 60)

    gaps = A.host_gaps(df, steps, min_gap_us=5)
    assert gaps["applicable"] and gaps["gaps_per_step"] == 3  # [0,10), [70,80), [90,100)
    assert gaps["idle_us_per_step"] == 30

    sync = A.synchronisations(df).set_index("name")
    assert sync.loc["aten::item", "phase"] == "optimizer"
    assert sync.loc["cudaStreamSynchronize", "count"] == 1

    mem = A.memory_by_phase(df).set_index("phase")["peak_allocated_bytes"]
    assert mem["forward"] == 1000 and mem["backward"] == 3000

    ops = A.op_breakdown(df).set_index("name")
    assert ops.loc[comm, "category"] == patterns.COMMUNICATION
    assert ops.loc["sm90_gemm", "self_us_per_step"] == 40


def test_self_times_subtract_direct_children() -> None:
    df = events_frame({"traceEvents": [
        X("aten::linear", 0, 10), X("aten::addmm", 1, 6), X("aten::copy_", 2, 2),
        X("aten::relu", 12, 3), X("other_thread", 0, 5, tid=2)]})
    ops = A.host_ops(df)
    self_us = dict(zip(ops["name"], A.self_times(ops)))
    assert self_us == {"aten::linear": 4, "aten::addmm": 4, "aten::copy_": 2, "aten::relu": 3,
                       "other_thread": 5}


def test_trace_diff_and_sanitized_save(tmp_path: Path) -> None:
    base, var = device_trace(gemm_us=40), device_trace(gemm="sm90_gemm_v2", gemm_us=10)
    pb = save_trace(base, tmp_path / "b.json.gz")
    pv = save_trace(var, tmp_path / "v.json.gz")
    with gzip.open(pb, "rt") as fh:
        raw = fh.read()
    assert "secret-host" not in raw and "/home/someone" not in raw
    d = diff_traces(pb, pv)
    ops = {r["name"]: r for r in d["ops"]}
    assert ops["sm90_gemm"]["change"] == "removed" and ops["sm90_gemm"]["delta_us"] == -40
    assert ops["sm90_gemm_v2"]["change"] == "added" and ops["sm90_gemm_v2"]["delta_us"] == 10
    assert d["ops"][0]["name"] == "sm90_gemm"  # largest change first
    # compute shrinks from [10,30) to [10,20) (the collective owns [30,70) either way)
    assert d["temporal_delta"]["compute_us"] == -10 and d["temporal_delta"]["idle_us"] == 10
    assert load_trace(pb)["traceEvents"][0]["name"] == "ProfilerStep#7"


def test_per_rank_skew() -> None:
    r0 = events_frame(device_trace())
    slow = device_trace()
    slow["traceEvents"][0]["dur"] = 125
    out = A.per_rank({0: r0, 1: events_frame(slow)}).set_index("rank")
    assert out.loc[1, "skew_vs_fastest"] == pytest.approx(1.25)
    assert out.loc[1, "idle_us"] == 55


def _real_trace(tmp_path: Path, hidden: int) -> Path:
    """A real torch.profiler trace of a small MLP step, phases marked like a recipe."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from orchestrator.core.phases import BACKWARD, DATA, FORWARD, OPTIMIZER, phase

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, hidden), torch.nn.ReLU(),
                            torch.nn.Linear(hidden, 4))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    path = tmp_path / f"real{hidden}.json"
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(4):
            assert phase(DATA) is not None
            with phase(DATA):
                x = torch.randn(64, 32)
            with phase(FORWARD):
                loss = m(x).square().mean()
            with phase(BACKWARD):
                loss.backward()
            with phase(OPTIMIZER):
                opt.step()
                opt.zero_grad()
            prof.step()
    return path


def test_real_profiler_trace_phases_and_diff(tmp_path: Path) -> None:
    from contextlib import nullcontext

    from orchestrator.core.phases import FORWARD, phase

    assert isinstance(phase(FORWARD), nullcontext)  # outside a profiler: a no-op
    small = events_frame(load_trace(_real_trace(tmp_path, 16)))
    big = events_frame(load_trace(_real_trace(tmp_path, 256)))
    steps = A.step_windows(small)
    assert len(steps) == 2
    pb = A.phase_breakdown(small, steps).set_index("phase")
    assert (pb.loc[["data", "forward", "backward", "optimizer"], "time_us"] > 0).all()
    named = pb.drop(index=["step", phases.UNATTRIBUTED])["time_us"].sum()
    assert named <= pb.loc["step", "time_us"]
    check = A.phase_sum_check(pb.reset_index(), 0.5)
    assert check["ok"], check
    ops = A.op_breakdown(small, len(steps))
    assert "aten::addmm" in set(ops["name"])
    assert ops["share"].sum() == pytest.approx(1.0)
    t = A.temporal_breakdown(small, steps)
    assert t["timeline"] == "host" and t["compute_us"] > 0
    assert not A.host_gaps(small, steps)["applicable"]
    d = diff_frames(small, big)
    assert {r["phase"] for r in d["phases"]} >= {"forward", "backward", "step"}
    assert isinstance(pd.DataFrame(d["ops"]), pd.DataFrame) and len(d["ops"]) > 0


def test_profiles_section_names_flop_kinds_and_hides_moved_vendor_reports(tmp_path: Path) -> None:
    """Pure formatting: profiler-attributed FLOPs over the timed step against the section's
    peak, never called MFU; vendor reports get no dead link unless they are kept."""
    from types import SimpleNamespace

    from orchestrator.worker.profile.framework import flops_summary
    from orchestrator.analysis.profile.sections import flops_lines, profile_section
    from orchestrator.analysis.utilization import PeakSummary

    prof = {"flops_per_step": 3e9, "steps": 2, "by_op": {"aten::mm": 3}, "coverage_time": 0.5,
            "time_basis": "cpu", "definition": "d"}
    s = {"flops": flops_summary(prof, 2e9)}
    assert s["flops"]["useful"] == {"kind": "useful", "per_step": 2e9,
                                    "definition": s["flops"]["useful"]["definition"]}
    assert s["flops"]["profiler_attributed"]["ratio_to_useful"] == 1.5
    peak = PeakSummary("measured", "measured", "fp32", "cpu", 0.1, "calibration", None)
    # 3 GFLOP / (0.5 s x 0.1 TFLOP/s) = 6 %
    lines = flops_lines([("base", s)], [0.5], [peak])
    assert "not an MFU" in lines[0]
    assert lines[-1] == ("- `base`: useful (analytic) 2 GFLOP/step; **profiler-attributed** 3 "
                         "GFLOP/step (1.5x useful), ops with a profiler FLOP formula: 50% of cpu "
                         "op time; profiler-attributed utilization (not MFU): 6% vs `measured` "
                         "(measured peak, 0.1 TFLOP/s fp32)")
    none = flops_lines([("base", {"flops": flops_summary(None, 2e9)})], [0.5], [peak])
    assert none[-1:] == [("- `base`: useful (analytic) 2 GFLOP/step; profiler-attributed FLOPs "
                          "not counted (profile.with_flops=false)")]

    arm = SimpleNamespace(arm_id="a0", label="base")
    rec = {"kind": "profile", "layer": "system", "bucket": "s32", "arm_id": "a0", "status": "ok",
           "trial_id": "p", "artifacts": ["profiles/system/p.nsys-rep"]}
    moved = "\n".join(profile_section(tmp_path, "system", ["s32"], [arm], [rec], {}))
    assert "`p.nsys-rep` (moved to the private store)" in moved and "](" not in moved
    assert "cannot be sanitized" in moved
    kept = "\n".join(profile_section(tmp_path, "system", ["s32"], [arm], [rec], {},
                                     keep_vendor_reports=True))
    assert "[p.nsys-rep](profiles/system/p.nsys-rep)" in kept and "unsanitized" in kept
