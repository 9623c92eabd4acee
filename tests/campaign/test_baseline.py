"""The baseline ledger end to end: real campaigns on the synthetic workload (a planted 4x
effect retains within a few rounds), promotions with their confirmation campaigns, a sweep
against ``baseline=latest``, ``verify``, every refusal, and a real kill during ``promote
--confirm`` that leaves the ledger unchanged."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.baseline import main as baseline_main
from orchestrator.campaign.run import run_campaign
from orchestrator.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# quick protocol, in-process trials; three rounds to start (with two, one round disturbed by
# another process leaves no interval) and adaptive ones of the same short trials, so a planted
# 4x effect reaches retain on a shared machine
TINY = ["protocol=quick", "launcher=inline", "device=cpu", "protocol.repeats=3",
        "protocol.max_rounds=7", "protocol.warmup_steps=2", "protocol.measured_steps=5",
        "protocol.plan_trial_length=false"]
FAST = ["workload=synthetic", *TINY]
HALF_UNITS = ["+sweep=calibrate", "sweep.variable=workload.units_per_token", "sweep.baseline=1.0",
              "sweep.baseline_label=units-1", "sweep.values=[0.25,4.0]",
              "sweep.labels=[quarter-units,4x-units]"]
LESS_WORK = ["+sweep=calibrate", "sweep.values=[-0.75]", "sweep.labels=[less-work]"]


def cli(ledger: Path, *args: str) -> int:
    return baseline_main(["--baselines-dir", str(ledger), *args])


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def campaign(compose: Any, ledger: Path, run_dir: Path, *overrides: str) -> Any:
    cfg = compose([*FAST, f"baselines_dir={ledger}", *overrides])
    return run_campaign(cfg, run_dir)


@pytest.fixture(scope="module")
def retained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A ledger with v0 and one real campaign against it: quarter-units retained, 4x-units
    rejected. Tests copy what they change."""
    from orchestrator.cli.main import compose

    base = tmp_path_factory.mktemp("retained")
    ledger, run = base / "baselines", base / "outputs" / "units"
    assert cli(ledger, "init", "workload=synthetic") == 0
    # fresh trial processes (launcher=local): the kill test's confirmation takes seconds
    result = campaign(compose, ledger, run, "baseline=latest", *HALF_UNITS, "launcher=local")
    verdicts = {v.label: v.verdict for v in result.verdicts}
    assert verdicts == {"quarter-units": "retain", "4x-units": "reject"}, [
        v.headline for v in result.verdicts]
    return ledger, run


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


# --------------------------------------------------------------------------- bad input


def test_baseline_selection_errors_name_the_key_and_fix(compose: Any, tmp_path: Path) -> None:
    ledger = tmp_path / "baselines"
    with pytest.raises(ConfigError, match=r"^baseline: no baseline ledger for workload "
                       r"'synthetic' .*init workload=synthetic"):
        compose([*FAST, f"baselines_dir={ledger}", "baseline=latest", *LESS_WORK])
    assert cli(ledger, "init", "workload=synthetic") == 0
    assert cli(ledger, "init", "workload=synthetic") == 0  # idempotent: same configuration
    with pytest.raises(ConfigError, match=r"^baseline: 'v9' is not in the ledger of "
                       r"'synthetic'; choose latest or one of: v0"):
        compose([*FAST, f"baselines_dir={ledger}", "baseline=v9", *LESS_WORK])
    with pytest.raises(ConfigError, match=r"^baseline: 'newest' is not a version; use latest"):
        compose([*FAST, f"baselines_dir={ledger}", "baseline=newest", *LESS_WORK])
    # the version's values replace the workload's; a sweep's baseline arm may not change them
    cfg = compose([*FAST, f"baselines_dir={ledger}", "baseline=latest", *LESS_WORK])
    assert cfg.baseline == "v0"
    with pytest.raises(ConfigError, match=r"^sweep\.baseline: sets "
                       r"workload\.extra_work_fraction=0\.1, but baseline v0 has 0\.0; .*"
                       r"set sweep\.baseline=0\.0"):
        compose([*FAST, f"baselines_dir={ledger}", "baseline=latest", *LESS_WORK,
                 "sweep.baseline=0.1"])
    # a v0 with other values is refused, not overwritten
    assert cli(ledger, "init", "workload=synthetic", "workload.matrix_size=16") == 2
    assert cli(ledger, "diff", "v0", "v3", "workload=synthetic") == 2


