"""Every command-line tool's numeric flags are finite and in range, and a directory flag is no
file: one line naming the flag, exit code 2, nothing written (issue 51). Each refusal comes
before any work, so these call the entry points in this process, in a scratch directory."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.autopilot import entry as autopilot_entry
from orchestrator.cli.bisect import entry as bisect_entry
from orchestrator.cli.check import entry as check_entry
from orchestrator.tools import compute_mfu, summarize_steps
from tests.helpers.launching import in_dir


def refused(run: Callable[[Sequence[str]], int], argv: Sequence[str], flag: str, cwd: Path,
            capsys: Any, match: str = "") -> str:
    """``run(argv)`` in ``cwd`` exits 2 with one line naming ``flag`` and writes nothing."""
    before = sorted(p.name for p in cwd.iterdir())
    with in_dir(cwd):
        try:
            rc = run(list(argv))
        except SystemExit as exc:  # argparse's own refusals (not a number at all)
            rc = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, (argv, rc, err)
    assert len(err) == 1 and err[0].startswith("error: ") and flag in err[0], (argv, err)
    assert match in err[0], (argv, err)
    assert "Traceback" not in err[0]
    assert sorted(p.name for p in cwd.iterdir()) == before, f"{argv} wrote into {cwd}"
    return err[0]


BISECT = ["workload=command_busy", "--good", "HEAD~2", "--bad", "HEAD"]
CHECK = ["workload=command_busy", "--base", "HEAD~1", "--head", "HEAD"]


def test_bisect_retries_is_refused_out_of_range_before_any_campaign(
        tmp_path: Path, capsys: Any) -> None:
    """A billion retries ran a whole campaign and then died in paired.interval."""
    line = refused(bisect_entry, [*BISECT, "--retries", "1000000000"], "--retries", tmp_path,
                   capsys)
    assert line == ("error: --retries: must be <= 10 (each retry is a campaign, and splits the "
                    "error rate further), got 1000000000; give an integer in [0, 10]")
    for value in ("11", "-1"):
        refused(bisect_entry, [*BISECT, "--retries", value], "--retries", tmp_path, capsys)
    refused(bisect_entry, [*BISECT, "--retries", "nan"], "--retries", tmp_path, capsys,
            "invalid int value")


@pytest.mark.parametrize("value,match", [
    ("nan", "must be a positive number, got nan"),
    ("inf", "must be a positive number, got inf"),
    ("-0.1", "must be a positive number"),
    ("2", "must be at most 1 (a slowdown of 100 %, twice the time), got 2.0"),
    ("1e308", "must be at most 1"),
])
def test_check_and_bisect_margin_is_finite_and_at_most_one(
        tmp_path: Path, capsys: Any, value: str, match: str) -> None:
    refused(check_entry, [*CHECK, "--margin", value], "--margin", tmp_path, capsys, match)
    refused(bisect_entry, [*BISECT, "--margin", value], "--margin", tmp_path, capsys, match)


def test_check_dir_naming_a_file_is_one_line(tmp_path: Path, capsys: Any) -> None:
    """It was a 25-line FileExistsError traceback, after composing and checking git."""
    f = tmp_path / "results.txt"
    f.write_text("mine")
    line = refused(check_entry, [*CHECK, "--dir", str(f)], "--dir", tmp_path, capsys)
    assert line == f"error: --dir: {f} is a file, not a directory; choose another --dir"
    refused(check_entry, [*CHECK, "--dir", str(f / "sub")], "--dir", tmp_path, capsys,
            "which is a file, not a directory")
    refused(bisect_entry, [*BISECT, "--dir", str(f)], "--dir", tmp_path, capsys,
            "is a file, not a directory; give a directory")
    refused(bisect_entry, [*BISECT, "--dir", str(f / "sub")], "--dir", tmp_path, capsys,
            "which is a file, not a directory")
    refused(autopilot_entry, ["workload=gpt_tiny", "--dir", str(f)], "--dir", tmp_path, capsys)
    assert f.read_text() == "mine"


@pytest.mark.parametrize("flag,value,match", [
    ("--max-campaigns", "0", "must be >= 1, got 0"),
    ("--max-campaigns", "1000000000", "must be <= 1000 (a thousand campaigns)"),
    ("--budget-min", "nan", "must be a positive number, got nan"),
    ("--budget-min", "inf", "must be a positive number, got inf"),
    ("--budget-min", "1e308", "must be at most 10080 (a week)"),
    ("--min-effect", "inf", "must be a positive number"),
    ("--min-effect", "100", "must be at most 10"),
])
def test_autopilot_budget_flags_are_finite_and_in_range(
        tmp_path: Path, capsys: Any, flag: str, value: str, match: str) -> None:
    refused(autopilot_entry, ["workload=gpt_tiny", flag, value], flag, tmp_path, capsys, match)


def test_tools_numeric_flags_are_finite_and_in_range(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"step {i} | time 10.0 ms\n" for i in range(5)))
    s = summarize_steps.main
    refused(s, [str(log), "--skip-first", "10000000000"], "--skip-first", tmp_path, capsys,
            "must be <= 1000000000")
    refused(s, [str(log), "--tokens-per-step", str(10**16)], "--tokens-per-step", tmp_path,
            capsys, "must be <= 1000000000000000")
    refused(s, [str(log), "--flops-per-device-step-tflop", "1e308",
                "--peak-tflops-per-device", "100"], "--flops-per-device-step-tflop", tmp_path,
            capsys, "must be at most 1e+09")
    refused(s, [str(log), "--flops-per-device-step-tflop", "1",
                "--peak-tflops-per-device", "inf"], "--peak-tflops-per-device", tmp_path, capsys)
    m = compute_mfu.main
    one = ["--flops-per-device-step-tflop", "1", "--peak-tflops-per-device", "100",
           "--flops-kind", "useful"]
    refused(m, [*one, "--step-seconds", "1e308"], "--step-seconds", tmp_path, capsys,
            "must be at most 604800 (a week)")
    refused(m, ["--flops-per-device-step-tflop", "1", "--step-seconds", "1",
                "--peak-tflops-per-device", "1e300", "--flops-kind", "useful"],
            "--peak-tflops-per-device", tmp_path, capsys, "must be at most 1e+06")
    buckets = tmp_path / "buckets.json"
    for field, value, extra in (("step_weight", "NaN", {}), ("samples", "Infinity", {}),
                                ("samples", "-1", {}), ("global_batch", "0", {"samples": 8})):
        b = {"name": "s1", "flops_per_device_step_tflop": 1, "step_seconds": 1, **extra}
        text = json.dumps({"buckets": [b]})[:-3] + f', "{field}": {value}}}]}}'
        buckets.write_text(text)
        refused(m, ["--buckets", str(buckets), "--peak-tflops-per-device", "100",
                    "--flops-kind", "useful"], f"--buckets[0].{field}", tmp_path, capsys)
    refused(m, ["--buckets", str(buckets), "--peak-tflops-per-device", "100", "--flops-kind",
                "useful", "--global-batch", "nan"], "--global-batch", tmp_path, capsys)
