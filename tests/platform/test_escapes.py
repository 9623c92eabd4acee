"""Nothing a guarded command starts outlives it, wherever it moved (issue 51): children that
left its session (``setsid``), a daemon (double fork + setsid), a process that also cleared
its environment (a cgroup holds it). Real processes throughout; each test's processes carry a
unique ``sleep`` argument, found again in /proc afterwards, and teardown kills any left."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.platform.children import (
    CGROUP_ENV,
    WATCHDOG,
    SessionGuard,
    kill_recorded,
    make_cgroup,
    run_child,
    start_child,
    start_ticks,
)

ROOT = Path(__file__).resolve().parents[2]

from tests.helpers.escapes import escaper, left, wait_for


def cgroup_kind(kind: str = "auto") -> str | None:
    """The kind of cgroup a guard gets here (None: session and tag only)."""
    made = make_cgroup(f"orch-probe-{os.getpid()}-{random.randrange(10**6)}", kind)
    if made is None:
        return None
    made[1].rmdir()
    return made[0]


MODES = ["auto", "off"]  # auto: a cgroup where this machine allows one; off: the fallback


@pytest.mark.parametrize("mode", MODES)
def test_run_child_ends_what_left_the_session(tmp_path: Path, mark: str, mode: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CGROUP_ENV, mode)
    record = tmp_path / "command.session.json"
    rc = run_child(["/bin/sh", str(escaper(tmp_path)), mark, "sleep", "0.3"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout_s=60,
                   preexec_fn=None, guard=record)
    assert rc == 0
    assert wait_for(lambda: not left(mark), 3.0), left(mark)
    assert not record.exists()


@pytest.mark.parametrize("kind", ["cgroup2", "freezer"])
def test_a_cgroup_holds_what_also_clears_its_environment(tmp_path: Path, mark: str,
                                                         kind: str) -> None:
    """A child that leaves the session and starts its program with an empty environment has
    lost the tag: only the cgroup still holds it (the fallback's limit, shown with ``off``)."""
    if cgroup_kind(kind) is None:
        pytest.skip(f"no {kind} cgroup can be made here")
    cmd = 'setsid env -i sleep "$0" & sleep 0.3'
    for choice in (kind, "off"):
        guard = SessionGuard(tmp_path / "command.session.json", cgroup=choice)
        assert guard.cgroup_kind == (None if choice == "off" else kind)
        proc = start_child(["/bin/sh", "-c", cmd, mark], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, preexec_fn=None, guard=guard)
        record = json.loads(guard.record.read_text())  # type: ignore[union-attr]
        assert record["cgroup_kind"] == guard.cgroup_kind and record["tag"] == guard.tag
        assert proc.wait(timeout=60) == 0
        guard.close()
        if choice == kind:
            assert wait_for(lambda: not left(mark), 3.0), left(mark)
            assert guard.cgroup is not None and not guard.cgroup.exists()
        else:
            assert len(left(mark)) == 1  # out of reach of the session and of the tag


def _starter(tmp_path: Path, mark: str, mode: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A process that runs a long command under a guard, as a trial process does; returned
    once the command and its escaped children all run."""
    record = tmp_path / "command.session.json"
    code = ("import sys, subprocess; from pathlib import Path;"
            "from orchestrator.platform.children import run_child;"
            "run_child(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,"
            f" timeout_s=600, preexec_fn=None, guard=Path({str(record)!r}))")
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "/bin/sh", str(escaper(tmp_path)), mark, "sleep", mark],
        env={**os.environ, "PYTHONPATH": str(ROOT), CGROUP_ENV: mode}, start_new_session=True)
    assert wait_for(lambda: len(left(mark)) == 3 and record.exists(), 30), left(mark)
    return proc, record


@pytest.mark.parametrize("mode", MODES)
def test_kill_9_of_the_starter_leaves_nothing(tmp_path: Path, mark: str, mode: str) -> None:
    proc, record = _starter(tmp_path, mark, mode)
    doc = json.loads(record.read_text())
    assert doc.get("cgroup_kind") == (cgroup_kind() if mode == "auto" else None)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # its watchdog takes down the command and what left its session
    assert wait_for(lambda: not left(mark), 5.0), left(mark)
    if doc.get("cgroup"):
        assert wait_for(lambda: not Path(doc["cgroup"]).exists(), 5.0)


def _watchdogs(session: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if WATCHDOG.encode() in cmd and str(session).encode() in cmd:
            out.append(int(d.name))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_resume_kills_what_a_dead_run_left_outside_its_session(tmp_path: Path, mark: str,
                                                                 mode: str) -> None:
    """The starter and its watchdog killed together (an OOM killer, a kill of everything):
    the record is all that is left, and kill_recorded ends the escaped children from it."""
    proc, record = _starter(tmp_path, mark, mode)
    session = json.loads(record.read_text())["session"]
    (dog,) = _watchdogs(session)
    os.kill(dog, signal.SIGKILL)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.3)
    alive = set(left(mark))
    assert len(alive) >= 2  # the escaped ones at least: nobody is watching them now
    assert set(kill_recorded(record)) >= alive
    assert wait_for(lambda: not left(mark), 3.0), left(mark)
    assert not record.exists()


def test_an_edited_record_kills_nothing_it_does_not_own(tmp_path: Path, mark: str) -> None:
    """A record's pid reused by another process, a cgroup not named after its tag, an empty
    tag: nothing is killed."""
    guard = SessionGuard(tmp_path / "command.session.json")
    bystander = start_child(["sleep", mark], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=None, guard=guard)
    try:
        doc = json.loads(guard.record.read_text())  # type: ignore[union-attr]
        forged = tmp_path / "forged.json"
        forged.write_text(json.dumps({"session": bystander.pid,
                                      "start_ticks": doc["start_ticks"] + 1,  # a reused pid
                                      "tag": "", "cgroup": doc["cgroup"]}))
        assert kill_recorded(forged) == [] and not forged.exists()
        me = os.getpid()  # alive, and started at another time than the record says
        forged.write_text(json.dumps({"session": me, "start_ticks": start_ticks(me) + 1,
                                      "tag": "0" * 32,
                                      "cgroup": doc["cgroup"] or "/sys/fs/cgroup/unified"}))
        kill_recorded(forged)
        time.sleep(0.1)
        assert left(mark) == [bystander.pid]
    finally:
        guard.close()
    assert bystander.wait(timeout=10) == -signal.SIGKILL


def test_a_program_that_cannot_start_is_still_an_oserror(tmp_path: Path) -> None:
    """A shell starts the command once it joined its cgroup: a missing program is still
    Popen's error (the trial says 'cannot start'), never exit code 127, and leaves no cgroup."""
    (tmp_path / "plain.txt").write_text("not a program\n")
    for argv, err in ((["no-such-program-612"], FileNotFoundError),
                      (["./no-such-program-612"], FileNotFoundError),
                      (["./plain.txt"], PermissionError)):
        guard = SessionGuard(None)
        with pytest.raises(err):
            start_child(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        cwd=tmp_path, preexec_fn=None, guard=guard)
        assert guard.cgroup is None or not guard.cgroup.exists()
    guard = SessionGuard(None)  # found on the child's PATH, or relative to its cwd
    proc = start_child(["sh", "-c", "exit 4"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env={"PATH": "/bin:/usr/bin"},
                       cwd=tmp_path, preexec_fn=None, guard=guard)
    assert proc.wait(timeout=30) == 4
    guard.close()


def test_an_unknown_cgroup_choice_names_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CGROUP_ENV, "yes")
    with pytest.raises(ValueError, match=r"ORCH_CGROUP='yes': choose one of auto, off, cgroup2, "
                                         r"freezer"):
        SessionGuard(None)
