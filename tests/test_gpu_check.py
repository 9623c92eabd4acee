"""bench/gpu_check.sh, the GPU evidence run, in its CPU dry run (ORCH_GPU_CHECK_DEVICE=cpu)
the way it runs on a GPU machine without a package registry: a bare interpreter that has torch
and the other packages such a machine has, but not hydra-core, omegaconf, antlr4 or submitit,
which come only from the carried wheels (bench/gpu_wheels.sh; pip --no-index). Every part
runs, every section of the report is written (with the CPU's figures, labelled so), nothing is
left running, and what comes back from a device run ($OUT) is there. Its plan (the parts'
caps) fits the 7 minutes of a device run; the report's figures are checked on hand-made
inputs."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.require import need_files

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
WHEELS = ROOT / "bench" / "wheels"
# what the GPU machine's python lacks (the wheels bring them) and this project's own install
LACKING = ("hydra", "omegaconf", "antlr4", "submitit", "throughput_orchestrator",
           "__editable__", "orchestrator", "recipes")
PARTS = ("env_report", "peak_matmul", "noise", "noise_fit", "simulate", "fa2_tiling", "kernels",
         "client", "process")
DEVICE_RUN_S = 420  # a device run's command time: 7 minutes
BACK = ["decisions.md", "figures.json", "gpu_check_runs.tar.gz", "machine.json",
        "machine_samples.csv", "noise_model.json", "report.md", "simulate.md"]


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, cwd=run_dir, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert proc.stdout.strip() == report.strip()
    assert report.startswith("# gpu_check: all parts ok")
    assert "A dry run on the CPU: every figure below is the CPU's" in report
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()]
    assert [s[0] for s in steps] == [*PARTS, "report"]
    for s in steps:  # each part ok within its limit, and nothing left running
        assert s[1] == "ok" and s[6] == "0", s
        assert float(s[2]) <= float(s[5]) <= float(s[4]), s
    for part in PARTS:
        assert re.search(rf"^\| {part} \| \d+ \| \d+ \| ok \|", report, re.MULTILINE), part
    for heading in ("## The machine, as this check found it", "## The machine over the run",
                    "## Environment", "## Matmul peak", "## The device's own noise",
                    "## A campaign that decides", "## Your trainer on the device",
                    "### by steps through orchestrator.client", "### one arm per process",
                    "## The attention op alone"):
        assert heading in report, heading
    # only the wheels brought what the machine lacked, into the output directory
    machine = json.loads((out / "machine.json").read_text())
    assert sorted(machine["installed_from_wheels"]) == [
        "antlr4-python3-runtime", "hydra-core", "omegaconf", "submitit"]
    assert machine["packages"]["torch"]["from"] == "machine"
    assert machine["packages"]["hydra-core"]["file"].startswith(str(out / "site"))
    assert "fp32: measured" in report and "bf16: measured" in report
    # the machine's samples: the CPU's, every row naming the part that ran
    with (out / "machine_samples.csv").open() as fh:
        samples = list(csv.DictReader(fh))
    assert samples and {"t_s", "part", "load1"} <= set(samples[0])
    assert {"noise", "fa2_tiling"} & {r["part"] for r in samples}
    assert "the CPU's samples (a dry run" in report
    # the noise: 9 fresh trials of the same step, fitted and simulated
    fig = json.loads((out / "figures.json").read_text())
    noise = fig["noise"]
    assert noise["processes"] == 9
    assert noise["arms"] == ["same", "same (A/A control)", "same-again"]
    assert noise["step_sd_log_median"] is not None and noise["process_sd_log"] is not None
    assert noise["timed_by"] == {"host clock": 9}
    from orchestrator.analysis.simulate import NoiseModel

    model = NoiseModel.load(out / "noise_model.json")
    assert model.steps >= 3 and model.step_s > 0
    sims = noise["simulation"]
    assert [re.search(r"pairing=\w+", t["title"]).group(0) for t in sims] == [
        "pairing=process", "pairing=steps"]
    assert all(len(t["rows"]) == 7 and t["rows"][0]["n"] == 10 for t in sims)
    assert "minimum detectable effect" in report and "A/A false decisions" in report
    # the campaign that decides: two tiles against 32x32, paired by steps, the A/A arm run
    tiles = fig["fa2_tiling"]
    assert set(tiles["verdicts"]) == {"64x64", "128x64"} and tiles["aa_control"]
    plan = json.loads((out / "fa2_tiling" / "plan.json").read_text())
    assert plan["pairing"]["mode"] == "steps"
    assert "  - `64x64`: 2x32:tiled-64x64" in report
    # your trainer, both paths, each decided or saying why not
    for name in ("client", "process"):
        assert "more-work-7pct" in fig[name]["verdicts"], name
    assert fig["client"]["aa_control"] and not fig["process"].get("aa_control")
    trainer = report.split("## Your trainer on the device")[1]
    assert trainer.count("decided") >= 2
    # the op alone, per shape and kernel, against the measured peak
    kernels = json.loads((out / "kernels.json").read_text())
    ok = {(r["arm"], r["micro_batch"], r["seq_len"]) for r in kernels["results"]
          if r["status"] == "ok"}
    assert {("fa2 32x32", 2, 32), ("fa2 64x64", 1, 64), ("sdpa math", 2, 32)} <= ok
    assert any(r["status"] == "unavailable" for r in kernels["results"])  # sdpa cudnn here
    assert "| 2x32 | fa2 64x64 | tiled-64x64 |" in report and "of the peak" in report
    # every campaign's decisions.md in one file
    bundle = (out / "decisions.md").read_text()
    for name in ("noise", "fa2_tiling", "client", "process"):
        assert f"# {name}: {name}/decisions.md" in bundle
    assert (out / "hydra").is_dir() and not (run_dir / "outputs").exists()
    # what comes back from a device run: 8 files, one of them the tarball of the run
    # directories (no installed packages, no saved tensors)
    back = Path(env["OUT"])
    assert sorted(p.name for p in back.iterdir()) == BACK
    assert "pairing=process" in (back / "simulate.md").read_text()
    with tarfile.open(back / "gpu_check_runs.tar.gz") as tar:
        names = tar.getnames()
    assert "gpu check/fa2_tiling/decisions.md" in names
    assert "gpu check/noise/trials" in {n.rsplit("/", 2)[0] for n in names if "/trials/" in n}
    assert not any("/site/" in n or n.endswith(".pt") for n in names)


def test_the_parts_caps_fit_a_device_run() -> None:
    """The plan: the caps in the script's PARTS are those of its header's table, and with the
    setup and the copy back they fit the 7 minutes of a device run."""
    text = SCRIPT.read_text()
    parts = dict(p.split(":") for p in
                 re.search(r"^PARTS=\(([^)]*)\)", text, re.MULTILINE | re.DOTALL).group(1).split())
    assert list(parts) == [*PARTS, "report"]
    table = dict(re.findall(r"^#   (\w+)\s+(\d+)\s{2,}", text, re.MULTILINE))
    assert table == parts
    total = sum(int(c) for c in parts.values())
    assert f"#   sum of caps   {total}" in text
    assert total + 20 <= DEVICE_RUN_S  # the setup (seconds) and the copy back
    assert re.search(r"BUDGET_S=\$\{ORCH_GPU_CHECK_BUDGET_S:-420\}", text)


def test_gpu_check_stops_at_once_naming_what_is_missing(tmp_path: Path) -> None:
    """No wheels for what the interpreter lacks, or a package no wheel brings: one line, exit
    2, within seconds, before any part."""
    out = tmp_path / "o"
    env = _check_env(tmp_path, out, wheels=tmp_path / "no wheels")
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert ("cannot import hydra-core omegaconf antlr4-python3-runtime submitit, and "
            "ORCH_GPU_CHECK_WHEELS=") in proc.stderr
    assert "run 'bash bench/gpu_wheels.sh' where pip reaches a registry" in proc.stderr
    assert not (out / "steps.tsv").exists() and time.monotonic() - t0 < 30
    need_files(str(WHEELS / "*.whl"), "bash bench/gpu_wheels.sh (scripts/install_test_deps.sh)")
    sub = tmp_path / "no pandas"
    sub.mkdir()
    env = _check_env(sub, sub / "o", drop=("pandas",))
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "cannot import: pandas (pandas: ModuleNotFoundError" in proc.stderr
    assert not (sub / "o" / "steps.tsv").exists()


def test_gpu_check_refuses_an_unknown_device(tmp_path: Path) -> None:
    env = dict(os.environ, ORCH_GPU_CHECK_DEVICE="tpu", ORCH_GPU_CHECK_OUT=str(tmp_path / "o"))
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: ORCH_GPU_CHECK_DEVICE: 'tpu' is not a valid choice; "
                                   "choose one of: cuda, cpu")
    assert not (tmp_path / "o").exists()


def test_gpu_check_never_empties_a_directory_it_did_not_write(tmp_path: Path) -> None:
    keep = tmp_path / "mine" / "notes.txt"
    keep.parent.mkdir()
    keep.write_text("not a gpu_check output")
    env = dict(os.environ, ORCH_GPU_CHECK_DEVICE="cpu", ORCH_GPU_CHECK_OUT=str(keep.parent))
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2 and "is not empty and not a previous check's output" in proc.stderr
    assert keep.read_text() == "not a gpu_check output"


# ----------------------------------------------------------------------------- the report's figures

SIMULATED = """noise model x: y

