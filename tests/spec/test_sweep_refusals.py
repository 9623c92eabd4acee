"""What a sweep or its pairing can never run is refused before any work, in one line naming
the key and the fix (issue 51): an arm without a label, a duet whose arms cannot overlap, a
duet on devices this host does not have."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.core.errors import ConfigError

CALIBRATE = ["workload=synthetic", "+sweep=calibrate"]
ENV_SWEEP = [*CALIBRATE, "sweep.variable=env.FOO", "sweep.baseline=x", "sweep.labels=null"]


@pytest.mark.parametrize("overrides,match", [
    # it was accepted, and decisions.md read "reject       : reject: ..."
    (["sweep.labels=['',b,c]"],
     (r"^sweep\.labels\[0\]: gives the arm an empty label \(''\), and a verdict is named by "
      r"its label; give sweep\.labels\[0\] a name that is not blank$")),
    (["sweep.labels=[a,'   ',c]"], r"^sweep\.labels\[1\]: gives the arm an empty label \('   '\)"),
    (["sweep.baseline_label=''"], r"^sweep\.baseline_label: gives the arm an empty label"),
    (["sweep.baseline_label=' '"], r"^sweep\.baseline_label: gives the arm an empty label"),
])
def test_an_empty_or_blank_label_is_refused(compose: Any, overrides: list[str],
                                            match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose([*CALIBRATE, *overrides])


def test_a_value_whose_own_text_is_empty_needs_a_label(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"^sweep\.values\[0\]: gives the arm an empty label "
                                          r"\(''\).*; name every value with sweep\.labels="):
        compose([*ENV_SWEEP, "sweep.values=['',y]"])
    with pytest.raises(ConfigError, match=r"^sweep\.baseline: gives the arm an empty label.*"
                                          r"sweep\.baseline_label=NAME"):
        compose([*ENV_SWEEP, "sweep.values=[y]", "sweep.baseline_label=null", "sweep.baseline=''"])
    assert compose([*ENV_SWEEP, "sweep.values=['',y]", "sweep.labels=[unset,y]"])


# --------------------------------------------------------------------------- duet

TWO_CORES = len(os.sched_getaffinity(0)) >= 2
needs_two = pytest.mark.skipif(not TWO_CORES, reason="a duet needs two cores here")
DUET = ["workload=command_busy", "+sweep=planted_command", "protocol.aa_arm=false",
        "protocol.duet_cpus=[[0],[1]]", "device=cpu"]


def test_the_overlap_rule_is_the_workers() -> None:
    from orchestrator.spec import duet
    from orchestrator.worker.pairing import duet as worker_duet

    assert duet.MIN_OVERLAP_STEPS == worker_duet.MIN_OVERLAP_STEPS
    assert duet.duet_length_obstacle(SimpleNamespace(measured_steps=10)) == ""
    assert "protocol.measured_steps=3 is too few to overlap" in duet.duet_length_obstacle(
        SimpleNamespace(measured_steps=3))


@needs_two
def test_a_duet_on_the_quick_protocol_is_refused_and_auto_falls_back(compose: Any) -> None:
    """Every trial of it was infra_failed ("did not overlap"), after the whole campaign."""
    from orchestrator.spec.sweep import choose_pairing, resolve_arms

    with pytest.raises(ConfigError, match=r"^protocol\.pairing: duet: protocol\.measured_steps=3 "
                                          r"is too few to overlap: .*; set "
                                          r"protocol\.measured_steps=10 or more"):
        compose([*DUET, "protocol=quick", "protocol.pairing=duet"])
    cfg = compose([*DUET, "protocol=quick", "protocol.pairing=auto"])
    mode, why = choose_pairing(cfg, resolve_arms(cfg))
    assert mode == "process" and "no duet: protocol.measured_steps=3 is too few" in why, why
    cfg = compose([*DUET, "protocol=quick", "protocol.pairing=duet", "protocol.measured_steps=10"])
    assert cfg.protocol.pairing == "duet"


class _Host:
    """The device seam as a host with ``count`` devices of ``kind`` (0: none) shows it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, kind: str = "cuda", count: int = 0):
        from orchestrator.platform import device as devmod

        self.asked = 0

        def kinds() -> list[str]:
            self.asked += 1
            return [kind, "cpu"] if count else ["cpu"]

        monkeypatch.setattr(devmod, "available_kinds", kinds)
        monkeypatch.setattr(devmod, "unavailable_reason",
                            lambda k: None if count else f"no {k.upper()} device is visible")
        monkeypatch.setattr(devmod, "resolve", lambda k, index=None: SimpleNamespace(count=count))
        for var in ("CUDA_VISIBLE_DEVICES", "MUSA_VISIBLE_DEVICES"):
            monkeypatch.delenv(var, raising=False)


def _p(*devices: str) -> Any:
    return SimpleNamespace(duet_devices=list(devices))


def test_duet_devices_are_checked_against_this_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.spec.duet import duet_devices_obstacle

    _Host(monkeypatch, count=0)
    key, why = duet_devices_obstacle(_p("0", "1"), "local", "auto")  # type: ignore[misc]
    assert key == "protocol.duet_devices"
    assert why.startswith("['0', '1'] gives each slice devices, but this host has no CUDA or "
                          "MUSA device this process can use (no CUDA device is visible)")
    assert "with launcher=slurm the compute node's devices are not checked" in why
    _Host(monkeypatch, "cuda", count=2)
    assert duet_devices_obstacle(_p("0", "1"), "local", "auto") is None
    assert duet_devices_obstacle(_p("GPU-1a2b", "GPU-3c4d"), "inline", "cuda") is None
    key, why = duet_devices_obstacle(_p("0", "2"), "local", "cuda")  # type: ignore[misc]
    assert (key, why.split(";")[0]) == ("protocol.duet_devices[1]",
                                        "cuda device 2 is not on this host, which has cuda 0, 1")
    # this process's own list: an arm's list replaces it, so its entries are the host's ids
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert duet_devices_obstacle(_p("2", "3"), "local", "cuda") is None
    key, why = duet_devices_obstacle(_p("0", "1"), "local", "cuda")  # type: ignore[misc]
    assert key == "protocol.duet_devices[0]" and "(CUDA_VISIBLE_DEVICES is set)" in why


def test_duet_devices_are_not_checked_where_slurm_runs_the_trials(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.spec.duet import duet_devices_obstacle

    host = _Host(monkeypatch, count=0)
    assert duet_devices_obstacle(_p("0", "1"), "slurm", "cuda") is None
    assert host.asked == 0  # the submitting host's devices are not asked about


@needs_two
def test_duet_devices_this_host_lacks_are_refused_before_the_run(
        compose: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """They were accepted silently and written into trial.json."""
    _Host(monkeypatch, count=0)
    devices = "protocol.duet_devices=['0','1']"
    with pytest.raises(ConfigError, match=r"^protocol\.duet_devices: \['0', '1'\] gives each "
                                          r"slice devices, but this host has no CUDA or MUSA"):
        compose([*DUET, "protocol.pairing=duet", devices])
    with pytest.raises(ConfigError, match=r"^protocol\.duet_devices: "):  # declared, auto too
        compose([*DUET, "protocol.pairing=auto", devices])
    # Slurm runs the trials on a compute node: not checked here
    assert compose([*DUET, "protocol.pairing=duet", devices, "launcher=slurm"]).protocol.duet_devices
