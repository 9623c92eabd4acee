"""The environment report: MUSA detection through the device seam (a fake torch_musa installed
on sys.path and imported for real), the CPU report on this machine, fingerprints, env_report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.platform import device as devmod
from orchestrator.platform import environment as envmod
from tests.helpers.musa import fake_musa_installer

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "helpers" / "fake_musa"


@pytest.fixture
def fake_musa(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Install the fake torch_musa for one test; undo everything it registered afterwards."""
    yield from fake_musa_installer(monkeypatch)


def test_musa_present_is_detected_from_inside_the_process(fake_musa: Any) -> None:
    fake_musa("present")
    m = devmod.musa_facts()
    assert m["status"] == "present" and m["available"] is True
    assert m["device_count"] == 2
    assert [(d["name"], d["arch"]) for d in m["devices"]] == [("MTT S4000", "2.2"),
                                                             ("MTT S5000", "3.1")]
    assert m["devices"][0]["total_memory_bytes"] == 48 * 2**30
    assert m["devices"][1]["multi_processor_count"] == 192
    assert m["mudnn_version"] == 2800 and m["mccl_version"] == "2.11.4"
    assert m["torch_musa_version"] == "2.7.1+fake000" and m["torch_musa_git"].startswith("fake")
    assert devmod.torch_build()["musa"] == "4.2.0"
    assert devmod.available_kinds()[0] == "musa"
    fp = envmod.fingerprint("auto")
    assert fp["device_kind"] == "musa" and fp["torch_musa"] == "2.7.1+fake000"
    assert fp["mccl"] == "2.11.4" and fp["mudnn"] == 2800 and fp["torch_musa"]
    assert fp["devices"] == ["MTT S4000 (arch 2.2, 48.0 GiB)", "MTT S5000 (arch 3.1, 80.0 GiB)"]


def test_musa_report_completes_when_its_kernels_cannot_run(fake_musa: Any) -> None:
    fake_musa("present")
    report = envmod.gather("auto")
    assert report["selected_device"]["kind"] == "musa"
    assert report["musa"]["status"] == "present"
    # the fake registers no kernels: the probe must say so rather than guess from versions
    sdpa = report["attention"]["sdpa"]
    assert all(r != "ok" for res in sdpa.values() for r in res.values())
    assert report["attention"]["sdpa_usable"] == {k: [] for k in sdpa}
    assert report["distributed"]["mccl"] is True
    assert report["fingerprint"]["device_kind"] == "musa"


@pytest.mark.parametrize(
    ("mode", "status", "reason"),
    [
        ("import_broken", "broken", "undefined symbol"),
        ("no_register", "broken", "torch.musa is not registered"),
        ("driver_broken", "present", "driver version is insufficient"),
        ("nodevice", "present", None),
    ],
)
def test_broken_or_empty_musa_installs_are_recorded_not_fatal(
    fake_musa: Any, mode: str, status: str, reason: str | None
) -> None:
    fake_musa(mode)
    m = devmod.musa_facts()
    assert m["status"] == status
    assert m["available"] is False and m["device_count"] == 0
    if reason:
        assert any(reason in str(e) for e in m["errors"].values()), m["errors"]
    assert devmod.available_kinds() == ["cpu"]  # falls back honestly
    report = envmod.gather("auto")
    assert report["selected_device"]["kind"] == "cpu"
    assert report["musa"]["status"] == status
    with pytest.raises(Exception, match="sees only cpu"):
        devmod.resolve("musa")


def test_musa_without_mccl_says_why(fake_musa: Any) -> None:
    fake_musa("no_mccl")
    m = devmod.musa_facts()
    assert m["mccl_version"] is None and "USE_MCCL=0" in m["errors"]["mccl"]


def test_musa_absent_on_this_machine() -> None:
    m = devmod.musa_facts()
    assert m["status"] == "absent" and m["available"] is False
    assert "torch_musa" in m["errors"]["import"]