# --------------------------------------------------------------------------- refusals


@pytest.mark.slow  # the module's retained campaign (about a minute, once)
def test_promote_checks_a_retained_variant(retained: tuple[Path, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    ledger, run = retained
    assert cli(ledger, "promote", str(run)) == 0  # the one retained variant, checked only
    out = capsys.readouterr().out
    assert "'quarter-units': retain" in out and "add --confirm" in out
    assert sorted(p.name for p in (ledger / "synthetic").iterdir()) == ["v0.json"]


@pytest.mark.slow  # the module's retained campaign (about a minute, once)
def test_promote_refuses_a_verdict_other_than_retain(
        retained: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    ledger, run = retained
    assert cli(ledger, "promote", str(run), "--variant", "4x-units") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: verdict: variant '4x-units' was judged reject, not "
                          "retain; only a retained change is promoted") and "\n" not in err
    assert cli(ledger, "promote", str(run), "--variant", "triple") == 2
    assert "error: --variant: 'triple' is not a variant" in capsys.readouterr().err


@pytest.mark.slow  # the module's retained campaign (about a minute, once)
def test_promote_refuses_a_provisional_retain(retained: tuple[Path, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    ledger, run = retained
    cut = _copy(run, tmp_path)
    victim = next(p for p in sorted(cut.glob("trials/*/trial.json"))
                  if json.loads(p.read_text())["arm_label"] == "quarter-units")
    victim.unlink()  # as a campaign killed before its last trial leaves it
    assert cli(ledger, "promote", str(cut), "--variant", "quarter-units") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: verdict: the retain of 'quarter-units' is provisional: 1 of ")
    assert "finish the campaign with resume=copy" in err and "\n" not in err


@pytest.mark.slow  # the module's retained campaign (about a minute, once)
def test_promote_refuses_a_missing_or_failed_gate(retained: tuple[Path, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ledger, run = retained
    cut = _copy(run, tmp_path)
    (cut / "correctness.json").unlink()
    assert cli(ledger, "promote", str(cut)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: correctness: copy has no correctness gate")
    assert "protocol.correctness.mode=once" in err
    doc = {"schema_version": 1, "mode": "once", "arms": {"a1": {
        "status": "fail", "label": "quarter-units",
        "reasons": ["t1k: loss differs by 3.1e-02 (> trajectory_rtol 1e-05)"]}}}
    (cut / "correctness.json").write_text(json.dumps(doc))
    assert cli(ledger, "promote", str(cut)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: correctness: the correctness gate says fail for this "
                          "variant (t1k: loss differs") and "fix the variant" in err


# --------------------------------------------------------------------------- the loop


@pytest.mark.slow
def test_two_promotions_then_a_sweep_against_latest_and_verify(
        compose: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    ledger = tmp_path / "baselines"
    out = tmp_path / "outputs"
    assert cli(ledger, "init", "workload=synthetic") == 0

    # 1. discovery against v0, then a fresh confirmation campaign: v1
    first = campaign(compose, ledger, out / "units", "baseline=latest", *HALF_UNITS)
    assert {v.label: v.verdict for v in first.verdicts}["quarter-units"] == "retain"
    assert json.loads((out / "units" / "lineage.json").read_text())["version"] == "v0"
    assert cli(ledger, "promote", str(out / "units"), "--confirm",
               "--run-dir", str(out / "units-confirm")) == 0
    v1 = json.loads((ledger / "synthetic" / "v1.json").read_text())
    assert v1["parent"] == "v0" and v1["change"]["label"] == "quarter-units"
    assert v1["change"]["overrides"] == {"workload.units_per_token": 0.25}
    assert v1["overrides"]["workload.units_per_token"] == 0.25
    assert [j["role"] for j in v1["justification"]] == ["discovery", "confirmation"]
    assert v1["justification"][1]["run_dir"] == "outputs/units-confirm"
    assert v1["justification"][1]["verdict"] == "retain"
    assert v1["step_speedup"]["low"] > 1 and v1["step_speedup"]["against"] == "v0"
    assert v1["throughput"]["buckets"]["t1k"]["tokens_per_s"] > 0
    assert v1["throughput"]["mixture"]["tokens_per_s"] > 0
    assert v1["fingerprint"]["python"] and v1["fingerprint"]["device_kind"] == "cpu"
    confirm_cfg = json.loads((out / "units-confirm" / "config.json").read_text())
    assert confirm_cfg["baseline"] == "v0" and confirm_cfg["sweep"]["values"] == [0.25]

    # the first campaign was measured against v0: no longer promotable
    assert cli(ledger, "promote", str(out / "units"), "--variant", "quarter-units") == 2
    err = capsys.readouterr().err
    assert ("error: baseline: units was measured against v0, but the ledger's latest is v1; "
            "re-run the sweep with baseline=latest") in err

    # 2. the next hypothesis against v1 (composed: a quarter of the units AND less work), then v2
    second = campaign(compose, ledger, out / "less", "baseline=latest", *LESS_WORK)
    assert second.verdicts[0].verdict == "retain"
    ran = json.loads((out / "less" / "config.json").read_text())
    assert ran["baseline"] == "v1" and ran["workload"]["units_per_token"] == 0.25  # v1's value
    # measured in another environment: refused (a copy with another torch in its fingerprint)
    moved = tmp_path / "elsewhere"
    shutil.copytree(out / "less", moved)
    env = json.loads((moved / "environment.json").read_text())
    env["fingerprint"]["torch"] = "0.0.1"
    (moved / "environment.json").write_text(json.dumps(env))
    capsys.readouterr()
    assert cli(ledger, "promote", str(moved)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: environment: elsewhere was measured in another environment "
                          "than v1 (torch differ)")
    assert cli(ledger, "promote", str(out / "less"), "--confirm",
               "--run-dir", str(out / "less-confirm")) == 0
    v2 = json.loads((ledger / "synthetic" / "v2.json").read_text())
    assert v2["parent"] == "v1" and v2["step_speedup"]["against"] == "v1"
    assert v2["overrides"]["workload.units_per_token"] == 0.25
    assert v2["overrides"]["workload.extra_work_fraction"] == -0.75

    md = (out / "less-confirm" / "decisions.md").read_text()  # ran against v1, before verify
    assert "v0 -> v1 (+quarter-units)" in md and "Cumulative against v0: not measured yet" in md

    # 3. verify: v2 against v0, end to end
    assert cli(ledger, "verify", *FAST, "--run-dir", str(out / "verify")) == 0
    (rec_path,) = (ledger / "synthetic" / "verify").glob("v2-*.json")
    rec = json.loads(rec_path.read_text())
    assert rec["version"] == "v2" and rec["against"] == "v0"
    assert rec["speedup"]["scope"] == "t1k" and rec["speedup"]["low"] > 1
    assert [s["version"] for s in rec["steps"]] == ["v1", "v2"]
    plan = json.loads((out / "verify" / "plan.json").read_text())
    assert [a["overrides"] for a in plan["arms"]] == [
        {"workload.extra_work_fraction": 0.0, "workload.units_per_token": 1.0},
        {"workload.extra_work_fraction": -0.75, "workload.units_per_token": 0.25}]
    capsys.readouterr()
    assert cli(ledger, "show", "workload=synthetic") == 0
    shown = capsys.readouterr().out
    assert "v2 (+less-work)  parent=v1" in shown
    assert "Cumulative, measured end to end (v2 against v0): **" in shown
    assert cli(ledger, "log") == 0 and "verify " in capsys.readouterr().out
    assert cli(ledger, "diff", "v0", "v2") == 0
    assert capsys.readouterr().out.splitlines() == [
        "workload.extra_work_fraction: 0.0 -> -0.75", "workload.units_per_token: 1.0 -> 0.25"]

    # 4. any sweep against baseline=latest runs on v2 and shows the lineage
    with pytest.raises(ConfigError, match=r"sweep\.baseline: sets workload\.extra_work_fraction"
                       r"=0\.0, but baseline v2 has -0\.75"):
        compose([*FAST, f"baselines_dir={ledger}", "baseline=latest", *LESS_WORK])
    campaign(compose, ledger, out / "matrix", "baseline=latest", "+sweep=calibrate",
             "sweep.variable=workload.matrix_size", "sweep.baseline=32", "sweep.values=[24]",
             "sweep.labels=[m24]", "sweep.baseline_label=m32")
    ran = json.loads((out / "matrix" / "config.json").read_text())
    assert ran["baseline"] == "v2" and ran["workload"]["extra_work_fraction"] == -0.75
    md = (out / "matrix" / "decisions.md").read_text()
    assert "## Baseline lineage" in md
    assert "v0 -> v1 (+quarter-units) -> v2 (+less-work)" in md
    assert "Cumulative, measured end to end (v2 against v0)" in md
    html = (out / "matrix" / "summary.html").read_text()
    assert "Baseline lineage" in html and "v0 -&gt; v1 (+quarter-units) -&gt; v2" in html
    assert (out / "matrix" / "plots" / "lineage.png").stat().st_size > 0
    for text in [p.read_text() for p in (ledger / "synthetic").rglob("*.json")]:
        assert str(tmp_path) not in text  # run dirs relative to the project directory


# --------------------------------------------------------------------------- a kill


@pytest.mark.slow
def test_kill_during_promote_confirm_leaves_the_ledger_unchanged(
        retained: tuple[Path, Path], tmp_path: Path) -> None:
    src_ledger, run = retained
    ledger = _copy(src_ledger, tmp_path)
    before = snapshot(ledger)
    confirm_dir = tmp_path / "confirm"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logfile = tmp_path / "promote.log"
    with open(logfile, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.baseline", "--baselines-dir", str(ledger),
             "promote", str(run), "--confirm", "--run-dir", str(confirm_dir)],
            cwd=tmp_path, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # killed mid-campaign: once the confirmation has recorded its first trial
        deadline = time.monotonic() + 300
        while not list(confirm_dir.glob("trials/*/trial.json")):
            assert proc.poll() is None, logfile.read_text()
            assert time.monotonic() < deadline, "the confirmation campaign never started"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (confirm_dir / "decisions.jsonl").exists()  # it really died mid-campaign
    assert snapshot(ledger) == before  # no v1, no temporary file, nothing rewritten
    assert cli(ledger, "show", "workload=synthetic") == 0


# --------------------------------------------------------------------------- does not repeat


@pytest.mark.slow
def test_a_change_that_does_not_repeat_stays_experimental(
        compose: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "effect-gone"
    monkeypatch.setenv("ORCH_TEST_FICKLE_MARKER", str(marker))
    ledger = tmp_path / "baselines"
    assert cli(ledger, "init", "workload=synthetic") == 0
    found = campaign(compose, ledger, tmp_path / "fickle", "baseline=latest", "+sweep=calibrate",
                     "sweep.variable=workload.recipe", "sweep.baseline=synthetic",
                     "sweep.baseline_label=synthetic", "sweep.values=[tests.helpers.fickle:build]",
                     "sweep.labels=[fickle]")
    assert found.verdicts[0].verdict == "retain"
    marker.write_text("")  # the confirmation campaign finds no effect
    before = snapshot(ledger)
    capsys.readouterr()
    assert cli(ledger, "promote", str(tmp_path / "fickle"), "--confirm",
               "--run-dir", str(tmp_path / "fickle-confirm")) == 1
    out = capsys.readouterr().out
    assert out.startswith("not promoted: the confirmation campaign") and "experimental" in out
    after = snapshot(ledger)
    (new,) = set(after) - set(before)
    assert new.startswith("synthetic/experimental/v0+fickle-") and set(before) <= set(after)
    rec = json.loads(after[new])
    assert rec["status"] == "experimental" and rec["on_top_of"] == "v0"
    assert rec["why"].startswith("did not repeat: variant 'fickle' was judged ")
    assert rec["justification"][0]["verdict"] == "retain"
    assert rec["justification"][1]["verdict"] != "retain"
    assert cli(ledger, "log") == 0
    assert "experimental (on top of v0): +fickle: did not repeat" in capsys.readouterr().out
