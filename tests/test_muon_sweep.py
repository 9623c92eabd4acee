"""`+sweep=tp_mode` through the real campaign machinery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.campaign import run_campaign


@pytest.fixture
def one_thread() -> Any:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # inline trials share this process; spin-waits on a busy host
    yield
    torch.set_num_threads(before)


def test_tp_mode_sweep_single_rank_end_to_end(compose: Any, run_dir: Path, one_thread: Any) -> None:
    cfg = compose(["workload=muon_tp_test", "workload.world_size=1", "protocol=quick",
                   "launcher=inline", "+sweep=tp_mode"])
    result = run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert len(recs) == 6 and all(r["status"] == "ok" for r in recs), recs
    assert {r["muon_tp"]["mode"] for r in recs} == {"duplicated", "distributed", "auto"}
    assert [v.label for v in result.verdicts] == ["distributed", "auto"]
    md = (run_dir / "decisions.md").read_text()
    assert "## Muon tp_mode" in md and "| auto | auto | 1 |" in md


def test_tp_mode_sweep_two_ranks_end_to_end(compose: Any, run_dir: Path) -> None:
    cfg = compose(["workload=muon_tp_test", "protocol=quick", "launcher=local",
                   "+sweep=tp_mode"])
    run_campaign(cfg, run_dir)
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert recs and all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    assert {r["muon_tp"]["group_size"] for r in recs} == {2}
    md = (run_dir / "decisions.md").read_text()
    assert "## Muon tp_mode" in md and "predicted distributed (ms)" in md
