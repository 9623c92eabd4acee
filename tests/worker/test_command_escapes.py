"""A command whose launcher leaves children outside its session (``setsid``, a double-forked
daemon) leaves nothing running after its trial (issue 51): through the external command path,
and through real campaigns (``python -m orchestrator``), the default pairing (the arms of a
plain command alternated, orchestrator.worker.pairing.alternation), one process per trial
(orchestrator.worker.external) and a duet (orchestrator.worker.pairing.duet). Afterwards the processes
are listed: none is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.campaign.run import run_campaign
from orchestrator.platform.children import CGROUP_ENV, cgroup_homes
from orchestrator.worker.external import run_command
from tests.helpers.escapes import escaper, left, wait_for
from tests.worker.test_duet import HELPER as DUET_HELPER
from tests.worker.test_duet import _duet_workload

ROOT = Path(__file__).resolve().parents[2]

TRAINER = """\
import sys, time
for i in range(int(sys.argv[1])):
    t = time.perf_counter(); time.sleep(0.003)
    print(f"step {i} time {(time.perf_counter() - t) * 1000:.3f}ms loss 1.0", flush=True)
"""


@pytest.fixture
def no_leftover_cgroups() -> Iterator[None]:
    """The guards' cgroups (orch-*) under this process's own are all removed again."""
    before = {p for _, home in cgroup_homes() for p in home.glob("orch-*")}
    yield
    after = {p for _, home in cgroup_homes() for p in home.glob("orch-*")}
    assert wait_for(lambda: not {p for p in after - before if p.exists()}, 3.0), after - before


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_the_external_command_path_ends_what_left_the_session(
        tmp_path: Path, mark: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CGROUP_ENV, mode)
    log = tmp_path / "command.log"
    rc, err = run_command(["/bin/sh", str(escaper(tmp_path)), mark, "echo", "done"], None, {},
                          log, 60.0)
    assert (rc, err) == (0, None) and log.read_text() == "done\n"
    assert wait_for(lambda: not left(mark), 3.0), left(mark)
    # and a command that runs past its time limit: killed, with what it started
    rc, err = run_command(["/bin/sh", str(escaper(tmp_path)), mark, "sleep", mark], None, {},
                          log, 1.0)
    assert (rc, err) == (None, None)
    assert wait_for(lambda: not left(mark), 3.0), left(mark)
    assert not (tmp_path / "command.session.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("pairing", ["auto", "process"])
def test_a_campaign_whose_command_escapes_its_session_leaves_no_process(
        tmp_path: Path, mark: str, pairing: str, no_leftover_cgroups: None) -> None:
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    run = tmp_path / "run"
    command = f"/bin/sh {escaper(tmp_path)} {mark} {{python}} {trainer} {{steps}}"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "workload=command_example", "+sweep=example_delay",
         "protocol=quick", f"protocol.pairing={pairing}", f"workload.command='{command}'",
         "protocol.repeats=1", "protocol.max_rounds=1",  # one round: what is left is the point
         f"run_dir='{run}'"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(p.read_text()) for p in run.glob("trials/*/trial.json")]
    assert recs and {r["status"] for r in recs} == {"ok"}, [r.get("error") for r in recs]
    want = "alternation" if pairing == "auto" else None  # the default: a plain command's arms
    assert {r.get("paired_by") for r in recs} == {want}  # alternated on the CPU
    assert not list(run.glob("trials/*/command.session.json"))
    assert not left(mark), left(mark)  # every trial's children were ended with it


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a duet needs two cores here")
def test_a_duet_whose_commands_escape_their_sessions_leaves_no_process(
        tmp_path: Path, mark: str, compose: Any, run_dir: Path, no_leftover_cgroups: None) -> None:
    """pairing=duet (orchestrator.worker.pairing.duet): both arms' commands at once, each guarded."""
    conf = _duet_workload(tmp_path)
    command = (f"/bin/sh {escaper(tmp_path)} {mark} {{python}} {DUET_HELPER} --steps {{steps}} "
               "--delay-ms {delay_ms}")
    cfg = compose(["workload=duet_test", "+sweep=duet_delay", "protocol=quick",
                   "protocol.repeats=1", "protocol.max_rounds=1", "protocol.aa_arm=false",
                   "protocol.measured_steps=30",
                   "protocol.pairing=duet", "protocol.duet_cpus=[[0],[1]]", "launcher=inline",
                   "device=cpu", f"workload.command='{command}'"], True, [conf])
    run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert len(recs) == 2 and {r["status"] for r in recs} == {"ok"}, [r.get("error") for r in recs]
    assert all("duet" in r for r in recs)
    assert not left(mark), left(mark)
