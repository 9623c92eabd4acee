"""The hardware registry, device-name matching (MUSA faked at the device seam), the peak a
trial's MFU uses, and the real matmul calibration."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.platform import device as devmod
from orchestrator.platform import hardware as hw
from orchestrator.core.errors import ConfigError

FIGURES = ("memory_bandwidth_gbps", "intra_domain_bandwidth_gbps", "inter_domain_bandwidth_gbps",
           "collective_latency_us", "domain_size")
REQUIRED = {"cpu", "a100", "h100", "h200", "b200", "gb200", "s4000", "s5000"}


def test_registry_has_every_required_sku_with_sources() -> None:
    reg = hw.load_registry()
    assert REQUIRED <= set(reg)
    for key, e in reg.items():
        assert e.name == key
        assert set(e.peak_tflops) == set(hw.DTYPES)
        assert e.kind_of("peak_tflops") in hw.FIGURE_KINDS
        assert "peak_tflops" in e.sources, key
        # every figure that is given (not null) names where it comes from and its kind
        given = [f for f in FIGURES if getattr(e, f) is not None]
        if any(v is not None for v in e.peak_tflops.values()):
            given.append("peak_tflops")
        for f in given:
            assert isinstance(e.sources.get(f), str) and e.sources[f].strip(), f"{key}.sources.{f}"
            assert e.kind_of(f) in hw.FIGURE_KINDS, f"{key}.figure_kind for {f}"
    assert reg["cpu"].calibrate and reg["cpu"].kind_of("peak_tflops") == "measured"
    assert reg["cpu"].kind_of("domain_size") == "datasheet"  # a definition, not a measurement
    assert reg["s5000"].peak("bf16") is None  # no public datasheet figure: null, not guessed
    assert reg["h100"].peak("bf16") == 989.5 and reg["h100"].kind_of("peak_tflops") == "datasheet"
    assert reg["gb200"].domain_size == 72 and reg["h200"].intra_domain_bandwidth_gbps == 450
    assert reg["a100"].peak("fp8") is None


@pytest.mark.parametrize("name,kind,expected", [
    ("NVIDIA H100 80GB HBM3", "cuda", "h100"),
    ("NVIDIA H100 PCIe", "cuda", None),  # another peak: unknown, never the SXM figure
    ("NVIDIA H200", "cuda", "h200"),
    ("NVIDIA GH200 480GB", "cuda", None),
    ("NVIDIA B200", "cuda", "b200"),
    ("NVIDIA GB200", "cuda", "gb200"),
    ("NVIDIA A100-SXM4-80GB", "cuda", "a100"),
    ("MTT S4000", "musa", "s4000"),
    ("MTT S5000", "musa", "s5000"),
    ("Intel(R) Xeon(R) Processor", "cpu", "cpu"),
    ("Some Future Accelerator", "cuda", None),
])
def test_lookup_by_device_name(name: str, kind: str, expected: str | None) -> None:
    e = hw.lookup(name, kind)
    assert (e.name if e else None) == expected


def test_auto_on_a_faked_musa_device_uses_the_s4000_datasheet(monkeypatch: Any) -> None:
    import torch

    fake = SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                           get_device_name=lambda i=0: "MTT S4000")
    monkeypatch.setattr(devmod, "_torch_musa", lambda: SimpleNamespace())
    monkeypatch.setattr(torch, "musa", fake, raising=False)
    dev = devmod.resolve("auto")
    assert (dev.kind, dev.name) == ("musa", "MTT S4000")
    refs = hw.resolve_peaks({"name": "auto"}, dev.kind, dev.name, "bf16", measure=None)
    assert [(r.label, r.kind, r.peak_tflops) for r in refs] == [("s4000", "datasheet", 100.0)]


def test_unknown_device_gives_no_peak_and_says_why() -> None:
    refs = hw.resolve_peaks({"name": "auto"}, "cuda", "Some Future Accelerator", "bf16", None)
    assert len(refs) == 1 and refs[0].peak_tflops is None
    assert "not in the hardware registry" in (refs[0].reason or "")


def test_null_figure_gives_no_peak_and_says_why() -> None:
    refs = hw.resolve_peaks({"name": "auto"}, "musa", "MTT S5000", "bf16", None)
    assert refs[0].peak_tflops is None and "no bf16 peak for s5000" in (refs[0].reason or "")


def test_named_sku_on_cpu_gives_datasheet_and_measured(compose: Any) -> None:
    cfg = compose(["workload=gpt_test", "+sweep=fa2", "hardware=h100"])
    assert cfg.hardware.name == "h100" and cfg.hardware.peak_tflops["bf16"] == 989.5
    refs = hw.resolve_peaks(cfg.hardware, "cpu", "Intel(R) Xeon(R) Processor", "bf16",
                            measure=lambda: {"tflops": 1.5, "runs": 3, "matmul": "m"})
    got = {r.label: r for r in refs}
    assert got["h100"].peak_tflops == 989.5 and got["h100"].kind == "datasheet"
    assert "named explicitly" in (got["h100"].reason or "")
    assert got["measured"].peak_tflops == 1.5 and got["measured"].kind == "measured"


def test_measured_calibration_failure_is_a_reason() -> None:
    def boom() -> dict[str, Any]:
        raise RuntimeError("no fp8 matmul here")

    refs = hw.resolve_peaks({"name": "measured"}, "cuda", "NVIDIA H100 80GB HBM3", "fp8", boom)
    assert refs[0].peak_tflops is None and "calibration failed" in (refs[0].reason or "")


def test_calibration_is_a_real_matmul_benchmark() -> None:
    cal = hw.calibrate_peak(devmod.resolve("cpu"), "fp32", size=128, min_s=0.01)
    assert cal["tflops"] > 0 and cal["runs"] >= 3 and cal["tflops"] >= cal["median_tflops"]
    assert cal["matmul"] == "128x128 @ 128x128 fp32"


@pytest.mark.parametrize("overrides,match", [
    (["hardware.name=h900"], r"hardware\.name: unknown hardware 'h900'; choose auto, measured"),
    (["hardware.calibration_min_s=0"], r"hardware\.calibration_min_s: must be > 0"),
    (["hardware=h100", "+hardware.peak_tflops.bf17=1"], r"hardware\.peak_tflops\.bf17: unknown dtype"),
    (["hardware=h100", "hardware.peak_tflops.bf16=-3"], r"hardware\.peak_tflops\.bf16: must be a positive"),
])
def test_bad_hardware_config_is_refused(compose: Any, overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose(["workload=gpt_test", "+sweep=fa2", *overrides])


def test_hardware_measured_composes(compose: Any) -> None:
    assert compose(["workload=gpt_test", "+sweep=fa2", "hardware=measured"]).hardware.name == "measured"


def test_bad_registry_file_names_the_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "x1.yaml").write_text("name: x1\ndevice_kind: cuda\npeak_tflops: {bf16: 1}\nspeed: 3\n")
    with pytest.raises(ConfigError, match=r"hardware/x1\.yaml\.speed: unknown key"):
        hw.load_registry(tmp_path)
    (tmp_path / "x1.yaml").write_text("name: x2\ndevice_kind: cuda\n")
    with pytest.raises(ConfigError, match=r"must equal the file stem"):
        hw.load_registry(tmp_path)
