"""bench/gpu_check.sh, the prepared GPU check, in its CPU dry run (ORCH_GPU_CHECK_DEVICE=cpu)
the way it runs on a GPU machine without a package registry: a bare interpreter that has torch
and the other packages such a machine has, but not hydra-core, omegaconf, antlr4 or submitit,
which come only from the carried wheels (bench/gpu_wheels.sh; pip --no-index). Every step
runs, everything it writes stays under its output directory, the report names the verdicts,
each MFU's peak, what each arm ran and the attention op's TFLOP/s, and what comes back from a
device run ($OUT) is there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.helpers.require import need_files

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "bench" / "wheels"
# what the GPU machine's python lacks (the wheels bring them) and this project's own install
LACKING = ("hydra", "omegaconf", "antlr4", "submitit", "throughput_orchestrator",
           "__editable__", "orchestrator", "recipes")


def _bare_python(tmp: Path, drop: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """(interpreter, site): a fresh venv without pip or packages, and a folder standing in for
    the GPU machine's own site-packages: this venv's packages less LACKING (and ``drop``), by
    symbolic link. The interpreter sees them only through PYTHONPATH, which reads no .pth file,
    so the project's editable install is not among them either."""
    bare = tmp / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True,
                   capture_output=True, timeout=120)
    import torch

    packages = Path(torch.__file__).resolve().parents[1]
    site = tmp / "machine site"
    site.mkdir()
    for entry in packages.iterdir():
        name = entry.name.lower()
        if name.startswith(LACKING + drop) or name.endswith(".pth"):
            continue
        (site / entry.name).symlink_to(entry)
    return bare / "bin" / "python", site


def _check_env(tmp: Path, out: Path, drop: tuple[str, ...] = (), wheels: Path = WHEELS
               ) -> dict[str, str]:
    py, site = _bare_python(tmp, drop)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    back = tmp / "back"  # the device tool's folder that comes back
    back.mkdir()
    return dict(env, ORCH_GPU_CHECK_DEVICE="cpu", ORCH_GPU_CHECK_OUT=str(out),
                ORCH_GPU_CHECK_PYTHON=str(py), ORCH_GPU_CHECK_WHEELS=str(wheels),
                PYTHONPATH=str(site), OUT=str(back))


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu_from_the_wheels(run_dir: Path) -> None:
    need_files(str(WHEELS / "*.whl"), "bash bench/gpu_wheels.sh (scripts/install_test_deps.sh)")
    out = run_dir / "gpu check"  # odd characters: spaces, unicode, a dollar sign
    env = _check_env(run_dir, out)
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh")], env=env, cwd=run_dir,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert proc.stdout.strip() == report.strip()
    assert report.startswith("# gpu_check: all steps ok")
    for step in ("env_report", "peak_matmul", "fa2_tiling", "fa2", "compile"):
        assert f"| {step} | ok |" in report, step
    # only the wheels brought what the machine lacked, into the output directory
    machine = json.loads((out / "machine.json").read_text())
    assert sorted(machine["installed_from_wheels"]) == [
        "antlr4-python3-runtime", "hydra-core", "omegaconf", "submitit"]
    assert machine["packages"]["torch"]["from"] == "machine"
    assert machine["packages"]["hydra-core"]["file"].startswith(str(out / "site"))
    assert "- installed from the carried wheels (" in report and "hydra-core 1." in report
    assert "fp32: measured" in report and "bf16: measured" in report
    for name, arms in (("fa2", 6), ("fa2_tiling", 4), ("compile", 2)):
        assert f"## +sweep={name}" in report
        util = json.loads((out / name / "utilization.json").read_text())
        assert {r["bucket"] for r in util["rows"]} == {"s32"} and len(util["rows"]) == arms
        assert len((out / name / "decisions.jsonl").read_text().splitlines()) == arms - 1
    # every MFU figure names its peak, its kind and the peak's figure
    assert "peak `measured`: " in report and "TFLOP/s fp32 (measured" in report
    assert "MFU " in report and "vs `measured` (measured)" in report
    assert "compile time" in report  # the compiled arm's cost
    # what ran: the CPU's tiles are the PyTorch reference's; fa2's triton arm ran the Triton
    # kernel in the interpreter, flash_attn is unavailable here; the op alone in TFLOP/s
    assert "  - `64x64`: 2x32:tiled-64x64" in report
    assert "  - `triton`: 2x32:triton-64x64-w4s2" in report
    assert "`flash_attn`: unavailable: flash_attn is not importable here" in report
    alone = report.split("## Attention alone")[1]
    assert "s32 `32x32`: " in alone and "s32 `triton`: " in alone and "TFLOP/s" in alone
    assert json.loads((out / "environment.json").read_text())["selected_device"]["kind"] == "cpu"
    assert (out / "hydra").is_dir() and not (run_dir / "outputs").exists()
    # what comes back from a device run: the report, the machine facts, the steps and one
    # tarball of the run directories (no installed packages, no saved tensors)
    back = Path(env["OUT"])
    assert sorted(p.name for p in back.iterdir()) == [
        "gpu_check_runs.tar.gz", "machine.json", "report.md", "steps.tsv"]
    with tarfile.open(back / "gpu_check_runs.tar.gz") as tar:
        names = tar.getnames()
    assert "gpu check/fa2_tiling/decisions.md" in names
    assert not any("/site/" in n or n.endswith(".pt") for n in names)


def test_gpu_check_stops_at_once_naming_what_is_missing(tmp_path: Path) -> None:
    """No wheels for what the interpreter lacks, or a package no wheel brings: one line, exit
    2, within seconds, before any step."""
    out = tmp_path / "o"
    env = _check_env(tmp_path, out, wheels=tmp_path / "no wheels")
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert ("cannot import hydra-core omegaconf antlr4-python3-runtime submitit, and "
            "ORCH_GPU_CHECK_WHEELS=") in proc.stderr
    assert "run 'bash bench/gpu_wheels.sh' where pip reaches a registry" in proc.stderr
    assert not (out / "steps.tsv").exists() and time.monotonic() - t0 < 30
    need_files(str(WHEELS / "*.whl"), "bash bench/gpu_wheels.sh (scripts/install_test_deps.sh)")
    sub = tmp_path / "no pandas"
    sub.mkdir()
    env = _check_env(sub, sub / "o", drop=("pandas",))
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "cannot import: pandas (pandas: ModuleNotFoundError" in proc.stderr
    assert not (sub / "o" / "steps.tsv").exists()


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
