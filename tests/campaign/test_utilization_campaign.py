"""End to end on CPU: a real campaign reports MFU/HFU against the measured CPU peak, labelled
so, and against a datasheet peak when hardware= names one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orchestrator.campaign.run import run_campaign
from tests.conftest import TINY


def test_campaign_reports_mfu_against_measured_and_named_peaks(compose: Any, run_dir: Path) -> None:
    cfg = compose([*TINY, "+sweep=fa2", "sweep.buckets=[s32]",
                   "sweep.values=[{backend:eager,sdpa_kernel:auto}]", "sweep.labels=[eager]",
                   "hardware=h100", "hardware.calibration_size=256", "hardware.calibration_min_s=0.05"])
    run_campaign(cfg, run_dir)
    trials = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert len(trials) == 4 and all(t["status"] == "ok" for t in trials)
    for t in trials:
        f = t["flops"]
        # sdpa-math and eager both count the full score square: executed == useful exactly
        assert f["executed_per_step"] == f["useful_per_step"] == t["useful_flops_per_step"]
        assert 0 < f["executed_coverage_time"] < 1
        peaks = {p["label"]: p for p in t["peaks"]}
        assert peaks["measured"]["kind"] == "measured" and peaks["measured"]["peak_tflops"] > 0
        assert peaks["h100"]["kind"] == "datasheet" and peaks["h100"]["peak_tflops"] == 67.0  # fp32
        u = {x["peak"]: x for x in t["utilization"]}
        assert u["measured"]["mfu"] == pytest.approx(
            f["useful_per_step"] / (t["step_time_median_s"] * peaks["measured"]["peak_tflops"] * 1e12))
    rows = pd.read_csv(run_dir / "results.csv")
    for col in ("mfu_vs_measured", "hfu_vs_measured", "mfu_vs_h100", "hfu_vs_h100",
                "peak_kind_measured", "peak_kind_h100", "useful_flops_per_step"):
        assert col in rows.columns, col
    r = rows.iloc[0]
    assert r["mfu_vs_h100"] == pytest.approx(
        r["useful_flops_per_step"] / (r["step_time_median_s"] * 67.0e12))
    assert r["peak_kind_h100"] == "datasheet" and r["peak_kind_measured"] == "measured"
    md = (run_dir / "decisions.md").read_text()
    assert "## Utilization (MFU / HFU)" in md
    assert "relative to a **measured** peak" in md and "relative to a **datasheet** peak" in md
    assert "named explicitly" in md  # the H100 figure is not this CPU's
    assert ("| MFU vs h100 (datasheet) | HFU vs h100 (datasheet) | MFU vs measured (measured) "
            "| HFU vs measured (measured) |") in md
    assert "source: NVIDIA H100 Tensor Core GPU datasheet" in md
    util = json.loads((run_dir / "utilization.json").read_text())
    assert {p["label"] for p in util["peaks"]} == {"measured", "h100"}
