"""Interrupt a campaign and resume it: no completed trial is lost or run twice."""

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

from orchestrator.core.errors import ConfigError
from orchestrator.campaign.resume import check_same_plan, completed_on_disk
from tests.helpers.launching import child_pids, pids_under

ARGS = ["workload=gpt_test", "protocol=quick", "launcher=local", "+sweep=fa2",
        "sweep.buckets=[s32]", "sweep.values=[{backend:eager,sdpa_kernel:auto}]",
        "sweep.labels=[eager]"]


def _records(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")}


def _alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie counts as gone)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


def test_kill_campaign_midway_then_resume(run_dir: Path) -> None:
    cmd = [sys.executable, "-m", "orchestrator", *ARGS, f"run_dir='{run_dir}'"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.time() + 600
        while len(_records(run_dir)) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        # wait for the next trial's process to exist: it is killed mid-run with its campaign
        # (forked from the campaign's fork server, or spawned: pids_under finds either)
        needle = run_dir / "trials"
        seen: list[int] = []  # kept as seen: a fast trial may end before a second look
        while not seen and time.time() < deadline:
            seen = [p for p in pids_under(needle) if p != proc.pid]
            if not seen:
                time.sleep(0.1)
        assert seen, "no trial process seen"
        helpers = child_pids(proc.pid)  # the fork server, or the spawned trial
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _records(run_dir)
    assert 2 <= len(before) < 4 and all(r["status"] == "ok" for r in before.values())
    for _ in range(100):  # the orphaned trial dies with its parent (parent-death signal; a
        # forked one with the fork server, which stops when its campaign's socket closes)
        if not pids_under(run_dir / "trials") and not _alive(helpers):
            break
        time.sleep(0.1)
    assert pids_under(run_dir / "trials") == []
    assert helpers and not _alive(helpers)

    out = subprocess.run([sys.executable, "-m", "orchestrator", *ARGS, f"resume='{run_dir}'"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "planned trials already complete" in out.stderr
    after = _records(run_dir)
    plan = json.loads((run_dir / "plan.json").read_text())
    planned = [t["trial_id"] for t in plan["trials"]]
    assert sorted(after) == sorted(planned)  # every planned trial present, exactly once
    assert all(r["status"] == "ok" for r in after.values())
    for tid, rec in before.items():  # completed trials were kept, not re-run
        assert after[tid]["pid"] == rec["pid"] and after[tid]["started_at"] == rec["started_at"]
    assert (run_dir / "decisions.md").exists()


def test_completed_on_disk_ignores_partial_and_foreign_records(tmp_path: Path) -> None:
    def put(tid: str, text: str) -> None:
        (tmp_path / "trials" / tid).mkdir(parents=True, exist_ok=True)
        (tmp_path / "trials" / tid / "trial.json").write_text(text)

    put("t-ok", json.dumps({"trial_id": "t-ok", "status": "ok"}))
    put("t-crash", json.dumps({"trial_id": "t-crash", "status": "crashed"}))
    put("t-trunc", '{"trial_id": "t-trunc", "sta')
    put("t-timeout", json.dumps({"trial_id": "t-timeout", "status": "timeout"}))
    put("t-killed", json.dumps({"trial_id": "t-killed", "status": "killed"}))
    put("t-copied", json.dumps({"trial_id": "other", "status": "ok"}))
    put("t-list", "[1, 2]")
    assert sorted(completed_on_disk(tmp_path)) == ["t-crash", "t-ok"]


def test_resume_refuses_a_run_dir_planned_differently(tmp_path: Path) -> None:
    doc = {"sweep": "fa2", "arms": [{"arm_id": "a0"}], "buckets": [{"name": "s32"}],
           "trials": [{"trial_id": "r000-s32-a0"}]}
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    check_same_plan(tmp_path, doc)  # same plan: fine
    longer = {**doc, "trials": [{"trial_id": "r000-s32-a0"}, {"trial_id": "r001-s32-a0"}]}
    check_same_plan(tmp_path, longer)  # adaptive rounds extend a plan: allowed
    other = {**doc, "arms": [{"arm_id": "a0"}, {"arm_id": "a1"}]}
    with pytest.raises(ConfigError, match=r"^resume: .*planned for a different sweep"):
        check_same_plan(tmp_path, other)
    reordered = {**doc, "trials": [{"trial_id": "r000-s32-a1"}]}
    with pytest.raises(ConfigError, match=r"^resume: "):
        check_same_plan(tmp_path, reordered)


def test_resume_with_other_overrides_exits_2(run_dir: Path, compose: Any) -> None:
    from orchestrator.campaign.run import run_campaign

    cfg = compose(["workload=gpt_test", "protocol=quick", "launcher=inline", "+sweep=fa2",
                   "sweep.buckets=[s32]", "sweep.values=[{backend:eager,sdpa_kernel:auto}]",
                   "sweep.labels=[eager]", "protocol.repeats=1", "protocol.measured_steps=3"])
    run_campaign(cfg, run_dir)
    out = subprocess.run([sys.executable, "-m", "orchestrator", "workload=gpt_test",
                          "protocol=quick", "launcher=inline", "+sweep=fa2",
                          "sweep.buckets=[s32]", f"resume='{run_dir}'"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2, out.stderr[-1000:]
    assert out.stderr.strip().splitlines()[-1].startswith("error: resume: ")
