"""One contract, three launchers (inline, local processes, real Slurm).

Every spec gets exactly one record, written to trial.json before on_done; trials come back in
plan order; the arms of one round run on the same node (Slurm: in one job). The Slurm cases run
against the single-node cluster of scripts/slurm_local.sh and skip when it is not running.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.platform import device as devmod
from orchestrator.launch.local import LocalLauncher
from orchestrator.launch.slots import DeviceSlots, Inventory, inventory
from orchestrator.worker.trial import TrialSpec
from tests.helpers.launching import LAUNCHERS, launcher_for, make_spec


def _run(launcher: Any, specs: list[TrialSpec], timeout_s: float = 300.0) -> list[tuple[str, dict]]:
    seen: list[tuple[str, dict]] = []
    started: list[str] = []

    def on_done(spec: TrialSpec, record: dict) -> None:
        on_disk = json.loads((Path(spec.trial_dir) / "trial.json").read_text())
        assert on_disk["trial_id"] == spec.trial_id == record["trial_id"]
        assert on_disk["status"] == record["status"]
        seen.append((spec.trial_id, record))

    launcher.run(specs, on_done, timeout_s, on_start=lambda s: started.append(s.trial_id))
    assert started and set(started) <= {s.trial_id for s in specs}
    return seen


@pytest.mark.parametrize("name", LAUNCHERS)
def test_every_trial_one_record_in_plan_order(name: str, run_dir: Path, monkeypatch: Any) -> None:
    launcher = launcher_for(name, run_dir, monkeypatch)
    specs = [make_spec(run_dir, arm, rnd=r, position=i)
             for i, (r, arm) in enumerate([(0, 0), (0, 1), (1, 1), (1, 0)])]
    seen = _run(launcher, specs)
    assert [tid for tid, _ in seen] == [s.trial_id for s in specs]
    recs = [rec for _, rec in seen]
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    assert len(list(run_dir.glob("trials/*/trial.json"))) == len(specs)
    pids = {r["pid"] for r in recs}
    assert len(pids) == (1 if name == "inline" else len(specs))  # fresh process per trial
    if name != "inline":  # Slurm jobs spawn (see launch/slurm.py)
        want = "spawn" if name in ("local-spawn", "slurm") else "fork-server"
        assert [r["start_method"] for r in recs] == [want] * len(specs)
    if name == "slurm":  # one job per (round, bucket): both arms of a round share node and job
        by_round: dict[int, set] = {}
        for r in recs:
            by_round.setdefault(r["round"], set()).add((r["slurm_job_id"], r["node_id"]))
            assert r["node_id"] and "vm" not in r["node_id"]  # anonymous, not the hostname
        assert all(len(v) == 1 for v in by_round.values())
        assert by_round[0] != by_round[1]
        assert recs[0]["startup_measured_from"] == "slurm submission"
        # the node's host name came back privately (for the sanitizer); the pickles that
        # carried it and the specs are gone, and no job is left uncollected
        import socket

        assert launcher.seen_hostnames == {socket.gethostname()}
        assert not list(run_dir.rglob("*.pkl"))
        assert json.loads((run_dir / "slurm" / "jobs.json").read_text()) == {"live": {}}


def test_inline_records_a_distributed_spec_as_unavailable(run_dir: Path, monkeypatch: Any) -> None:
    """A world_size=2 trial where the launcher cannot run one becomes a record, not a hole
    (local and Slurm run them: tests/platform/test_distributed.py, tests/launch/test_slurm.py)."""
    launcher = launcher_for("inline", run_dir, monkeypatch)
    (tid, rec), = _run(launcher, [make_spec(run_dir, 0, world_size=2)])
    assert rec["status"] == "unavailable" and "launcher=local" in rec["error"]


# --------------------------------------------------------------------------- device slots


def _fake_musa(monkeypatch: Any, count: int) -> None:
    import torch

    class FakeMusa:
        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def device_count() -> int:
            return count

        @staticmethod
        def get_device_name(i: int) -> str:
            return "MTT S4000 (fake)"

    monkeypatch.setattr(devmod, "_torch_musa", lambda: object())
    monkeypatch.setattr(torch, "musa", FakeMusa, raising=False)


def test_inventory_finds_musa_and_pins_with_its_variable(monkeypatch: Any) -> None:
    _fake_musa(monkeypatch, 4)
    inv = inventory("auto", None)
    assert inv == Inventory("musa", (0, 1, 2, 3))
    slots = DeviceSlots(inv, max_parallel=2)
    a, b = slots.acquire(2), slots.acquire(2)
    assert set(a).isdisjoint(b) and sorted(a + b) == [0, 1, 2, 3]
    assert slots.env(a) == {"MUSA_VISIBLE_DEVICES": ",".join(map(str, a))}
    assert "CUDA_VISIBLE_DEVICES" not in slots.env(a)
    assert inventory("cpu", None) == Inventory("cpu", ())
    assert inventory("cuda", [2, 3]).visibility_var == "CUDA_VISIBLE_DEVICES"


def test_slots_never_share_a_device_between_running_trials() -> None:
    import threading

    slots = DeviceSlots(Inventory("cuda", (0, 1, 2)), max_parallel=3)
    held: list[list[int]] = []
    clashes = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for _ in range(20):
            taken = slots.acquire(n)
            with lock:
                if any(set(taken) & set(h) for h in held):
                    clashes.append(taken)
                held.append(taken)
            time.sleep(0.001)
            with lock:
                held.remove(taken)
            slots.release(taken)

    threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clashes == [] and sorted(slots._free) == [0, 1, 2]


def test_local_parallel_trials_get_disjoint_devices(run_dir: Path) -> None:
    """Real processes, two at a time on two (pretend) MUSA devices: each sees only its own."""
    launcher = LocalLauncher(device="cpu", max_parallel=2, inv=Inventory("musa", (0, 1)))
    specs = [make_spec(run_dir, i, recipe="tests.helpers.launchprobe:build_env_probe", rnd=i,
                       position=i) for i in range(4)]  # one round each: groups of one trial
    seen = dict(_run(launcher, specs))
    recs = [seen[s.trial_id] for s in specs]
    visible = [r["error"].split("'MUSA_VISIBLE_DEVICES': '")[1][0] for r in recs]
    assert set(visible) <= {"0", "1"}
    assert [r["devices"] for r in recs] == [[int(v)] for v in visible]
    for a in recs:  # any two trials that overlapped in time ran on different devices
        for b in recs:
            overlap = a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]
            if a is not b and overlap:
                assert a["devices"] != b["devices"]
    assert os.environ.get("MUSA_VISIBLE_DEVICES") is None  # never leaks into the orchestrator


def test_local_parallel_keeps_a_rounds_arms_on_one_device_set(run_dir: Path) -> None:
    """max_parallel=2 on a (fake) 2-device inventory: the arms of one (round, bucket) share
    their devices and run in plan order; only distinct rounds run at once, on disjoint devices."""
    launcher = LocalLauncher(device="cpu", max_parallel=2, inv=Inventory("musa", (0, 1)))
    order = [(0, 0), (0, 1), (1, 1), (1, 0)]
    specs = [make_spec(run_dir, arm, recipe="tests.helpers.launchprobe:build_env_probe",
                       rnd=r, position=i) for i, (r, arm) in enumerate(order)]
    seen = dict(_run(launcher, specs))
    recs = [seen[s.trial_id] for s in specs]
    for r in recs:  # the visibility variable is what the record says
        assert r["error"].split("'MUSA_VISIBLE_DEVICES': '")[1].split("'")[0] == \
            ",".join(map(str, r["devices"]))
    by_round: dict[int, list[dict]] = {}
    for r in recs:
        by_round.setdefault(r["round"], []).append(r)
    for rnd, arms in by_round.items():
        assert len({tuple(a["devices"]) for a in arms}) == 1, (rnd, arms)
        first, second = arms  # plan order within the round: the second starts after the first
        assert first["finished_at"] <= second["started_at"]
    concurrent = [(a, b) for a in by_round[0] for b in by_round[1]
                  if a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]]
    assert concurrent  # the two rounds did run side by side
    assert set(by_round[0][0]["devices"]).isdisjoint(by_round[1][0]["devices"])


# --------------------------------------------------------------------------- worker jobs


@pytest.mark.parametrize("name", LAUNCHERS)
def test_gate_probes_run_through_every_launcher(name: str, run_dir: Path, monkeypatch: Any) -> None:
    """run_jobs: the gate's probes, one record each (probe.json on disk before on_done), in
    the given order (the variant and the repeat read what the baseline wrote), a failing probe
    a record with its status; on Slurm all of them in one job on one node."""
    from tests.helpers.launching import make_probes

    launcher = launcher_for(name, run_dir, monkeypatch)
    jobs = make_probes(run_dir, variant="tests.helpers.faulty:build_raise")
    seen: list[tuple[str, dict]] = []

    def on_done(job: Any, record: dict) -> None:
        on_disk = json.loads((Path(job.probe_dir) / "probe.json").read_text())
        assert on_disk["name"] == job.name == record["name"]
        assert on_disk["status"] == record["status"]
        seen.append((job.name, record))

    launcher.run_jobs(jobs, on_done, 300.0)
    assert [n for n, _ in seen] == ["a0", "a1", "a0-repeat"]
    recs = {n: r for n, r in seen}
    assert recs["a0"]["status"] == "ok" and recs["a0-repeat"]["status"] == "ok", recs
    assert recs["a1"]["status"] == "failed" and "planted failure" in recs["a1"]["error"]
    assert recs["a0-repeat"]["cross_loads"]["a1"]["ok"] is False  # a1 left no final.pt
    assert all(r["process_seconds"] > 0 for r in recs.values())
    pids = {r["pid"] for r in recs.values()}
    assert len(pids) == (1 if name == "inline" else 3)
    if name != "inline":
        assert {r["launcher"] for r in recs.values()} == {name.split("-")[0]}
        want = "spawn" if name in ("local-spawn", "slurm") else "fork-server"
        assert {r["start_method"] for r in recs.values()} == {want}
    if name == "slurm":
        assert len({(r["slurm_job_id"], r["node_id"]) for r in recs.values()}) == 1
        assert not list(run_dir.rglob("*.pkl"))
        assert json.loads((run_dir / "slurm" / "jobs.json").read_text()) == {"live": {}}
