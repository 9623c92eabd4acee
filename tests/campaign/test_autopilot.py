"""The autopilot end to end on gpt_test: real profiles, campaigns and confirmations in a process
of its own, two iterations, a SIGKILL in the middle of the first campaign and the resume; the
budget stop, the refusal of other settings, and the sweep's baseline moved to the version."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.autopilot import entry
from orchestrator.campaign.autopilot import rebase
from orchestrator.cli.baseline import main as baseline_main
from orchestrator.spec.ledger import Ledger

# v0: the tiled FlashAttention-2 kernel with 8x8 tiles, so attention is most of the step and
# the fused kernels win by several times
V0 = ["workload=gpt_test", "workload.model.attention.backend=tiled",
      "workload.model.attention.block_q=8", "workload.model.attention.block_k=8"]
# quick protocol with the direction check, more measured steps than its 3 (a 2-core machine shared with other jobs);
# a trial disturbed by another process is not run again (keeps the test's length bounded);
# two rounds (CI time: the verdicts may then be inconclusive, which the tests allow)
PROTO = ["protocol=quick", "protocol.repeats=2", "protocol.max_rounds=2",
         "protocol.measured_steps=8", "protocol.interference_retries=0",
         "protocol.direction_check=true", "device=cpu"]


def _tile_sweeps(root: Path) -> Path:
    """Two user sweeps over the tile shape, one variant each (two arms per campaign): both
    address the attention share; the autopilot moves their baseline to the version's tile."""
    d = root / "conf"
    (d / "sweep").mkdir(parents=True)
    for name, tile in (("tile64", 64), ("tile32", 32)):
        (d / "sweep" / f"{name}.yaml").write_text(
            "defaults:\n  - /schema/sweep/sweep@_here_\n  - _self_\n"
            f"name: {name}\nhypothesis: fewer, larger tiles cut the loop overhead\n"
            "evidence: [attention_share]\nmicrobench: attention\nvariable: tile\n"
            "knob: {block_q: workload.model.attention.block_q, "
            "block_k: workload.model.attention.block_k}\n"
            "fixed: {workload.model.attention.backend: tiled}\n"
            f"baseline: {{block_q: 8, block_k: 8}}\nbaseline_label: 8x8\n"
            f"values: [{{block_q: {tile}, block_k: {tile}}}]\nlabels: [{tile}x{tile}]\n",
            encoding="utf-8")
    return d


