"""Profiled trials in a campaign, and the system/kernel layers' honest degradation."""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.platform import device as devmod
from orchestrator.campaign.run import run_campaign
from orchestrator.core.convert import to_dict
from orchestrator.core.errors import BackendUnavailable, ConfigError
from orchestrator.worker.profile import tools
from orchestrator.worker.trial import TrialSpec, run_trial
from tests.conftest import TINY

TWO_ARMS = [*TINY, "+sweep=fa2", "sweep.buckets=[s32]",
            "sweep.values=[{backend:sdpa,sdpa_kernel:flash}]", "sweep.labels=[flash]",
            "hardware=measured", "hardware.calibration_size=256", "hardware.calibration_min_s=0.05"]


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(run_dir.glob("trials/*/trial.json"))]


def test_profiled_trials_leave_timed_statistics_unchanged(
    compose: Any, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_campaign(compose(TWO_ARMS), run_dir)
    results_off = (run_dir / "results.csv").read_text()
    baseline_off = json.loads((run_dir / "baseline.json").read_text())
    verdicts_off = (run_dir / "decisions.jsonl").read_text().splitlines()
    md = (run_dir / "decisions.md").read_text()
    assert "## Profiles" not in md
    # hardware=measured: MFU only against the peak calibrated on the spot, labelled so
    util = json.loads((run_dir / "utilization.json").read_text())
    assert [(p["label"], p["kind"]) for p in util["peaks"]] == [("measured", "measured")]
    assert util["peaks"][0]["peak_tflops"] > 0
    assert "relative to a **measured** peak" in md and "datasheet" not in md.split(
        "## Utilization")[1].split("\n## ")[0]
    import pandas as pd

    res = pd.read_csv(run_dir / "results.csv")
    assert set(res["peak_kind_measured"]) == {"measured"} and res["mfu_vs_measured"].gt(0).all()
    measured_peak = util["peaks"][0]["peak_tflops"]

    # same run dir with profiling on: timed trials are complete (resume), profiled ones run
    run_campaign(compose([*TWO_ARMS, "profile=framework"]), run_dir)
    assert (run_dir / "results.csv").read_text() == results_off
    assert json.loads((run_dir / "baseline.json").read_text()) == baseline_off
    strip = [{k: v for k, v in json.loads(x).items() if k != "decided_at"} for x in verdicts_off]
    assert strip == [{k: v for k, v in json.loads(x).items() if k != "decided_at"}
                     for x in (run_dir / "decisions.jsonl").read_text().splitlines()]

    prof = [r for r in _records(run_dir) if r["kind"] == "profile"]
    assert {r["arm_label"] for r in prof} == {"sdpa-math", "flash"}
    fw = run_dir / "profiles" / "framework"
    pa_by_label: dict[str, float] = {}
    for r in prof:
        assert r["status"] == "ok" and r["layer"] == "framework" and r["phases_ok"]
        tdir = run_dir / "trials" / r["trial_id"]
        assert not (tdir / "steps.csv").exists()  # profiled times never look like timed ones
        assert (tdir / "profile_steps.csv").is_file()
        with gzip.open(fw / f"{r['trial_id']}.pt.trace.json.gz", "rt") as fh:
            trace = json.load(fh)
        assert "host_name" not in trace and "traceName" not in trace
        assert any(e.get("name", "").startswith("phase/forward") for e in trace["traceEvents"])
        s = json.loads((fw / f"{r['trial_id']}.summary.json").read_text())
        names = set(s["phases"])
        assert {"data", "forward", "backward", "clip", "optimizer", "unattributed"} <= names
        total = sum(p["time_s"] for p in s["phases"].values())
        assert total == pytest.approx(s["trace_step_s"], rel=1e-6)
        assert s["phase_check"]["ok"] and s["phase_check"]["tolerance"] == 0.10
        assert s["steps_in_trace"] == 3 and s["top_ops"]
        # each FLOP figure labelled by its kind, the profiler's with its coverage
        useful, pa = s["flops"]["useful"], s["flops"]["profiler_attributed"]
        assert useful["kind"] == "useful" and useful["per_step"] > 0
        assert pa["kind"] == "profiler-attributed" and pa["per_step"] > 0
        assert pa["utilization_name"] == "profiler-attributed utilization"
        assert 0 < pa["coverage_time"] < 1 and pa["coverage_time_basis"] == "cpu"
        assert pa["ratio_to_useful"] == pytest.approx(pa["per_step"] / useful["per_step"])
        assert r["profiler_attributed_flops_per_step"] == pa["per_step"]
        pa_by_label[r["arm_label"]] = pa["per_step"]
    assert (fw / "diff-s32-a1.csv").is_file()
    from orchestrator.report.plots import load_phases  # the summary report reads the phases

    assert set(load_phases(run_dir)) == {"sdpa-math", "flash"}
    md = (run_dir / "decisions.md").read_text()
    assert "## Profiles" in md and "| phase | sdpa-math | flash |" in md
    assert "profiler overhead (profiled / timed)" in md and "vs `sdpa-math`" in md
    # profiler FLOPs over the timed median step, against the Utilization section's peak; the
    # figure is named "profiler-attributed utilization", never MFU
    profiles = md.split("## Profiles")[1]
    timed = {row["arm_label"]: row["step_time_median_s"] for _, row in res.iterrows()}
    for label, per_step in pa_by_label.items():
        line = next(x for x in profiles.splitlines() if x.startswith(f"- `{label}`: useful"))
        assert "**profiler-attributed**" in line and "MFU" in line  # "(not MFU)"
        u = per_step / (timed[label] * measured_peak * 1e12)
        assert f"profiler-attributed utilization (not MFU): {u * 100:.3g}% vs `measured` " \
               "(measured peak" in line, (line, u)

    # the system layer on a machine without msys/nsys: recorded, not fatal
    cfg = compose([*TWO_ARMS, "profile=system"])
    monkeypatch.setenv("PATH", str(run_dir))  # nothing executable here
    run_campaign(cfg, run_dir)
    sysrec = [r for r in _records(run_dir) if r.get("layer") == "system"]
    assert len(sysrec) == 2 and {r["status"] for r in sysrec} == {"unavailable"}
    assert "msys" in sysrec[0]["error"] and "not found on PATH" in sysrec[0]["error"]
    assert (run_dir / "results.csv").read_text() == results_off
    md = (run_dir / "decisions.md").read_text()
    assert "Layer `system`" in md and "**unavailable**" in md
    # vendor reports cannot be sanitized: the default moves them out, and says so
    assert "cannot be sanitized" in md and "sanitize.keep_vendor_reports=true" in md
    assert "## Failed trials" not in md


def _spec(compose: Any, tmp: Path, layer: str, **profile: Any) -> TrialSpec:
    cfg = compose([*TINY, "+sweep=fa2", f"profile={layer}",
                   *([f"profile.kernel_filter={profile.pop('kernel_filter')}"]
                     if "kernel_filter" in profile else [])])
    settings = {**to_dict(cfg.profile), **profile, "layer": layer,
                "out_dir": str(tmp / "profiles" / layer)}
    return TrialSpec(trial_id=f"prof-{layer}", trial_dir=str(tmp / "trials" / layer),
                     bucket=to_dict(cfg.workload.buckets[0]), arm_id="a0", arm_label="base",
                     is_baseline=True, round=-1, position=0, workload=to_dict(cfg.workload),
                     device="cpu", warmup_steps=1, measured_steps=3, kind="profile",
                     profile=settings)


def test_compute_layer_unavailable_on_cpu_and_refuses_unfiltered(compose: Any,
                                                                 tmp_path: Path) -> None:
    rec = run_trial(_spec(compose, tmp_path, "compute", kernel_filter="gemm"))
    assert rec["status"] == "unavailable" and "cpu device" in rec["error"]
    with pytest.raises(ConfigError, match=r"profile\.kernel_filter: required for profile=compute"):
        compose([*TINY, "+sweep=fa2", "profile=compute"])
    with pytest.raises(ValueError, match="refusing an unfiltered kernel capture"):
        tools.kernel_command("ncu", "/x/ncu", tmp_path / "r", " ", 0, 5, ["python"])
    cmd = tools.kernel_command("ncu", "/x/ncu", tmp_path / "r", "gemm", 2, 5, ["python", "t.py"])
    assert cmd[1:7] == ["--kernel-name", "regex:gemm", "--launch-skip", "2", "--launch-count", "5"]
    assert cmd[-2:] == ["python", "t.py"]
    with pytest.raises(BackendUnavailable, match="mcu not found on PATH"):
        tools.find_tool("compute", "musa", which=lambda name: None)


def test_cli_refuses_unfiltered_kernel_capture_with_exit_2() -> None:
    out = subprocess.run([sys.executable, "-m", "orchestrator", "+sweep=fa2", "profile=compute"],
                         check=False, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: profile.kernel_filter: required")
    assert len(out.stderr.strip().splitlines()) == 1


def test_system_layer_wraps_a_bounded_run(compose: Any, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in ``nsys`` on PATH (records its arguments, runs the wrapped command, writes a
    report file): checks our wrapper's command line, bounds and bookkeeping, not nsys."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nsys"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$FAKE_NSYS_ARGS"\n'
                    'while [ "$1" != "-o" ]; do shift; done; shift; out="$1"; shift\n'
                    '"$@"; rc=$?; echo report > "$out.nsys-rep"; exit $rc\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NSYS_ARGS", str(tmp_path / "args.txt"))
    rec = run_trial(_spec(compose, tmp_path, "system", system_steps=2))
    assert rec["status"] == "ok", rec
    assert rec["tool"] == "nsys" and rec["artifacts"] == ["profiles/system/prof-system.nsys-rep"]
    args = (tmp_path / "args.txt").read_text().split("\n")
    assert args[:2] == ["profile", "--trace=osrt"]  # CPU device: OS runtime only
    inner = json.loads((tmp_path / "trials" / "system" / "inner" / "trial.json").read_text())
    assert inner["status"] == "ok" and inner["layer"] == "bounded" and inner["steps_run"] == 1 + 2


def test_profiler_activities_through_the_device_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    cpu = devmod.DeviceInfo("cpu", None, "cpu", 1)
    assert devmod.profiler_activities_for(cpu) == [torch.profiler.ProfilerActivity.CPU]
    # torch_musa: ProfilerActivity.MUSA is PrivateUse1; it records where Kineto supports it
    fake_activity = SimpleNamespace(CPU="CPU", PrivateUse1="PrivateUse1", MUSA="PrivateUse1")
    fake_torch = SimpleNamespace(profiler=SimpleNamespace(
        ProfilerActivity=fake_activity, supported_activities=lambda: {"CPU", "PrivateUse1"}))
    monkeypatch.setattr(devmod, "_torch", lambda: fake_torch)
    monkeypatch.setattr(devmod, "musa_module", lambda: SimpleNamespace())
    musa = devmod.DeviceInfo("musa", 0, "MTT S4000", 1)
    assert devmod.profiler_activities_for(musa) == ["CPU", "PrivateUse1"]
    monkeypatch.setattr(devmod, "musa_module", lambda: None)
    with pytest.raises(BackendUnavailable, match="needs torch_musa"):
        devmod.profiler_activities_for(musa)
    fake_torch.profiler.ProfilerActivity = SimpleNamespace(CPU="CPU")
    with pytest.raises(BackendUnavailable, match="no ProfilerActivity.CUDA"):
        devmod.profiler_activities_for(devmod.DeviceInfo("cuda", 0, "gpu", 1))
