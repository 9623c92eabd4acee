"""device=auto is decided where the trials run (issue 46): with launcher=slurm a probe job on a
compute node answers before anything is planned (orchestrator.launch.device_probe), and the
plan (the pairing, the attention pre-flight) follows the node's answer, not this host's.

The node is given a device this machine does not have through the device seam's test fake,
``ORCH_FAKE_DEVICE_KINDS``, set in the job's environment only (``launcher.slurm.setup``): on
this CPU host ``protocol.pairing=auto`` alternates a plain command's arms (SIGSTOP), on a GPU
node it must not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.launch import device_probe
from orchestrator.launch.inline import InlineLauncher
from orchestrator.platform import device as devmod
from tests.helpers.launching import require_slurm

FAKE = devmod.FAKE_KINDS_VAR
# a plain command (its arms alternate by SIGSTOP on the CPU), the planner left to choose
COMMAND = ["+sweep=planted_command", "protocol.pairing=auto", "device=auto",
           "protocol.repeats=2", "protocol.max_rounds=2"]
ON_SLURM = ["launcher=slurm", "launcher.slurm.partition=debug",
            "launcher.slurm.poll_interval_s=0.3", "launcher.slurm.time_limit_min=5"]
NODE_HAS_CUDA = f"launcher.slurm.setup=['export {FAKE}=cuda']"


@pytest.fixture(autouse=True)
def _no_fake_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake never reaches the submitting process: only the job's environment has it."""
    monkeypatch.delenv(FAKE, raising=False)


# --------------------------------------------------------------------------- no cluster


def test_the_fake_seam_reports_the_kinds_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    real = devmod.available_kinds()
    monkeypatch.setenv(FAKE, "musa, cuda")
    assert devmod.available_kinds() == ["musa", "cuda", "cpu"]
    doc = device_probe.describe("auto")
    assert doc["kind"] == "musa" and doc["faked"] == ["musa", "cuda"]
    assert doc["name"] == f"musa (faked by {FAKE})" and doc["count"] is None
    monkeypatch.setenv(FAKE, "")
    assert devmod.available_kinds() == real


def test_the_pairing_follows_the_resolved_kind_not_this_host(compose: Any) -> None:
    from orchestrator.spec.sweep import choose_pairing, resolve_arms

    cfg = compose([*COMMAND, "launcher=local"])
    arms = resolve_arms(cfg)
    mode, why = choose_pairing(cfg, arms, device_kind="cuda")
    assert mode == "process" and "holding its cuda memory at once" in why
    mode, why = choose_pairing(cfg, arms, device_kind="cpu")
    assert mode == "steps" and "plain command cannot switch arms" in why


def test_local_and_inline_resolve_on_this_host(compose: Any, run_dir: Path) -> None:
    for launcher in ("local", "inline"):
        doc = device_probe.resolve_device(compose([*COMMAND, f"launcher={launcher}"]), run_dir)
        assert doc["where"] == "this host" and doc["requested"] == "auto"
        assert doc["kind"] == devmod.available_kinds()[0] and doc["name"]
    doc = device_probe.resolve_device(compose([*COMMAND, "launcher=local", "device=cpu"]),
                                      run_dir)
    assert doc["kind"] == "cpu" and doc["where"].startswith("set by device=cpu")
    # a resume keeps the record its plan holds, for the same device=
    old = {"requested": "auto", "kind": "cuda", "where": "compute node (slurm probe job 7)"}
    assert device_probe.resolve_device(compose([*COMMAND, "launcher=local"]), run_dir,
                                       old) == old
    assert not any(run_dir.iterdir())
    line = device_probe.device_line({**old, "name": "H100", "count": 8})
    assert line.startswith("`device=auto` resolved to cuda: H100 (x8) on compute node (slurm "
                           "probe job 7)")


# --------------------------------------------------------------------------- local Slurm


class _Stop(Exception):
    pass


class _StopLauncher(InlineLauncher):
    """Planning only: the first trial (a pilot, a gate probe) stops the campaign."""

    name = "slurm"

    def run(self, *args: Any, **kwargs: Any) -> None:
        raise _Stop

    def run_jobs(self, *args: Any, **kwargs: Any) -> None:
        raise _Stop


@pytest.fixture
def slurm_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    conf = require_slurm()
    if conf:
        monkeypatch.setenv("SLURM_CONF", conf)
    return dict(os.environ)


@pytest.mark.slurm
def test_a_slurm_campaign_plans_from_the_compute_nodes_device(
        compose: Any, run_dir: Path, slurm_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.campaign.run import prepare, run_campaign
    from orchestrator.spec.sweep import choose_pairing, resolve_arms

    cfg = compose([*COMMAND, *ON_SLURM, NODE_HAS_CUDA])
    arms = resolve_arms(cfg)
    assert FAKE not in os.environ
    # this CPU host alone would alternate the arms by SIGSTOP
    assert choose_pairing(cfg, arms)[0] == "steps"
    start = prepare(cfg, run_dir, arms)
    dev = start.device
    assert dev is not None, start
    assert dev["requested"] == "auto" and dev["kind"] == "cuda" and dev["faked"] == ["cuda"]
    assert dev["where"] == f"compute node (slurm probe job {dev['slurm_job_id']})"
    assert dev["node_id"] and dev["torch"]
    assert start.pairing["mode"] == "process", start.pairing
    assert "holding its cuda memory at once" in start.pairing["why"]
    assert not any(run_dir.iterdir())  # the probe wrote nothing into the run directory
    assert not list(run_dir.parent.glob(".orch-device-probe-*"))  # and left nothing beside it

    with pytest.raises(_Stop):  # planned and written, then stopped at its first trial
        run_campaign(cfg, run_dir, launcher=_StopLauncher(), arms=arms, start=start)
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["device_resolved"] == dev
    assert plan["pairing"]["mode"] == "process"

    # a resume reuses the plan's answer: no second probe job
    def no_probe(*a: Any, **k: Any) -> None:
        raise AssertionError("a resume probed the device again")

    monkeypatch.setattr(device_probe, "probe_slurm", no_probe)
    again = compose([*COMMAND, *ON_SLURM, NODE_HAS_CUDA, f"resume='{run_dir}'"])
    start2 = prepare(again, run_dir, resolve_arms(again))
    assert start2.device == dev and start2.pairing["mode"] == "process"


@pytest.mark.slurm
def test_a_probe_that_fails_refuses_the_campaign_and_writes_nothing(
        tmp_path: Path, slurm_env: dict[str, str]) -> None:
    run_dir = tmp_path / "runs" / "probe-fails"
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", *COMMAND, *ON_SLURM,
         "launcher.slurm.setup=['exit 3']", "launcher.slurm.lost_after_s=10",
         f"run_dir='{run_dir}'"],
        capture_output=True, text=True, timeout=180, env=slurm_env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out.stderr[-2000:]
    assert errors[0].startswith("error: device: auto is decided on a compute node, but probe "
                                "job "), errors
    assert "ended FAILED with no result" in errors[0]
    assert "set device=cuda|musa|cpu explicitly" in errors[0]
    assert not run_dir.exists()  # refused before the first write: nothing stays
    assert not list((tmp_path / "runs").glob(".orch-device-probe-*"))