adaptive (default: 3 rounds, +2 up to 7), pairing=process, 10 campaigns per cell (0.1 s):
| planted speedup | campaigns | retain | reject | equivalent | inconclusive | invalid | correct | wrong direction | false decision | false equivalent | trials/campaign | simulated s/campaign |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| A/A | 10 | 1 | 0 | 8 | 1 | 0 | 80% | 0 | 1 | 0 | 9.0 | 20 |
| 1.020x | 10 | 5 | 0 | 2 | 3 | 0 | 50% | 0 | 0 | 2 | 12.0 | 25 |
| 0.980x | 10 | 0 | 9 | 0 | 1 | 0 | 90% | 0 | 0 | 0 | 12.0 | 25 |
| 1.050x | 10 | 9 | 0 | 0 | 1 | 0 | 90% | 0 | 0 | 0 | 9.0 | 20 |
| 0.952x | 10 | 0 | 8 | 0 | 2 | 0 | 80% | 0 | 0 | 0 | 9.0 | 20 |
| 1.100x | 10 | 10 | 0 | 0 | 0 | 0 | 100% | 0 | 0 | 0 | 9.0 | 20 |
| 0.909x | 10 | 0 | 10 | 0 | 0 | 0 | 100% | 0 | 0 | 0 | 9.0 | 20 |
"""


def test_the_report_reads_the_simulator_and_finds_the_minimum_detectable_effect() -> None:
    rep = _module("gpu_check_report", ROOT / "bench" / "gpu_check_report.py")
    (table,) = rep.simulation_tables(SIMULATED)
    assert table["title"].startswith("adaptive (default") and len(table["rows"]) == 7
    aa = table["rows"][0]
    assert aa["planted"] == 1.0 and aa["false_decision"] == 1 and aa["equivalent"] == 8
    # 2 %: one direction at 50 %; 5 %: both at >= 80 %
    assert table["mde"] == pytest.approx(0.05, abs=1e-3)
    assert rep.mde([r for r in table["rows"] if abs(r["planted"] - 1) < 0.06]) == \
        pytest.approx(0.05, abs=1e-3)
    assert rep.mde([r for r in table["rows"] if r["planted"] in (1.02, 0.98)]) is None


def test_the_report_summarises_the_samples_per_part() -> None:
    rep = _module("gpu_check_report", ROOT / "bench" / "gpu_check_report.py")
    assert rep.reasons("0x0000000000000004") == ["SwPowerCap"]
    assert rep.reasons("0x41") == ["GpuIdle", "HwThermalSlowdown"]
    assert rep.reasons("[N/A]") == []
    rows = [{"t_s": "0", "part": "noise", "clocks.sm": "1980", "clocks_event_reasons.active": "0x0"},
            {"t_s": "2", "part": "noise", "clocks.sm": "1755", "clocks_event_reasons.active": "0x4"},
            {"t_s": "4", "part": "kernels", "clocks.sm": "[N/A]",
             "clocks_event_reasons.active": "0x1"}]
    s = rep.sample_summary(rows)
    assert s["noise"]["clocks.sm"] == {"min": 1755.0, "median": 1867.5, "max": 1980.0, "n": 2}
    assert s["noise"]["clock_event_reasons"] == ["SwPowerCap"]
    assert "clocks.sm" not in s.get("kernels", {})
    assert s["all"]["clock_event_reasons"] == ["GpuIdle", "SwPowerCap"]


def test_the_report_separates_step_noise_from_process_offsets() -> None:
    """Three processes whose steps alternate 1 % around their own level; the levels 1.00,
    1.02 and 0.99: the step spread is the within-process one, the offsets the levels'."""
    rep = _module("gpu_check_report", ROOT / "bench" / "gpu_check_report.py")
    trials, steps = [], {}
    for i, level in enumerate((1.00, 1.02, 0.99)):
        tid = f"r{i}"
        trials.append({"trial_id": tid, "status": "ok", "arm_label": "same",
                       "timed_by": "device events", "device_host_agreement": 1.5})
        steps[tid] = [{"phase": "measured", "step_time_s": str(0.1 * level * f),
                       "device_time_s": str(0.1 * level * f)}
                      for f in (1.01, 0.99, 1.01, 0.99, 1.0)]
        steps[tid].append({"phase": "warmup", "step_time_s": "9"})
    nf = rep.noise_figures(trials, steps)
    assert nf["processes"] == 3 and nf["timed_by"] == {"device events": 3}
    assert nf["step_time_median_s"] == pytest.approx(0.1, rel=1e-9)
    offsets = nf["process_offsets_log"]
    assert offsets["r0"] == pytest.approx(0.0) and offsets["r1"] == pytest.approx(math.log(1.02))
    assert nf["step_sd_log_median"] == pytest.approx(1.4826 * math.log(1.01), rel=0.01)
    assert nf["device_over_step_median"] == pytest.approx(1.0)
    assert nf["device_host_agreement_median"] == 1.5


