"""bench/gpu_check.sh, the prepared GPU check, in its CPU dry run (ORCH_GPU_CHECK_DEVICE=cpu):
every step runs, everything it writes stays under its output directory, and the report names
the verdicts and each MFU's peak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu(run_dir: Path) -> None:
    out = run_dir / "gpu check"  # odd characters: spaces, unicode, a dollar sign
    env = dict(os.environ, ORCH_GPU_CHECK_DEVICE="cpu", ORCH_GPU_CHECK_OUT=str(out),
               ORCH_GPU_CHECK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh")], env=env, cwd=run_dir,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert proc.stdout.strip() == report.strip()
    assert report.startswith("# gpu_check: all steps ok")
    for step in ("env_report", "peak_matmul", "fa2", "fa2_tiling", "compile"):
        assert f"| {step} | ok |" in report, step
    assert "fp32: measured" in report and "bf16: measured" in report
    for name, arms in (("fa2", 4), ("fa2_tiling", 4), ("compile", 2)):
        assert f"## +sweep={name}" in report
        util = json.loads((out / name / "utilization.json").read_text())
        assert {r["bucket"] for r in util["rows"]} == {"s32"} and len(util["rows"]) == arms
        assert len((out / name / "decisions.jsonl").read_text().splitlines()) == arms - 1
    # every MFU figure names its peak, its kind and the peak's figure
    assert "peak `measured`: " in report and "TFLOP/s fp32 (measured" in report
    assert "MFU " in report and "vs `measured` (measured)" in report
    assert "compile time" in report  # the compiled arm's cost
    assert json.loads((out / "environment.json").read_text())["selected_device"]["kind"] == "cpu"
    assert (out / "hydra").is_dir() and not (run_dir / "outputs").exists()


def test_gpu_check_refuses_an_unknown_device(tmp_path: Path) -> None:
    env = dict(os.environ, ORCH_GPU_CHECK_DEVICE="tpu", ORCH_GPU_CHECK_OUT=str(tmp_path / "o"))
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh")], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: ORCH_GPU_CHECK_DEVICE: 'tpu' is not a valid choice; "
                                   "choose one of: cuda, cpu")
    assert not (tmp_path / "o").exists()


def test_gpu_check_never_empties_a_directory_it_did_not_write(tmp_path: Path) -> None:
    keep = tmp_path / "mine" / "notes.txt"
    keep.parent.mkdir()
    keep.write_text("not a gpu_check output")
    env = dict(os.environ, ORCH_GPU_CHECK_DEVICE="cpu", ORCH_GPU_CHECK_OUT=str(keep.parent))
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh")], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "is not empty and not a previous check's output" in proc.stderr
    assert keep.read_text() == "not a gpu_check output"