def test_cpu_report_is_complete_and_honest() -> None:
    r = envmod.gather("cpu")
    assert r["errors"] == {}
    assert r["torch"]["version"] == torch.__version__
    assert r["torch"]["cuda"] == torch.version.cuda
    assert r["selected_device"]["kind"] == "cpu"
    assert r["cpu"]["logical_cores"] == os.cpu_count() and r["cpu"]["model"]
    assert r["musa"]["status"] == "absent"
    assert r["cuda"]["available"] is torch.cuda.is_available()
    assert set(r["visibility"]) >= {"MUSA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}
    assert r["distributed"]["gloo"] is True and r["distributed"]["gloo_probe"] == "ok"
    # sdpa math always runs on CPU; the efficient kernel never does (it is CUDA-only)
    assert r["attention"]["sdpa"]["math"]["float32"] == "ok"
    assert "float32" not in r["attention"]["sdpa_usable"]["efficient"]
    assert "CPU" in r["profilers"]["torch_activities"]
    for tool in ("msys", "mcu", "nsys", "ncu"):
        assert "found" in r["profilers"]["tools"][tool]
    assert r["fingerprint"]["device_kind"] == "cpu"
    json.dumps(r)  # serialisable as is


def test_env_switches_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_MUSA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("MCCL_DEBUG", "INFO")
    monkeypatch.setenv("SOME_UNRELATED_VAR", "x")
    sw = envmod.env_switches()
    assert sw["PYTORCH_MUSA_ALLOC_CONF"] == "expandable_segments:True"
    assert sw["OMP_NUM_THREADS"] == "2" and sw["MCCL_DEBUG"] == "INFO"
    assert "SOME_UNRELATED_VAR" not in sw and "ORCHESTRATOR_LAUNCH_T0" not in sw


def test_compare_names_what_differs() -> None:
    a = {"torch": "2.13.0", "device_kind": "musa", "driver": "3.0.1"}
    b = {"torch": "2.13.0", "device_kind": "musa", "driver": "3.1.0"}
    assert envmod.compare([("t1", a), ("t2", a)]) == []
    diff = envmod.compare([("t1", a), ("t2", b), ("t3", b), ("t4", None)])
    assert diff == ['driver: "3.0.1" (1 trial), "3.1.0" (2 trials)']


def test_private_registry_is_hidden_in_image_refs() -> None:
    assert envmod._public_image("registry.acme.internal:5000/ml/train:1") == "<registry>/ml/train:1"
    assert envmod._public_image("nvcr.io/nvidia/pytorch:24.01") == "nvcr.io/nvidia/pytorch:24.01"
    assert envmod._public_image("ubuntu:22.04") == "ubuntu:22.04"


def test_env_report_cli_with_a_fake_musa_install(tmp_path: Path) -> None:
    out = tmp_path / "odd dir ü" / "environment.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKE), str(ROOT)]),
               FAKE_MUSA_MODE="present", HF_TOKEN="hf_" + "q" * 30)
    proc = subprocess.run([sys.executable, "-m", "orchestrator.tools.env_report", "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stderr
    r = json.loads(out.read_text())
    assert r["gathered_in"] == "env_report"
    assert r["musa"]["status"] == "present" and r["selected_device"]["kind"] == "musa"
    assert r["torch"]["musa"] == "4.2.0"
    assert "q" * 30 not in out.read_text()


@pytest.mark.parametrize("argv,match", [
    (["--extra-pattern", "([a-z"], "error: --extra-pattern[0]: '([a-z' is not a valid"),
    (["--device", "foo"], "error: env_report: argument --device: invalid choice: 'foo'"),
    (["--no-such-flag"], "error: env_report: unrecognized arguments: --no-such-flag"),
    (["-o", "{dir}"], "is a directory; give a file name such as"),
])
def test_env_report_cli_bad_input_is_one_line_exit_2(tmp_path: Path, argv: list[str],
                                                     match: str) -> None:
    argv = [a.replace("{dir}", str(tmp_path)) for a in argv]
    if "-o" not in argv:
        argv += ["-o", str(tmp_path / "x.json")]
    proc = subprocess.run([sys.executable, "-m", "orchestrator.tools.env_report", *argv],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and match in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""
    assert not (tmp_path / "x.json").exists()


def test_env_report_standalone_json_on_stdout_in_the_tools_style() -> None:
    """The real module CLI on this machine, no fake: it finishes, --json prints the complete
    report on stdout, sanitized (no home path or user name)."""
    home = os.path.expanduser("~")
    proc = subprocess.run([sys.executable, "-m", "orchestrator.tools.env_report", "--json",
                           "--device", "cpu"],
                          capture_output=True, text=True, timeout=300, check=False,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["gathered_in"] == "env_report" and r["errors"] == {}
    assert r["selected_device"]["kind"] == "cpu" and r["torch"]["version"] == torch.__version__
    if len(home) > 1:
        assert home not in proc.stdout


def test_a_failing_general_probe_is_recorded_and_the_report_completes(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> dict[str, Any]:
        raise PermissionError("/proc/cpuinfo: permission denied")

    monkeypatch.setattr(envmod, "cpu_facts", broken)
    monkeypatch.setattr(envmod, "container_facts", lambda: 1 / 0)
    r = envmod.gather("cpu")
    assert r["errors"] == {"cpu": "PermissionError: /proc/cpuinfo: permission denied",
                           "container": "ZeroDivisionError: division by zero"}
    assert r["cpu"] is None and r["container"] is None
    # everything after the failing probes was still gathered
    assert r["torch"]["version"] == torch.__version__ and r["attention"]["sdpa"]["math"]
    assert r["fingerprint"]["device_kind"] == "cpu" and r["env_switches"] is not None
    json.dumps(r)


# --------------------------------------------------------------------------- requested device


TINY_SWEEP = ["workload=gpt_test", "protocol=quick", "+sweep=fa2_tiling"]


@pytest.mark.parametrize(("mode", "reason"), [
    ("nodevice", r"no MUSA device is visible to this process; check the MUSA driver"),
    ("driver_broken", (r"torch\.musa cannot query its devices \(RuntimeError: MUSA driver "
                       r"version is insufficient")),
    ("import_broken", r"torch_musa import failed: RuntimeError: .*undefined symbol"),
    ("no_register", r"torch_musa imported but did not register torch\.musa"),
])
def test_a_requested_musa_this_process_cannot_see_is_refused_before_any_trial(
    fake_musa: Any, compose: Any, mode: str, reason: str
) -> None:
    from orchestrator.cli.main import check_device
    from orchestrator.core.errors import ConfigError

    fake_musa(mode)
    cfg = compose([*TINY_SWEEP, "device=musa"])
    with pytest.raises(ConfigError, match=rf"^device: 'musa' requested but this process cannot "
                                          rf"use it: {reason}.*use device=auto"):
        check_device(cfg)


def test_a_visible_musa_passes_and_auto_cpu_never_ask_torch(
    fake_musa: Any, compose: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.cli.main import check_device

    fake_musa("present")
    check_device(compose([*TINY_SWEEP, "device=musa"]))
    assert devmod.unavailable_reason("musa:1") is None
    assert "this process sees 2 (musa:0..1)" in str(devmod.unavailable_reason("musa:2"))

    def no_torch() -> Any:
        raise AssertionError("auto/cpu must not ask torch")

    monkeypatch.setattr(devmod, "_torch", no_torch)
    for device in ("auto", "cpu"):
        check_device(compose([*TINY_SWEEP, f"device={device}"]))


def test_a_requested_cuda_this_process_cannot_see_is_refused(
    compose: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from orchestrator.cli.main import check_device
    from orchestrator.core.errors import ConfigError

    cfg = compose([*TINY_SWEEP, "device=cuda"])
    cpu_build = SimpleNamespace(__version__="2.9.0+cpu", version=SimpleNamespace(cuda=None, hip=None))
    monkeypatch.setattr(devmod, "_torch", lambda: cpu_build)
    with pytest.raises(ConfigError, match=r"CPU-only build without CUDA support"):
        check_device(cfg)

    def unavailable() -> bool:
        import warnings

        warnings.warn("CUDA initialization: The NVIDIA driver on your system is too old", stacklevel=1)
        return False

    no_gpu = SimpleNamespace(__version__="2.9.0+cu128", version=SimpleNamespace(cuda="12.8", hip=None),
                             cuda=SimpleNamespace(is_available=unavailable, device_count=lambda: 0))
    monkeypatch.setattr(devmod, "_torch", lambda: no_gpu)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigError, match=r"no CUDA device is visible to this process \(CUDA "
                       r"initialization: The NVIDIA driver on your system is too old\); check the "
                       r"NVIDIA driver \(nvidia-smi\); CUDA_VISIBLE_DEVICES='' is set"):
        check_device(cfg)


def test_slurm_and_command_workloads_are_not_checked_here(
    compose: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.cli.main import check_device

    monkeypatch.setattr(devmod, "unavailable_reason", lambda requested: "absent here")
    # the submitting host need not have the GPU: the trials run on the compute nodes
    check_device(compose([*TINY_SWEEP, "device=musa", "launcher=slurm"]))
    assert "launcher=slurm runs the trials on the compute nodes" in caplog.text
    # the external trainer uses the device, in its own environment
    check_device(compose(["workload=command_example", "+sweep=example_delay", "device=cuda"]))


def test_cli_refuses_an_unavailable_device_in_one_line_before_any_work(tmp_path: Path) -> None:
    # this machine has no torch_musa: the campaign must not start (no run directory)
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "+sweep=fa2_tiling", "device=musa"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: device: 'musa' requested"), proc.stderr
    assert "torch_musa not importable" in lines[0]
    assert not (tmp_path / "outputs").exists()
