"""The MUSA seam as torch_musa 2.7.1 behaves (issue 31), one section per fact, each at the device
seam with a fake that does what the real package does per its source (tests/helpers/fake_musa:
the autoload entry point, poison_fork in the device count, USE_MCCL=0, ProfilerActivity.MUSA
as PrivateUse1, Event timing; tests/helpers/fake_mate: MATE's flash_attn; fake_musa_bin: both
output formats of the MUSA version tools; fake_pymtml: MtLink). No MUSA measurement anywhere.
"""

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
from orchestrator.platform import fabric
from orchestrator.core import musa_rules
from orchestrator.core.errors import BackendUnavailable, ConfigError
from tests.helpers.musa import FAKE, FAKE_BIN, FAKE_MATE, FAKE_PYMTML, fake_musa_installer

ROOT = Path(__file__).resolve().parents[2]
MUSA0 = devmod.DeviceInfo("musa", 0, "MTT S4000", 2)


@pytest.fixture
def fake_musa(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from fake_musa_installer(monkeypatch)


def _autoload_error(fake_musa: Any) -> RuntimeError:
    """torch's own error when its autoloaded torch_musa raises (torch/__init__.py)."""
    fake_musa("import_broken")
    with pytest.raises(RuntimeError) as info:
        torch._import_device_backends()  # what `import torch` runs last: the entry points
    return info.value


# --------------------------------------------------------------------------- 1. autoload


def test_a_broken_autoloaded_torch_musa_is_one_line_naming_the_variable(fake_musa: Any) -> None:
    exc = _autoload_error(fake_musa)
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in str(exc)  # torch's message, from the real code
    why = devmod.autoload_failure(exc)
    assert why is not None and "\n" not in why
    assert why.startswith("import torch failed: its autoloaded backend extension torch_musa "
                          "raised (RuntimeError: torch_musa/_MUSAC.so: undefined symbol")
    assert why.endswith("or set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to import torch without it")
    assert devmod.autoload_failure(RuntimeError("something else")) is None
    # remembered: a second `import torch` would fail differently, so the seam does not retry
    with pytest.raises(BackendUnavailable, match="^import torch failed: .*torch_musa"):
        devmod._torch()
    with pytest.raises(BackendUnavailable, match="TORCH_DEVICE_BACKEND_AUTOLOAD=0"):
        devmod.resolve("auto")
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in str(devmod.unavailable_reason("musa"))
    facts = devmod.backend_autoload()
    assert facts["entry_points"] == ["torch_musa = torch_musa:_autoload"]
    assert facts["error"] == why and facts["enabled"] is True


def test_a_worker_whose_torch_import_fails_records_unavailable(
        fake_musa: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.worker import bootstrap as worker

    exc = _autoload_error(fake_musa)

    def load(name: str) -> Any:
        raise exc  # the recipe's module is where a worker first imports torch

    monkeypatch.setattr(worker, "load_recipe", load)
    with pytest.raises(BackendUnavailable, match="^import torch failed: its autoloaded backend "
                       r"extension torch_musa raised .*TORCH_DEVICE_BACKEND_AUTOLOAD=0"):
        worker.start_worker({"kind": "synthetic", "recipe": "synthetic", "name": "x",
                             "buckets": [{"name": "b", "seq_len": 1, "micro_batch": 1}]}, "auto")


def test_the_report_with_autoload_off_records_the_variable(
        fake_musa: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_musa("import_broken")
    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # torch imported without it
    r = envmod.gather("auto")
    assert r["torch_backend_autoload"]["value"] == "0"
    assert r["torch_backend_autoload"]["enabled"] is False
    assert r["env_switches"]["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
    assert r["musa"]["status"] == "broken" and r["selected_device"]["kind"] == "cpu"


def test_env_report_when_import_torch_fails_in_torch_musa(tmp_path: Path) -> None:
    """A real `import torch` that autoloads the broken fake: the report completes, says why in
    one line and records the variable; nothing tries a second import."""
    out = tmp_path / "environment.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKE), str(ROOT)]),
               FAKE_MUSA_MODE="import_broken")
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    proc = subprocess.run([sys.executable, "-m", "orchestrator.tools.env_report", "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    auto = r["torch_backend_autoload"]
    assert auto["variable"] == "TORCH_DEVICE_BACKEND_AUTOLOAD" and auto["value"] is None
    assert auto["entry_points"] == ["torch_musa = torch_musa:_autoload"]
    assert "undefined symbol" in auto["error"] and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in auto["error"]
    assert list(r["errors"]) == ["torch"] and "\n" not in r["errors"]["torch"]
    assert r["fingerprint"] == {"skipped": auto["error"]}
    assert "TORCH_LIBRARY" not in out.read_text()  # no second import of torch


# --------------------------------------------------------------------------- 2. fork safety


def test_the_fork_server_preload_counts_no_device(fake_musa: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """torch_musa's import counts devices (poison_fork): the fork server must not import it.
    Fails if the preload asks torch_musa anything."""
    from orchestrator.launch import zygote

    fake_musa("present")
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    assert zygote.preload_base() == {}
    assert "torch_musa" not in sys.modules  # so no _musa_getDeviceCount ran
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD" not in os.environ  # restored after the import
    assert devmod.fork_safety() is None and zygote.probe_child() is None
    # the fake poisons as the real one does: once anything counts, forks are bad and seen
    import torch_musa  # type: ignore[import-not-found]

    assert torch_musa.calls == [os.getpid()]  # its import counted (as _dynamo/__init__.py)
    assert zygote.probe_child() == "musa was touched in the fork server (torch marks its forks " \
                                   "unusable)"


def test_a_child_of_the_fork_server_uses_musa(tmp_path: Path) -> None:
    """The real fork server, with the fake torch_musa on its path (so `import torch` would
    autoload it): it forks soundly, counts no device itself, and its child resolves MUSA."""
    from orchestrator.launch.forkserver import ForkServer

    log = tmp_path / "counts.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKE), str(ROOT)]),
               FAKE_MUSA_MODE="present", FAKE_MUSA_CALL_LOG=str(log))
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    server = ForkServer(sys.executable, env)
    try:
        server.preload([])
        assert server.hazard is None, server.hazard
        out, err = tmp_path / "out.log", tmp_path / "err.log"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            rc = server.run("tests.helpers.musa_child", [], env, fo, fe, timeout_s=120)
        assert rc == 0, err.read_text()
        assert out.read_text().split() == ["MTT", "S4000", "2", "bad_fork=False"]
        pids = {int(p) for p in log.read_text().split()}
        assert pids and server.pid not in pids  # only the child counted devices
    finally:
        server.close()


# --------------------------------------------------------------------------- 3. MCCL


def test_mccl_is_the_registered_backend_not_the_importable_module(fake_musa: Any) -> None:
    fake_musa("present")
    m = devmod.musa_facts()
    assert m["mccl_built"] is True and m["mccl_version"] == "2.11.4"
    d = devmod.distributed_backends()
    assert d["mccl"] is True and d["is_mccl_available"] is True and "mccl" in d["registered"]


def test_a_use_mccl_0_build_has_the_module_but_no_backend(fake_musa: Any) -> None:
    fake_musa("no_mccl")
    m = devmod.musa_facts()
    assert hasattr(torch.musa, "mccl")  # always importable: its presence proves nothing
    with pytest.raises(RuntimeError, match="built without MCCL support"):
        torch.musa.mccl.version()
    assert m["mccl_built"] is False and m["mccl_version"] is None
    assert "USE_MCCL=0" in m["errors"]["mccl"]
    d = devmod.distributed_backends()
    assert d["is_mccl_available"] is True  # the patched-in constant
    assert d["mccl"] is False and "mccl" not in d["registered"]


# --------------------------------------------------------------------------- 4. profiler


def test_device_events_only_where_the_profiler_supports_them(
        fake_musa: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_musa("present")
    assert devmod.musa_module() is not None
    act = torch.profiler.ProfilerActivity
    assert act.MUSA == act.PrivateUse1  # torch_musa's alias
    # this CPU build's Kineto records no PrivateUse1 events
    assert act.PrivateUse1 not in torch.profiler.supported_activities()
    with pytest.raises(BackendUnavailable, match=r"ProfilerActivity.MUSA \(PrivateUse1\) is not "
                       r"in torch.profiler.supported_activities\(\)"):
        devmod.profiler_activities_for(MUSA0)
    assert devmod.profiler_activities_for(MUSA0, required=False) == [act.CPU]
    assert devmod.profiler_activities_for("cpu") == [act.CPU]
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {act.CPU, act.PrivateUse1})
    assert devmod.profiler_activities_for(MUSA0) == [act.CPU, act.PrivateUse1]


def test_flops_profiling_asks_the_seam_for_its_activities(fake_musa: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.platform import flops

    fake_musa("present")
    devmod.musa_module()
    asked: list[Any] = []
    real = devmod.profiler_activities_for

    def spy(dev: Any, required: bool = True) -> Any:
        asked.append((dev, required))
        return real(dev, required)

    monkeypatch.setattr(devmod, "profiler_activities_for", spy)
    a = torch.ones(8, 8)
    res = flops.profiler_attributed_flops(lambda: a @ a, steps=1, warmup=0, device_kind="musa")
    assert asked == [("musa", False)]  # PrivateUse1 unsupported here: CPU events only
    assert res.time_basis == "cpu" and res.flops_per_step > 0


# --------------------------------------------------------------------------- 5. time, memory


def test_device_timer_and_allocator_figures_at_the_seam(fake_musa: Any) -> None:
    fake_musa("present")
    devmod.musa_module()
    tm = sys.modules["torch_musa"]
    timer = devmod.device_timer(MUSA0)
    assert timer is not None
    timer.start()
    timer.stop()
    assert timer.elapsed_s() >= 0.0  # elapsed_time is in ms; the seam gives seconds
    tm._fake_alloc(3 * 2**20)
    tm._fake_alloc(-3 * 2**20)
    devmod.reset_peak_memory(MUSA0)
    tm._fake_alloc(2**20)
    assert devmod.memory_figures(MUSA0) == {"peak_mem_bytes": 2**20,
                                            "reserved_mem_bytes": 4 * 2**20,
                                            "peak_reserved_mem_bytes": 4 * 2**20}
    cpu = devmod.DeviceInfo("cpu", None, "cpu", 1)
    assert devmod.device_timer(cpu) is None and devmod.memory_figures(cpu) is None


class _Timer:
    def __init__(self) -> None:
        self.n = 0

    def start(self) -> None:
        self.n += 1

    def stop(self) -> None:
        pass

    def elapsed_s(self) -> float:
        return 0.001


def test_paired_arms_get_their_own_peaks_and_device_times(
        compose: Any, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/helpers/memory_arms.py allocates per step what its arm's setting says; the peak
    is reset before each arm's blocks, so the small arm no longer reports the big arm's peak."""
    from orchestrator.campaign.run import run_campaign
    from tests.helpers import memory_arms

    monkeypatch.setattr(devmod, "reset_peak_memory", lambda dev: memory_arms.reset())
    monkeypatch.setattr(devmod, "memory_figures", lambda dev: memory_arms.figures())
    monkeypatch.setattr(devmod, "device_timer", lambda dev: _Timer())
    run_campaign(compose([
        "workload=synthetic", "+sweep=calibrate", "protocol=default", "protocol.pairing=steps",
        "protocol.measured_steps=4", "protocol.measured_min_s=0", "protocol.paired_min_s=0",
        "protocol.block_steps=2", "workload.units_per_token=0.05", "launcher=inline",
        "workload.recipe=tests.helpers.memory_arms:build", "sweep.values=[3.0]",
        "sweep.labels=[big]", "protocol.aa_arm=false", "protocol.repeats=1",
        "protocol.max_rounds=1", "protocol.correctness.mode=off"]), run_dir)
    recs = {r["arm_label"]: r for r in (json.loads(p.read_text())
                                        for p in run_dir.glob("trials/*/trial.json"))}
    base, big = recs[next(k for k in recs if k != "big")], recs["big"]
    assert base["status"] == big["status"] == "ok"
    assert big["peak_mem_bytes"] == memory_arms.step_bytes(3.0)
    assert base["peak_mem_bytes"] == memory_arms.step_bytes(0.0) < big["peak_mem_bytes"]
    assert big["peak_mem_source"] == "cpu allocator peak (this arm's blocks)"
    assert big["peak_reserved_mem_bytes"] >= big["peak_mem_bytes"]
    assert big["device_time_median_s"] == 0.001 and big["host_launch_median_s"] >= 0
    import pandas as pd

    steps = pd.read_csv(next(run_dir.glob("trials/*/steps.csv")))
    assert {"device_time_s", "host_launch_s"} <= set(steps.columns)


# --------------------------------------------------------------------------- 6. attention


def test_musa_sdpa_rules_from_torch_musa_source() -> None:
    refuse = musa_rules.musa_sdpa_refusal
    for kernel in ("efficient", "cudnn"):
        assert "knows only flash and math" in str(refuse(kernel, "bfloat16", 64, 64, ["2.2"]))
    assert refuse("math", "float32", 256, 256, ["2.1"]) is None  # muDNN math runs anything
    assert refuse("auto", "float32", 64, 64, ["2.1"]) is None
    assert refuse("flash", "bfloat16", 64, 64, ["2.2", "3.1"]) is None
    assert refuse("flash", "float16", 128, 128, ["2.2"]) is None
    assert refuse("flash", "bfloat16", 192, 128, ["3.1"]) is None  # the exceptions
    assert refuse("flash", "bfloat16", 160, 160, ["2.2"]) is None
    assert "fp16 or bf16" in str(refuse("flash", "float32", 64, 64, ["2.2"]))
    assert "head dims <= 128" in str(refuse("flash", "bfloat16", 256, 256, ["3.1"]))
    assert "arch >= 2.2" in str(refuse("flash", "bfloat16", 64, 64, ["3.1", "2.1"]))
    assert refuse("flash", "bfloat16", 64, 64, [None]) is None  # unknown arch: cannot refuse


def test_mate_flash_attn_is_reported_as_what_it_exports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FAKE_MATE))
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    try:
        fa = envmod._flash_attn(MUSA0)
    finally:
        sys.modules.pop("flash_attn", None)
    assert fa["installed"] is True and fa["version"] == "0.1.3"  # from package metadata
    assert fa["distributions"] == ["mate-flash-attention"] and fa["provider"].startswith("MATE")
    assert fa["exports"] == {"flash_attn_func": False, "flash_attn_varlen_func": True,
                             "flash_attn_with_kvcache": True}
    assert fa["usable"] is False and fa["error"].startswith("no flash_attn_func")


def test_the_musa_attention_inventory(fake_musa: Any) -> None:
    fake_musa("present")
    a = envmod.gather("auto")["attention"]
    assert a["selector"].startswith("torch_musa's selector (flash, math only")
    assert "muDNN" in a["musa"]["implementation"]["math"]
    assert a["musa"]["arch"] == "2.2" and a["musa"]["flash_refusal_bf16_head64"] is None
    assert a["flash_attn"] == {"installed": False}


SDPA = ["workload=gpt_test", "protocol=quick", "+sweep=sdpa_kernel", "device=musa"]


def test_the_sdpa_kernel_sweep_refuses_what_musa_cannot_run(fake_musa: Any,
                                                            compose: Any) -> None:
    fake_musa("present")
    with pytest.raises(ConfigError) as info:
        compose(SDPA)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("sweep.values[0]: arm 'flash' cannot run on musa: "
                                              "MUSA flash SDPA runs fp16 or bf16 only")
    assert "arm 'efficient' cannot run on musa: torch_musa's SDPA selector knows only" in msg
    assert "arm 'cudnn' cannot run" in msg
    assert msg.endswith("drop 'flash', 'efficient', 'cudnn' from sweep.values (keeping "
                        "'math'), or run on another device")
    compose([*SDPA, "workload.precision=bf16", "sweep.values=[flash,math]"])  # runnable


def test_an_s80_refuses_flash_and_cpu_leaves_it_to_the_gate(fake_musa: Any,
                                                           compose: Any) -> None:
    fake_musa("s80")
    with pytest.raises(ConfigError, match=r"^sweep.values\[0\]: arm 'flash' cannot run on musa: "
                       r"MUSA flash SDPA needs mp arch >= 2.2, a visible device has arch 2.1"):
        compose([*SDPA, "workload.precision=bf16", "sweep.values=[flash,math]"])
    compose([*SDPA[:-1], "device=cpu"])  # CPU: the correctness gate finds out, as before


def test_the_fa2_sweep_refuses_fp32_flash_on_musa(fake_musa: Any, compose: Any) -> None:
    fake_musa("present")
    with pytest.raises(ConfigError, match=r"^sweep.values\[1\]: arm 'sdpa-flash' cannot run on "
                       r"musa: .*keeping 'eager', 'tiled'"):
        compose(["workload=gpt_tiny", "protocol=quick", "+sweep=fa2", "device=musa"])


# --------------------------------------------------------------------------- 7. versions


JSON_OUT = ('musa_toolkits:{"version":"4.1.0","gitbranch":"HEAD","gittag":"Notag",\n'
            ' "commitid":"1301a3d6","commitdate":"2025-06-2317:39:48+0800"}')
TEXT_OUT = ("musa_toolkits version: 5.2.0\ntoolkit tag: 20260602_master\n"
            "toolkit commit: 8c44cbed02a79be2066f1f62bdca039177f71d51")


def test_version_tool_output_in_both_formats() -> None:
    old = musa_rules.parse_version_tool("musa_toolkits_version", JSON_OUT)
    assert old == {"format": "json", "version": "4.1.0", "gitbranch": "HEAD", "gittag": "Notag",
                   "commitid": "1301a3d6", "commitdate": "2025-06-2317:39:48+0800"}
    new = musa_rules.parse_version_tool("musa_toolkits_version", TEXT_OUT)
    assert new == {"format": "text", "version": "5.2.0", "toolkit_tag": "20260602_master",
                   "toolkit_commit": "8c44cbed02a79be2066f1f62bdca039177f71d51"}
    odd = musa_rules.parse_version_tool("mudnn_version", "segmentation fault")
    assert odd == {"format": "unknown", "version": None, "output": "segmentation fault"}
    assert [musa_rules.version_number(v) for v in ("4.2.0", "5.2.0", None)] == [4020, 5020, None]


@pytest.mark.parametrize(("fmt", "version"), [("json", "4.1.0"), ("text", "5.2.0")])
def test_the_report_runs_the_musa_version_tools(monkeypatch: pytest.MonkeyPatch, fmt: str,
                                                version: str) -> None:
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MUSA_TOOL_FORMAT", fmt)
    for tool in envmod.MUSA_VERSION_TOOLS:
        out = envmod.tool_version(tool, [])
        assert out["found"] is True and out["format"] == fmt and out["version"] == version


def test_mccl_version_and_compile_facts_in_the_report(fake_musa: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fake_musa("present")
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    r = envmod.gather("auto")
    assert r["musa"]["mccl_version"] == "2.11.4"  # torch.musa.mccl.version()
    assert r["musa"]["toolkit_version"] == r["musa"]["runtime_version"] == "5.2.0"
    assert r["musa"]["mudnn_tool_version"] == "5.2.0" and r["musa"]["mudnn_version"] == 2800
    assert r["driver_tools"]["musa_runtime_version"]["format"] == "text"
    c = r["compile"]
    assert set(c) >= {"inductor_compile_threads", "triton"}
    import torch._inductor.config as inductor_config  # what a compiling process has loaded

    assert envmod.compile_facts()["inductor_compile_threads"] == inductor_config.compile_threads


# --------------------------------------------------------------------------- 8. topology


@pytest.fixture
def pymtml(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.syspath_prepend(str(FAKE_PYMTML))
    monkeypatch.delitem(sys.modules, "pymtml", raising=False)
    import pymtml as mod  # type: ignore[import-not-found]

    yield mod
    sys.modules.pop("pymtml", None)


def test_mtlink_domains_through_pymtml(pymtml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSA_VISIBLE_DEVICES", raising=False)
    ids = [devmod.fabric_identity("musa", i) for i in range(4)]
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2]  # two MtLink islands
    assert all(str(i).startswith("mtlink:") for i in ids)
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "2,1")  # torch's 0 is the host's 2
    assert devmod.fabric_identity("musa", 0) == ids[2]
    assert fabric.mtml_topology_level(0, 1) == pymtml.MTML_TOPOLOGY_SYSTEM
    pymtml.LINKS = []  # no link up (PCIe only): unknown, the host decides
    monkeypatch.delenv("MUSA_VISIBLE_DEVICES")
    assert devmod.fabric_identity("musa", 0) is None
    from recipes.muon import topology

    assert topology.local_identity("musa", 0).startswith("host:")


def test_no_pymtml_means_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pymtml", None)  # import raises ImportError
    assert devmod.fabric_identity("musa", 0) is None


def _nvml(state: int, cluster: bytes, clique: int) -> Any:
    from types import SimpleNamespace

    info = SimpleNamespace(clusterUuid=cluster, cliqueId=clique, state=state)
    return SimpleNamespace(nvmlInit=lambda: None, NVML_GPU_FABRIC_STATE_COMPLETED=3,
                           nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
                           nvmlDeviceGetHandleByIndex=lambda i: i,
                           nvmlDeviceGetGpuFabricInfo=lambda h: info)


def test_nvml_fabric_info_alone_is_not_a_multi_node_nvlink_domain(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _nvml(3, b"\x01" * 16, 7))
    refused = []
    assert fabric.nvml_fabric_identity(0, None, probe=lambda i: refused.append(i) or
                                       "FABRIC handle probe failed") is None
    assert refused == [0]
    assert fabric.nvml_fabric_identity(0, None, probe=lambda i: None) == \
        "nvml:" + "01" * 16 + ":7"


class _FakeCu:
    """libcuda's calls the FABRIC probe makes; ``fail`` names the one that fails."""

    def __init__(self, fabric_supported: int, fail: str | None = None) -> None:
        self.supported, self.fail, self.released = fabric_supported, fail, 0

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> int:
            if name == "cuDeviceGetAttribute":
                args[0]._obj.value = self.supported
            if name == "cuMemRelease":
                self.released += 1
            return 1 if name == self.fail else 0

        return call


def test_the_fabric_handle_probe_as_nccl_does_it() -> None:
    assert fabric.cuda_fabric_handle_probe(0, load=lambda: _FakeCu(1)) is None
    assert "does not support FABRIC" in str(fabric.cuda_fabric_handle_probe(
        0, load=lambda: _FakeCu(0)))
    cu = _FakeCu(1, fail="cuMemExportToShareableHandle")
    why = fabric.cuda_fabric_handle_probe(0, load=lambda: cu)
    assert "cuMemExportToShareableHandle returned CUresult 1" in str(why) and cu.released == 1

    def no_lib() -> Any:
        raise OSError("libcuda.so.1: cannot open shared object file")

    assert "libcuda not loadable" in str(fabric.cuda_fabric_handle_probe(0, load=no_lib))