def test_the_reaper_ends_only_the_tagged_processes(tmp_path: Path) -> None:
    tag = f"test_{os.getpid()}_{time.monotonic_ns()}"
    code = "import time; time.sleep(60)"
    tagged = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                              env=dict(os.environ, ORCH_GPU_CHECK_TAG=tag))
    kept = subprocess.Popen([sys.executable, "-c", code],
                            env=dict(os.environ, ORCH_GPU_CHECK_TAG=tag))
    other = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.3)
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_run" / "reap.py"), tag,
                               "--keep", str(kept.pid)], capture_output=True, text=True,
                              timeout=30, check=True)
        assert proc.stdout.split() == [str(tagged.pid), "python"] or \
            proc.stdout.split()[0] == str(tagged.pid)
        assert tagged.wait(timeout=10) == -9
        assert kept.poll() is None and other.poll() is None
    finally:
        for p in (tagged, kept, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_the_sampler_writes_the_cpus_figures_per_part(tmp_path: Path) -> None:
    part = tmp_path / "part"
    part.write_text("noise\n")
    out, static = tmp_path / "samples.csv", tmp_path / "static.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_run" / "machine_sampler.py"),
                    "--device", "cpu", "--out", str(out), "--static", str(static),
                    "--part-file", str(part), "--every-s", "0.2", "--max-s", "0.7"],
                   check=True, timeout=30)
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) >= 2 and {r["part"] for r in rows} == {"noise"}
    assert float(rows[0]["load1"]) >= 0
    facts = json.loads(static.read_text())
    assert facts["kind"] == "cpu" and "the CPU's figures" in facts["note"]