def _state(auto: Path) -> dict[str, Any]:
    try:
        return json.loads((auto / "autopilot.json").read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return {}


def _steps(auto: Path) -> dict[str, dict[str, Any]]:
    return {s["key"]: s for s in _state(auto).get("steps", [])}


@pytest.mark.slow
def test_two_iterations_end_to_end_survive_a_kill(tmp_path: Path) -> None:
    assert baseline_main(["--baselines-dir", str(tmp_path / "baselines"), "init", *V0]) == 0
    auto = tmp_path / "auto"
    # the profiles record one step, without the FLOP window (the 8x8 tiles' thousands of small
    # ops made each profiled trial 10 to 16 s), and the trials run inside the autopilot's own
    # process, which is killed and run again (a trial process's start is the launchers' tests')
    cmd = [sys.executable, "-m", "orchestrator.autopilot", "workload=gpt_test", *PROTO,
           "profile.active_steps=1", "profile.with_flops=false", "launcher=inline",
           "--baselines-dir", str(tmp_path / "baselines"), "--dir", str(auto),
           "--max-campaigns", "2", "--sweeps", str(_tile_sweeps(tmp_path)),
           "--only", "tile64,tile32"]
    # first invocation: killed (SIGKILL, no clean-up) once the first campaign has trials
    proc = subprocess.Popen(cmd, cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            st = _steps(auto).get("it1/campaign")
            if st and st["status"] == "started" and len(list(
                    auto.glob("it1-*/trials/*/trial.json"))) >= 4:
                break
            assert proc.poll() is None, "the autopilot ended before the kill"
            time.sleep(0.2)
        else:
            pytest.fail("the first campaign never started")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed = _steps(auto)
    assert killed["it1/campaign"]["status"] == "started"
    profile_started = killed["it1/profile"]["started_at"]

    # second invocation, same arguments: resumes inside the first campaign
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900,
                       check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    steps = _steps(auto)
    state = _state(auto)
    assert state["invocations"] == 2
    assert steps["it1/profile"]["started_at"] == profile_started  # not run again
    assert steps["it1/profile"]["resumed"] == 0
    assert steps["it1/campaign"]["resumed"] == 1 and steps["it1/campaign"]["status"] == "done"
    log = (Path(steps["it1/campaign"]["result"]["path"]) / "campaign.log").read_text()
    assert "planned trials already complete" in log  # the trials before the kill were kept
    # the attention share of 8x8 tiles puts an attention sweep first (tile32 before tile64 on
    # a tie: by name)
    assert steps["it1/advise"]["result"]["top"] == "tile32"
    assert "attention is" in steps["it1/advise"]["result"]["summary"]
    # two iterations, each with a finished campaign with verdicts
    for k in ("it1", "it2"):
        c = steps[f"{k}/campaign"]
        assert c["status"] == "done" and c["result"]["verdicts"], c
        assert (Path(c["result"]["path"]) / "decisions.md").is_file()
    assert "campaign budget spent: 2 of 2" in state["stopped"]["reason"] \
        or "no sweep left to run" in state["stopped"]["reason"]
    ledger = Ledger(tmp_path / "baselines", "gpt_test")
    promoted = [s for s in steps.values() if s["kind"] == "confirm"
                and s["result"].get("promoted")]
    # every promotion is a version in the ledger, and the next iteration ran against it
    assert [v.id for v in ledger.versions()] == ["v0", *[s["result"]["promoted"]
                                                        for s in promoted]]
    first = steps.get("it1/confirm")
    if first and first["result"].get("promoted"):  # promoted after it1: it2 runs against it
        assert steps["it1/campaign"]["result"].get("retained")
        assert steps["it2/campaign"]["against"] == "v1"
        assert steps["it2/profile"]["result"]["run_dir"].endswith("it2-profile")
    else:  # v0 again (nothing retained, or the confirmation did not agree): the sweep it ran
        # is not run twice against it
        assert steps["it2/campaign"]["against"] == "v0"
        assert steps["it2/campaign"]["result"]["sweep"] == "tile64"
    # each campaign's decisions.md carries the direction check of the tile's microbenchmark
    md1 = (Path(steps["it1/campaign"]["result"]["path"]) / "decisions.md").read_text()
    assert "## Direction check" in md1
    md = (auto / "decisions.md").read_text()
    assert "| it1/campaign | v0 | done (resumed 1x) |" in md
    assert "Stopped after" in md
    assert "autopilot stopped:" in r.stdout


def test_wall_budget_stops_it_and_other_settings_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    auto = tmp_path / "auto"
    args = ["workload=gpt_test", "protocol=quick", "launcher=inline", "device=cpu",
            "--baselines-dir", str(tmp_path / "b"), "--dir", str(auto), "--budget-min", "0.001"]
    assert entry(args) == 0  # v0 is created, the profile runs, then the budget is spent
    steps = _steps(auto)
    assert list(steps) == ["it1/profile", "it1/advise"]
    assert _state(auto)["stopped"]["reason"].startswith("wall-time budget spent:")
    assert "wall-time budget spent" in capsys.readouterr().out
    assert entry([*args[:1], "protocol=default", *args[2:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --dir: ") and "other settings (overrides)" in err
    assert entry(["workload=gpt_test", "workload.seed=3", "--dir", str(auto)]) == 2
    assert "error: workload.*: the autopilot measures the ledger's versions" in \
        capsys.readouterr().err


def test_rebase_moves_the_baseline_arm_to_the_version(compose: Any, tmp_path: Path) -> None:
    assert baseline_main(["--baselines-dir", str(tmp_path), "init", *V0]) == 0
    v0 = Ledger(tmp_path, "gpt_test").latest()
    assert v0 is not None
    cfg = compose(["workload=gpt_test", "+sweep=fa2_tiling"])
    what = rebase(cfg, v0)
    assert what is not None and "'32x32' is a variant" in what
    assert cfg.sweep.baseline == {"block_q": 8, "block_k": 8}
    assert cfg.sweep.labels == ["32x32", "64x64", "128x64", "128x128"]
    cfg = compose(["workload=gpt_test", "+sweep=fa2"])
    rebase(cfg, v0)  # tiled/auto is v0's own value: that variant goes
    assert cfg.sweep.baseline == {"backend": "tiled", "sdpa_kernel": "auto"}
    assert cfg.sweep.labels == ["sdpa-math", "eager", "sdpa-flash", "triton", "flash_attn"]
