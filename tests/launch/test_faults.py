"""Fault injection through every launcher: raise, simulated OOM, segfault, hang past
the trial time limit, and kill -9 from outside. Each becomes a record with its status (and the
tail of stderr where there is one); the launcher goes on to the next trial.

The inline launcher shares the test's process, so only the faults a process survives (raise,
OOM) apply to it; it cannot enforce a time limit either.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.worker.trial import TrialSpec
from tests.helpers.launching import (
    LAUNCHERS,
    launcher_for,
    make_spec,
    pids_running,
    pids_writing,
)

FAULTY = "tests.helpers.faulty:build_"


def _collect(launcher: Any, specs: list[TrialSpec], timeout_s: float) -> dict[str, dict]:
    got: dict[str, dict] = {}

    def on_done(spec: TrialSpec, record: dict) -> None:
        assert spec.trial_id not in got  # exactly one record per trial
        assert (Path(spec.trial_dir) / "trial.json").exists()
        got[spec.trial_id] = record

    launcher.run(specs, on_done, timeout_s)
    assert set(got) == {s.trial_id for s in specs}
    return {rec["arm_label"]: rec for rec in got.values()}


@pytest.mark.parametrize("name", LAUNCHERS)
def test_crashes_are_recorded_and_the_launcher_goes_on(name: str, run_dir: Path,
                                                       monkeypatch: Any) -> None:
    launcher = launcher_for(name, run_dir, monkeypatch)
    # the segfault comes first: the trials after it still run (the launcher goes on)
    modes = ["raise", "oom"] if name == "inline" else ["segfault", "raise", "oom"]
    specs = [make_spec(run_dir, i, recipe=FAULTY + m, position=i, label=m)
             for i, m in enumerate(modes)]
    if name == "inline":
        specs.append(make_spec(run_dir, len(modes), position=len(modes), label="healthy"))
    recs = _collect(launcher, specs, timeout_s=600)
    assert recs["raise"]["status"] == "failed"
    assert "planted failure" in recs["raise"]["error"]
    assert recs["oom"]["status"] == "oom" and "out of memory" in recs["oom"]["error"]
    if name == "inline":
        assert recs["healthy"]["status"] == "ok"  # the trial after the faults still ran
        return
    assert "planted failure" in recs["raise"]["stderr_tail"]
    assert recs["segfault"]["status"] == "crashed"
    assert "SIGSEGV" in recs["segfault"]["error"]
    if name != "inline":  # the segfault came first: the fork server served the rest
        want = "spawn" if name in ("local-spawn", "slurm") else "fork-server"
        assert {r["start_method"] for r in recs.values()} == {want}


@pytest.mark.parametrize("name", [n for n in LAUNCHERS if n != "inline"])
def test_hang_times_out_and_kill_9_is_recorded(name: str, run_dir: Path, monkeypatch: Any) -> None:
    launcher = launcher_for(name, run_dir, monkeypatch)
    victim = make_spec(run_dir, 0, recipe=FAULTY + "hang", label="killed")
    hang = make_spec(run_dir, 1, recipe=FAULTY + "hang", position=1, label="hangs")
    stop = threading.Event()

    def killer() -> None:  # kill -9 the victim's trial process from outside, once it runs
        out = Path(victim.trial_dir) / "stdout.log"  # its stdout, spawned or forked
        while not stop.is_set():
            pids = [p for p in pids_writing(out) if "torch.distributed" not in _cmd(p)]
            if pids:
                time.sleep(1.0)
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.2)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        recs = _collect(launcher, [victim, hang], timeout_s=12)
    finally:
        stop.set()
    assert recs["killed"]["status"] == "killed" and "SIGKILL" in recs["killed"]["error"]
    assert recs["hangs"]["status"] == "timeout"
    assert "12 s" in recs["hangs"]["error"]
    assert pids_running(str(Path(hang.trial_dir) / "spec.json")) == []  # nothing left behind
    assert pids_writing(Path(hang.trial_dir) / "stdout.log") == []
    want = "spawn" if name in ("local-spawn", "slurm") else "fork-server"
    assert {r["start_method"] for r in recs.values()} == {want}
    if name == "local":  # forked from the fork server, which outlived both
        assert launcher.starter.server is not None and launcher.starter.server.alive


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
