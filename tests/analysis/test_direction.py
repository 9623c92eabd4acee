"""The kernel-vs-end-to-end direction check: ratios worked out by hand, the decisions.md section
and its flag, promote's refusal without --force, and a real fa2_tiling campaign whose
decisions.md shows both directions."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orchestrator.analysis import direction as D
from orchestrator.campaign.promote import Evidence, check_promotable
from orchestrator.campaign.run import run_campaign
from orchestrator.core.errors import ConfigError
from orchestrator.core.records import Decision, PlanDoc
from orchestrator.report.load import Campaign
from orchestrator.spec.ledger import Ledger


def _rec(bucket: str, rnd: int, arm: str, t: float) -> dict[str, Any]:
    return {"kind": "microbench", "status": "ok", "bucket": bucket, "round": rnd, "arm_id": arm,
            "call_time_median_s": t}


# b1: round 0 2.0/1.0 = 2.0, round 1 3.0/1.0 = 3.0 -> median 2.5
# b2: round 0 1.0/2.0 = 0.5, round 1 1.0/2.0 = 0.5 -> 0.5
RECORDS = [_rec("b1", 0, "a0", 2.0e-3), _rec("b1", 0, "a1", 1.0e-3),
           _rec("b1", 1, "a0", 3.0e-3), _rec("b1", 1, "a1", 1.0e-3),
           _rec("b2", 0, "a0", 1.0e-3), _rec("b2", 0, "a1", 2.0e-3),
           _rec("b2", 1, "a0", 1.0e-3), _rec("b2", 1, "a1", 2.0e-3),
           {**_rec("b2", 2, "a1", 1e-9), "status": "failed"}]  # a failed trial is left out


def test_ratios_and_directions_worked_by_hand() -> None:
    assert D.bucket_ratios(RECORDS, "a0", "a1") == pytest.approx({"b1": 2.5, "b2": 0.5})
    # equal weights: sqrt(2.5 * 0.5) = 1.1180 -> faster; a retain agrees
    c = D.check_arm(RECORDS, "attention", "a0", "a1", "big", {"b1": 1, "b2": 1}, "retain",
                    True, 0.02)
    assert c.ratio == pytest.approx(math.sqrt(1.25))
    assert (c.micro, c.e2e, c.agrees) == ("faster", "faster", True)
    # b2 weighs 3: exp((ln 2.5 + 3 ln 0.5) / 4) = exp(-0.29079) = 0.74767 -> slower
    c = D.check_arm(RECORDS, "attention", "a0", "a1", "big", {"b1": 1, "b2": 3}, "retain",
                    True, 0.02)
    assert c.ratio == pytest.approx(0.74767, rel=1e-4)
    assert (c.micro, c.e2e, c.agrees) == ("slower", "faster", False)
    assert "DISAGREE" in c.summary
    lines = D.section([c], "attention", 0.02)
    assert "| big | b1 2.50x, b2 0.50x | **slower** 0.75x | **faster** (retain) | **no** |" in lines
    assert any(x.startswith("**Flagged:** `big` is retained end to end") for x in lines)
    # no end-to-end direction: nothing compared; a reject that a gate decided has none either
    assert D.check_arm(RECORDS, "attention", "a0", "a1", "x", {}, "inconclusive", True,
                       0.02).agrees is None
    assert D.e2e_direction("reject", timing_based=False) is None
    assert D.e2e_direction("equivalent") == "same" and D.direction(1.01, 0.02) == "same"


def test_promote_refuses_a_disagreeing_retain_without_force(tmp_path: Path) -> None:
    d = {"schema_version": 1, "arm_id": "a1", "label": "big", "verdict": "retain",
         "final": True,
         "direction_check": {"agrees": False, "summary": "attention alone slower (0.75x)"}}
    plan = {"schema_version": 1, "arms": [{"arm_id": "a0"}, {"arm_id": "a1", "env": {}}],
            "trials": []}
    ev = Evidence(Campaign(tmp_path, {"workload": {"name": "w"}, "baseline": "v0"},
                           PlanDoc.parse(tmp_path / "plan.json", plan),
                           [Decision.parse(tmp_path / "decisions.jsonl", d)], pd.DataFrame()),
                  None, None)
    ledger = Ledger(tmp_path, "w")
    with pytest.raises(ConfigError, match=r"^direction: the retain of 'big' disagrees in "
                                          r"direction .* pass --force to promote it anyway$"):
        check_promotable(ev, ledger, None)
    with pytest.raises(ConfigError, match=r"^correctness: "):  # --force: on to the next check
        check_promotable(ev, ledger, None, force=True)


@pytest.mark.slow
def test_fa2_tiling_campaign_shows_both_directions(compose: Any, run_dir: Path) -> None:
    """The shipped fa2_tiling sweep (sweep.microbench: attention) on gpt_test with the default
    protocol (A/A arm, automatic warm-up; 2 rounds and the s64 bucket here, for CI time), 8x8
    tiles against 64x64 so the kernel's direction is clear; local launcher (fresh processes)."""
    cfg = compose(["workload=gpt_test", "+sweep=fa2_tiling", "device=cpu", "sweep.buckets=[s64]",
                   "protocol.repeats=2", "protocol.max_rounds=2", "protocol.paired_min_s=0",
                   # 8x8: the PyTorch reference's tiles (the Triton kernel's start at 16)
                   "sweep.fixed={workload.model.attention.backend: tiled}",
                   "sweep.baseline={block_q:8,block_k:8}",
                   "sweep.baseline_label=8x8", "sweep.values=[{block_q:64,block_k:64}]",
                   "sweep.labels=[64x64]"])
    assert cfg.sweep.microbench == "attention"
    run_campaign(cfg, run_dir)
    mb = sorted(p.parent.name for p in run_dir.glob("trials/mb-*/trial.json"))
    # 2 rounds x 2 arms (the A/A control is the baseline's copy: not benchmarked)
    assert len(mb) == 4 and "mb-s64-a1-r1" in mb
    rec = json.loads((run_dir / "trials" / "mb-s64-a1-r0" / "trial.json").read_text())
    assert rec["kind"] == "microbench" and rec["status"] == "ok"
    # do_bench's way on the CPU: host-timed calls after a cache flush, at least 10 of them,
    # until the median is tight or the time cap
    assert len(rec["call_times_s"]) >= 10 and rec["call_clock"].startswith("host clock")
    assert rec["call_stopped_by"] in ("spread", "time cap", "call cap")
    assert rec["call_flush_bytes"] > 0 and rec["call_time_p20_s"] <= rec["call_time_p80_s"]
    d = json.loads((run_dir / "decisions.jsonl").read_text().splitlines()[0])
    chk = d["direction_check"]
    # 64 tiles of 8x8 per 64-token sequence against one: the op alone is several times faster
    assert chk["micro"] == "faster" and chk["buckets"]["s64"] > 2
    assert chk["verdict"] == d["verdict"]
    assert chk["agrees"] is (True if d["verdict"] == "retain" else chk["agrees"])
    md = (run_dir / "decisions.md").read_text()
    assert "## Direction check" in md
    row = next(x for x in md.splitlines() if x.startswith("| 64x64 | s64 "))
    assert "**faster**" in row and f"({d['verdict']})" in row
    # the microbenchmark trials never reach the timing statistics
    assert "mb-" not in (run_dir / "results.csv").read_text()
