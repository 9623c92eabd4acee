"""The command-line tools on sample logs (malformed ones included) and hand-computed MFU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.tools import compute_mfu, summarize_steps

NANOGPT = """\
step 0: train loss 10.9, val loss 10.9
iter 0: loss 10.9, time 2500.00ms, mfu -100.00%
iter 1: loss 9.8, time 110.00ms, mfu 30.00%
iter 2: loss 9.1, time 100.00ms, mfu 31.00%
iter 3: loss 8.7, time 130.00ms, mfu 29.00%
iter 4: loss 8.2, time 120.00ms, mfu 30.50%
"""

JSONL = "\n".join(json.dumps({"step": i, "step_time_ms": t, "tokens": 4096, "samples": 8})
                  for i, t in enumerate([900.0, 100.0, 300.0]))


def _run(capsys: Any, tool: Any, argv: list[str]) -> tuple[int, str, str]:
    rc = tool.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_summarize_nanogpt_log_hand_numbers(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "train.log"
    log.write_text(NANOGPT)
    rc, out, _ = _run(capsys, summarize_steps, [str(log), "--skip-first", "1", "--json"])
    s = json.loads(out)
    assert rc == 0 and s["count"] == 4 and s["first_step"] == 1
    assert s["step_time_mean_s"] == pytest.approx(0.115)
    assert s["step_time_median_s"] == pytest.approx(0.115)
    assert (s["step_time_min_s"], s["step_time_max_s"]) == (pytest.approx(0.1), pytest.approx(0.13))
    # sample std of 110, 100, 130, 120 ms = sqrt(500/3) ms = 12.910 ms
    assert s["step_time_std_s"] == pytest.approx(0.012910, abs=1e-6)
    assert s["step_time_cv"] == pytest.approx(0.012910 / 0.115, rel=1e-4)
    # p10 over sorted 100,110,120,130: rank 0.3 -> 103 ms; p90: rank 2.7 -> 127 ms
    assert s["step_time_p10_s"] == pytest.approx(0.103)
    assert s["step_time_p90_s"] == pytest.approx(0.127)
    assert s["tokens_per_s"] is None and s["log"] == "train.log"


def test_summarize_jsonl_throughput_from_logged_tokens(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "m.jsonl"
    log.write_text(JSONL)
    rc, out, _ = _run(capsys, summarize_steps, [str(log), "--skip-first", "1", "--json"])
    s = json.loads(out)
    assert s["tokens_per_s"] == pytest.approx(2 * 4096 / 0.4)  # total tokens / total time
    assert s["samples_per_s"] == pytest.approx(16 / 0.4) and s["tokens_per_s_source"] == "logged"
    rc, out, _ = _run(capsys, summarize_steps, [str(log)])
    assert rc == 0 and "tokens/s" in out and "median" in out


def test_summarize_custom_pattern_and_key_value(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "c.log"
    log.write_text("it#1 took 0.5 sec\nit#2 took 0.25 sec\n")
    rc, out, _ = _run(capsys, summarize_steps, [
        str(log), "--pattern", r"it#(?P<step>\d+) took (?P<step_time_s>[\d.]+) sec", "--json"])
    assert rc == 0 and json.loads(out)["step_time_mean_s"] == pytest.approx(0.375)
    log.write_text("step=1 loss=3.0 step_time_ms=20 tokens=100\nstep=2 loss=2.9 step_time_ms=30 tokens=100\n")
    rc, out, _ = _run(capsys, summarize_steps, [str(log), "--json"])
    assert json.loads(out)["tokens_per_s"] == pytest.approx(200 / 0.05)


@pytest.mark.parametrize("content,args,match", [
    ("nothing to see here\nloss went down\n", [], "no step lines matched"),
    ("iter 1: loss 2, time 5ms\n", ["--skip-first", "3"], "--skip-first: skips all 1"),
    ("iter 1: loss 2, time 5ms\n", ["--pattern", "(?P<step>\\d+"], "invalid regex"),
    ("iter 1: loss 2, time 5ms\n", ["--pattern", "(?P<step>\\d+)"], "needs a time group"),
    ('{"step": 0, "step_time_ms": 5}\n{"step": 1, "step_time_ms": "n/a"}\n', [],
     "line 2: field 'step_time_ms': 'n/a' is not a number"),
    ('{"step": 1, "step_time_ms": null}\n', [], "line 1: field 'step_time_ms': null is not a number"),
    ("step=1 time=20ms\nstep=2 time=30\n", [], "line 2: field 'time': '30' has no unit; log the unit"),
    ("it 1 took 5 us\n", ["--pattern", "it (?P<step>\\d+) took (?P<time>\\d+) (?P<unit>\\w+)"],
     "line 1: field 'unit': 'us' is not ms or s"),
])
def test_summarize_malformed_input_is_one_line_exit_2(tmp_path: Path, capsys: Any, content: str,
                                                      args: list[str], match: str) -> None:
    log = tmp_path / "bad.log"
    log.write_text(content)
    rc, out, err = _run(capsys, summarize_steps, [str(log), *args])
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and match in err


def test_compute_mfu_names_and_hand_numbers(capsys: Any) -> None:
    base = ["--flops-per-device-step-tflop", "8", "--step-seconds", "0.5",
            "--peak-tflops-per-device", "32"]
    rc, out, _ = _run(capsys, compute_mfu, [*base, "--flops-kind", "useful", "--json"])
    d = json.loads(out)
    assert rc == 0 and d["utilization_name"] == "MFU" and d["utilization"] == pytest.approx(0.5)
    _, out, _ = _run(capsys, compute_mfu, [*base, "--flops-kind", "executed"])
    assert out.startswith("HFU: 50.00% (executed FLOPs")
    _, out, _ = _run(capsys, compute_mfu, [*base, "--flops-kind", "profiler-attributed"])
    assert out.startswith("profiler-attributed utilization: 50.00%") and "MFU" not in out


def test_compute_mfu_mixed_buckets(tmp_path: Path, capsys: Any) -> None:
    # by step weight: (0.75*3 + 0.25*1) TFLOP / (0.75*1 + 0.25*0.5) s / 10 = 2.5/0.875/10
    f = tmp_path / "b.json"
    f.write_text(json.dumps([
        {"name": "short", "flops_per_device_step_tflop": 3, "step_seconds": 1, "step_weight": 0.75},
        {"name": "long", "flops_per_device_step_tflop": 1, "step_seconds": 0.5, "step_weight": 0.25},
    ]))
    rc, out, _ = _run(capsys, compute_mfu, ["--buckets", str(f), "--peak-tflops-per-device", "10",
                                            "--flops-kind", "useful", "--json"])
    d = json.loads(out)
    assert rc == 0 and d["utilization"] == pytest.approx(2.5 / 0.875 / 10)
    assert [b["utilization"] for b in d["buckets"]] == [pytest.approx(0.3), pytest.approx(0.2)]
    # by samples: 300 samples / global batch 100 = 3 steps; 100 samples = 1 step
    # total = 3*2 + 1*4 = 10 TFLOP in 3*1 + 1*1 = 4 s on a 5 TFLOP/s peak = 50 %
    f.write_text(json.dumps({"buckets": [
        {"flops_per_device_step_tflop": 2, "step_seconds": 1, "samples": 300},
        {"flops_per_device_step_tflop": 4, "step_seconds": 1, "samples": 100, "global_batch": 100},
    ]}))
    rc, out, _ = _run(capsys, compute_mfu, ["--buckets", str(f), "--global-batch", "100",
                                            "--peak-tflops-per-device", "5", "--flops-kind", "executed"])
    assert rc == 0 and out.startswith("HFU: 50.00%")


@pytest.mark.parametrize("content,extra,match", [
    ("[", [], "--buckets: not valid JSON"),
    ('[{"flops_per_device_step_tflop": 1, "step_seconds": 1}]', [], "exactly one of step_weight"),
    ('[{"flops_per_device_step_tflop": 1, "step_seconds": 1, "samples": 5}]', [], "global"),
    ('[{"flops_per_device_step_tflop": -1, "step_seconds": 1, "step_weight": 1}]', [],
     "flops_per_device_step_tflop: must be a positive number"),
    # a step share and a sample count in one file: their ratio is meaningless, refused
    (('[{"flops_per_device_step_tflop": 1, "step_seconds": 1, "step_weight": 0.5},'
      ' {"flops_per_device_step_tflop": 2, "step_seconds": 1, "samples": 300}]'),
     ["--global-batch", "100"],
     ("error: --buckets[1]: gives samples but --buckets[0] gives step_weight; step shares and "
      "sample counts cannot be mixed: give every bucket step_weight, or every bucket samples")),
    (('{"buckets": [{"flops_per_device_step_tflop": 1, "step_seconds": 1, "samples": 10, '
      '"global_batch": 5}, {"name": "x", "flops_per_device_step_tflop": 1, "step_seconds": 1, '
      '"step_weight": 1}]}'), [],
     "error: --buckets[1]: bucket 'x' gives step_weight but --buckets[0] gives samples"),
])
def test_compute_mfu_bad_buckets_exit_2(tmp_path: Path, capsys: Any, content: str,
                                        extra: list[str], match: str) -> None:
    f = tmp_path / "b.json"
    f.write_text(content)
    rc, out, err = _run(capsys, compute_mfu, ["--buckets", str(f), "--peak-tflops-per-device", "1",
                                              "--flops-kind", "useful", *extra])
    assert rc == 2 and out == "" and match in err and len(err.strip().splitlines()) == 1


def test_module_clis_exit_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "step_time_ms": "n/a"}\n')
    for argv, match in (
        (["orchestrator.tools.compute_mfu", "--flops-kind", "useful", "--step-seconds", "0",
          "--flops-per-device-step-tflop", "1", "--peak-tflops-per-device", "1"],
         "error: --step-seconds: must be a positive"),
        (["orchestrator.tools.compute_mfu", "--flops-kind", "model"], "invalid choice"),
        (["orchestrator.tools.summarize_steps", str(tmp_path / "missing.log")], "cannot read"),
        (["orchestrator.tools.summarize_steps", str(bad)], "line 1: field 'step_time_ms': 'n/a'"),
    ):
        proc = subprocess.run([sys.executable, "-m", *argv], check=False, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and match in proc.stderr
        assert "Traceback" not in proc.stderr


def _closed_pipe_run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m argv`` with stdout a pipe whose read end is already closed: every write
    to it fails, as after ``| head -1`` has read its line and gone."""
    import os

    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", *argv], check=False, stdout=w,
                              stderr=subprocess.PIPE, text=True, timeout=120, cwd=cwd)
    finally:
        os.close(w)