def test_the_sampler_keeps_the_fields_its_nvidia_smi_knows() -> None:
    sampler = _module("machine_sampler", ROOT / "bench" / "gpu_run" / "machine_sampler.py")
    help_text = '"clocks.sm" ... "power.draw" ... "clocks_event_reasons.active" ' \
                '"clocks_throttle_reasons.active"'
    assert sampler.known_fields(help_text, sampler.GPU_FIELDS) == [
        "clocks.sm", "power.draw", "clocks_event_reasons.active"]
    assert sampler.known_fields('"clocks_throttle_reasons.active"', sampler.GPU_FIELDS) == [
        "clocks_throttle_reasons.active"]


FAKE_SMI = """#!/bin/sh
# a stand-in for nvidia-smi: the help lists some fields, a query answers one CSV line
case "$1" in
  --help-query-gpu) echo '"name" "driver_version" "clocks.max.sm" "clocks.sm" "power.draw" "temperature.gpu" "clocks_event_reasons.active"' ;;
  --query-gpu=name,driver_version,clocks.max.sm) echo 'NVIDIA H200, 580.159.04, 1980' ;;
  --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active) echo '1980, 41, 312.5, 0x0000000000000004' ;;
  *) echo "unknown: $*" >&2; exit 6 ;;
esac
"""


