"""torch.compile as a lever: compile time out of the steady state, graph breaks and recompiles
counted from torch._dynamo, and the time-to-train projection in decisions.md.

Compiles here use the aot_eager backend (dynamo + AOTAutograd, no C++ codegen) to keep the
suite quick; inductor is the same code path with another backend name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.campaign import run_campaign
from orchestrator.config import BucketConfig, CustomWorkloadConfig, SweepConfig, validate
from orchestrator.levers import break_even_steps, projected_time_s
from tests.conftest import TINY


def test_projection_and_break_even_by_hand() -> None:
    # eager: 0.5 s one-off, 100 ms/step; compiled: 20.5 s one-off, 80 ms/step
    assert projected_time_s(0.5, 0.1, 100) == 10.5
    assert projected_time_s(20.5, 0.08, 100) == 28.5
    assert break_even_steps(0.5, 0.1, 20.5, 0.08) == pytest.approx(1000.0)  # 20 s extra / 20 ms saved per step
    assert break_even_steps(0.5, 0.1, 20.5, 0.12) is None  # slower per step: never pays off
    assert break_even_steps(5.0, 0.1, 1.0, 0.09) == 0.0  # cheaper up front and per step


def test_user_recipe_by_import_path_with_compile_and_graph_break(compose: Any, run_dir: Path) -> None:
    """An in-process user recipe (not in the registry) timed by the orchestrator; its compiled
    arm's graph break and compile time are recorded and reported."""
    cfg = compose([*TINY, "+sweep=fa2"])
    cfg.workload = CustomWorkloadConfig(
        name="user_mlp", recipe="tests.helpers.user_recipe:build",
        params={"compile": False, "graph_break": True, "width": 8},
        buckets=[BucketConfig(name="b4", seq_len=1, micro_batch=4)],
    )
    cfg.sweep = SweepConfig(name="user_compile", hypothesis="compiling the user's loss",
                            variable="workload.params.compile", baseline=False, values=[True],
                            labels=["compiled"], baseline_label="eager")
    cfg.protocol.repeats = 1
    validate(cfg)
    result = run_campaign(cfg, run_dir)
    recs = {r["arm_label"]: r for r in (json.loads(p.read_text())
                                        for p in run_dir.glob("trials/*/trial.json"))}
    eager, comp = recs["eager"], recs["compiled"]
    assert eager["status"] == comp["status"] == "ok"
    assert eager["compile_time_s"] == 0 and eager["graph_breaks"] == 0
    assert comp["compile_time_s"] > 0 and comp["compile_time_in_measured_s"] == 0
    assert comp["graph_breaks"] >= 1 and comp["recompiles_in_measured"] == 0
    assert any("graph_break" in r or "graph break" in r.lower() for r in comp["graph_break_reasons"])
    assert comp["warmup_excess_s"] > 0
    md = (run_dir / "decisions.md").read_text()
    assert "## Compile cost and time to train" in md
    assert "time for 10,000 steps (ratio)" in md and "break-even" in md
    assert "- graph break in `compiled`:" in md
    assert result.verdicts[0].label == "compiled"


def test_gpt_compile_sweep_records_compile_time(compose: Any, run_dir: Path) -> None:
    cfg = compose([*TINY, "+sweep=compile", "sweep.buckets=[s32]", "sweep.values=[default]",
                   "workload.model.compile.backend=aot_eager", "protocol.repeats=1"])
    run_campaign(cfg, run_dir)
    recs = {r["arm_label"]: r for r in (json.loads(p.read_text())
                                        for p in run_dir.glob("trials/*/trial.json"))}
    assert recs["default"]["status"] == "ok", recs["default"].get("error")
    assert recs["default"]["compile_time_s"] > 0 and recs["eager"]["compile_time_s"] == 0
    assert recs["default"]["recompiles_in_measured"] == 0
    assert recs["default"]["graph_breaks"] == 0  # the GPT's step traces as one graph
    md = (run_dir / "decisions.md").read_text()
    section = md.split("## Compile cost and time to train", 1)[1].split("\n## ", 1)[0]
    row = next(ln for ln in section.splitlines() if ln.startswith("| s32 | default |"))
    assert " s |" in row and "x)" in row  # compile time in seconds, projections with ratios