def test_tools_exit_quietly_when_the_reader_of_stdout_is_gone(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(NANOGPT)
    for argv in (
        ["orchestrator.tools.compute_mfu", "--flops-per-device-step-tflop", "8",
         "--step-seconds", "0.5", "--peak-tflops-per-device", "32", "--flops-kind", "useful"],
        ["orchestrator.tools.summarize_steps", str(log), "--json"],
        # Hydra's own flags only print; Hydra would report the broken pipe as a traceback
        ["orchestrator", "--cfg", "job", "+sweep=fa2"],
    ):
        proc = _closed_pipe_run(argv, tmp_path)
        assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
        assert proc.stderr == "", proc.stderr
        # 141 = 128 + SIGPIPE, what a shell reports for `yes | head -1`; -13: killed by it
        assert proc.returncode in (141, -13), (argv, proc.returncode)


def test_a_real_pipe_into_head(tmp_path: Path) -> None:
    # enough output to fill the pipe after head has read its one line and exited
    f = tmp_path / "b.json"
    f.write_text(json.dumps([{"name": f"b{i}", "flops_per_device_step_tflop": 1, "step_seconds": 1,
                              "step_weight": 1} for i in range(3000)]))
    cmd = (f"{sys.executable} -m orchestrator.tools.compute_mfu --buckets '{f}' "
           "--peak-tflops-per-device 10 --flops-kind useful --json | head -1")
    proc = subprocess.run(["bash", "-c", cmd], check=False, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.stdout == "{\n" and proc.stderr == "", proc.stderr


def _bucket_file(tmp_path: Path, **fields: Any) -> Path:
    f = tmp_path / "buckets.json"
    f.write_text(json.dumps({**fields, "buckets": [
        {"name": "short", "flops_per_device_step_tflop": 3, "step_seconds": 1, "step_weight": 0.75},
        {"name": "long", "flops_per_device_step_tflop": 1, "step_seconds": 0.5, "step_weight": 0.25},
    ]}))
    return f


def test_compute_mfu_takes_peak_and_flops_kind_from_the_bucket_file(tmp_path: Path, capsys: Any) -> None:
    # 2.5 TFLOP per mean step in 0.875 s on a 10 TFLOP/s peak: 2.5 / 0.875 / 10 = 28.57 %
    f = _bucket_file(tmp_path, peak_tflops_per_device=10, flops_kind="executed", peak_kind="measured")
    rc, out, err = _run(capsys, compute_mfu, ["--buckets", str(f), "--json"])
    d = json.loads(out)
    assert rc == 0 and err == "", err
    assert d["flops_kind"] == "executed" and d["utilization_name"] == "HFU"
    assert d["peak_tflops_per_device"] == 10 and d["peak_kind"] == "measured"
    assert d["utilization"] == pytest.approx(2.5 / 0.875 / 10)
    # a flag that says the same as the file is fine
    rc, out, _ = _run(capsys, compute_mfu, ["--buckets", str(f), "--flops-kind", "executed",
                                            "--peak-tflops-per-device", "10.0"])
    assert rc == 0 and out.startswith("HFU: 28.57% (executed FLOPs, relative to a peak of 10 "
                                      "TFLOP/s per device (measured))")
    # the file without them: the flags supply them
    f = _bucket_file(tmp_path)
    rc, out, _ = _run(capsys, compute_mfu, ["--buckets", str(f), "--flops-kind", "useful",
                                            "--peak-tflops-per-device", "10"])
    assert rc == 0 and out.startswith("MFU: 28.57%")


@pytest.mark.parametrize(("fields", "argv", "match"), [
    ({"peak_tflops_per_device": 10, "flops_kind": "useful"}, ["--flops-kind", "executed"],
     ("error: --flops-kind: 'executed' disagrees with flops_kind 'useful' in the --buckets file; "
      "give one of them, or the same value")),
    ({"peak_tflops_per_device": 10, "flops_kind": "useful"}, ["--peak-tflops-per-device", "12"],
     "error: --peak-tflops-per-device: 12 disagrees with peak_tflops_per_device 10 in the --buckets"),
    ({"peak_tflops_per_device": 10}, [],
     "error: --flops-kind: is required: give --flops-kind or flops_kind in the --buckets file"),
    ({"flops_kind": "useful"}, [],
     ("error: --peak-tflops-per-device: is required: give --peak-tflops-per-device or "
      "peak_tflops_per_device in the --buckets file")),
    ({"flops_kind": "model", "peak_tflops_per_device": 10}, [],
     "error: --buckets.flops_kind: 'model' is not a valid choice; choose one of: useful, executed"),
    ({"flops_kind": "useful", "peak_tflops_per_device": "fast"}, [],
     "error: --buckets.peak_tflops_per_device: must be a number, got 'fast'"),
])
def test_compute_mfu_bucket_file_and_flag_conflicts_are_one_line(
    tmp_path: Path, capsys: Any, fields: dict[str, Any], argv: list[str], match: str
) -> None:
    f = _bucket_file(tmp_path, **fields)
    rc, out, err = _run(capsys, compute_mfu, ["--buckets", str(f), *argv])
    assert rc == 2 and out == "", out
    assert err.startswith(match) and len(err.strip().splitlines()) == 1, err


def test_compute_mfu_help_documents_the_bucket_file_fields(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        compute_mfu.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for field in ("flops_per_device_step_tflop", "step_seconds", "step_weight", "samples",
                  "global_batch", "peak_tflops_per_device", "flops_kind", "peak_kind", "name"):
        assert field in out, field
    assert "a flag and the file that disagree are refused" in out


def test_summarize_reports_the_trainers_mfu_labelled_beside_ours(tmp_path: Path, capsys: Any) -> None:
    # NANOGPT after skipping iter 0: mfu 30, 31, 29, 30.5 % -> median (30 + 30.5) / 2 = 30.25 %;
    # step times 110, 100, 130, 120 ms -> median 0.115 s; 2.3 TFLOP per device-step on a
    # 100 TFLOP/s peak: 2.3 / (0.115 * 100) = 20 %
    log = tmp_path / "train.log"
    log.write_text(NANOGPT)
    rc, out, _ = _run(capsys, summarize_steps, [str(log), "--skip-first", "1", "--json",
                                                "--flops-per-device-step-tflop", "2.3",
                                                "--peak-tflops-per-device", "100",
                                                "--peak-kind", "datasheet"])
    s = json.loads(out)
    assert rc == 0 and s["trainer_reported_mfu_median"] == pytest.approx(0.3025)
    assert s["trainer_reported_mfu_label"] == ("trainer-reported mfu (the trainer's own claim; "
                                               "its peak is unknown to us)")
    assert s["mfu"] == pytest.approx(0.20) and s["mfu_step_time_s"] == pytest.approx(0.115)
    assert s["mfu_peak_tflops_per_device"] == 100 and s["mfu_peak_kind"] == "datasheet"
    rc, out, _ = _run(capsys, summarize_steps, [str(log), "--flops-per-device-step-tflop", "2.3",
                                                "--peak-tflops-per-device", "100"])
    text = out.splitlines()
    # iter 0's -100 % (nanoGPT's "not measured yet") is left out, and said so
    assert ("  trainer-reported mfu (the trainer's own claim; its peak is unknown to us): median "
            "30.25% over 4 steps; 1 negative value(s) left out") in text
    # all five steps: 2500, 110, 100, 130, 120 ms -> median 0.120 s; 2.3 / 12 = 19.17 %
    assert ("  MFU 19.17% (ours: 2.3 TFLOP of useful FLOPs per device-step as given, median step "
            "0.120 s, relative to a peak of 100 TFLOP/s per device)") in text
    # no FLOPs or no peak: the trainer's claim alone, and how to get ours
    rc, out, _ = _run(capsys, summarize_steps, [str(log)])
    assert "  MFU: not computed; give --flops-per-device-step-tflop and --peak-tflops-per-device" in out


@pytest.mark.parametrize(("argv", "match"), [
    (["--flops-per-device-step-tflop", "2"],
     "error: --peak-tflops-per-device: is required with --flops-per-device-step-tflop"),
    (["--peak-tflops-per-device", "2"],
     "error: --flops-per-device-step-tflop: is required with --peak-tflops-per-device"),
    (["--flops-per-device-step-tflop", "-1", "--peak-tflops-per-device", "2"],
     "error: --flops-per-device-step-tflop: must be a positive number, got '-1'"),
])
def test_summarize_mfu_arguments_are_checked(tmp_path: Path, capsys: Any, argv: list[str],
                                             match: str) -> None:
    log = tmp_path / "train.log"
    log.write_text(NANOGPT)
    rc, out, err = _run(capsys, summarize_steps, [str(log), *argv])
    assert rc == 2 and out == "" and err.startswith(match), err