def test_the_sampler_reads_nvidia_smi_on_a_gpu(tmp_path: Path) -> None:
    """On a GPU: the static facts once, then the clocks, temperature, power and clock-event
    reasons of every sample, those fields its nvidia-smi lists (a stand-in here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    part = tmp_path / "part"
    part.write_text("fa2_tiling\n")
    out, static = tmp_path / "samples.csv", tmp_path / "static.json"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_run" / "machine_sampler.py"),
                    "--device", "cuda", "--out", str(out), "--static", str(static),
                    "--part-file", str(part), "--every-s", "0.2", "--max-s", "0.5"],
                   check=True, timeout=30, env=env)
    facts = json.loads(static.read_text())
    assert facts["name"] == "NVIDIA H200" and facts["driver_version"] == "580.159.04"
    assert facts["sampled_fields"] == ["clocks.sm", "temperature.gpu", "power.draw",
                                       "clocks_event_reasons.active"]
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and rows[0]["clocks.sm"] == "1980" and rows[0]["part"] == "fa2_tiling"
    rep = _module("gpu_check_report", ROOT / "bench" / "gpu_check_report.py")
    s = rep.sample_summary(rows)
    assert s["fa2_tiling"]["power.draw"]["median"] == 312.5
    assert s["fa2_tiling"]["clock_event_reasons"] == ["SwPowerCap"]


@pytest.mark.parametrize("caps", ["noise:abc", "nois:3"])
def test_gpu_check_refuses_caps_it_cannot_read(tmp_path: Path, caps: str) -> None:
    env = dict(os.environ, ORCH_GPU_CHECK_DEVICE="cpu", ORCH_GPU_CHECK_OUT=str(tmp_path / "o"),
               ORCH_GPU_CHECK_CAPS=caps)
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: ORCH_GPU_CHECK_CAPS: '{caps}' is not PART:SECONDS; "
                                   f"parts: {' '.join([*PARTS, 'report'])}")
    assert not (tmp_path / "o").exists()


def test_a_part_past_its_cap_is_stopped_and_the_rest_skipped(run_dir: Path) -> None:
    """env_report capped at 1 s cannot finish (the interpreter and torch alone take longer),
    and a budget of 27 s leaves the parts after it no time: the run says so, part by part,
    writes its report anyway, leaves nothing running and exits 1."""
    need_files(str(WHEELS / "*.whl"), "bash bench/gpu_wheels.sh (scripts/install_test_deps.sh)")
    out = run_dir / "short"
    env = dict(_check_env(run_dir, out), ORCH_GPU_CHECK_CAPS="env_report:1",
               ORCH_GPU_CHECK_BUDGET_S="27")
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, cwd=run_dir, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    steps = {s[0]: s for s in (line.split("\t")
                               for line in (out / "steps.tsv").read_text().splitlines())}
    assert steps["env_report"][1:2] == ["timeout (hit its limit of 1 s)"]
    assert steps["env_report"][4:7] == ["1", "1", "0"]  # cap, limit, nothing left behind
    assert all(steps[p][1] == "skipped" for p in PARTS[1:]), steps
    assert steps["report"][1] == "ok"
    report = (out / "report.md").read_text()
    assert report.startswith(f"# gpu_check: {len(PARTS)} part(s) not ok")
    assert "| env_report | 1 | 1 | timeout (hit its limit of 1 s) |" in report
    assert "| fa2_tiling | 95 | " in report and "| skipped |" in report
    assert "## The device's own noise" in report  # every section, saying what is missing
    assert "- no decisions.jsonl: the campaign did not finish" in report
