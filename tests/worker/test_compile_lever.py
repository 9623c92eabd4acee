"""torch.compile as a lever: compile time out of the steady state, graph breaks and recompiles
counted from torch._dynamo, and the time-to-train projection in decisions.md.

Compiles here use the aot_eager backend (dynamo + AOTAutograd, no C++ codegen) to keep the
suite quick; inductor is the same code path with another backend name."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orchestrator.campaign.run import run_campaign
from orchestrator.spec.config import BucketConfig, SweepConfig
from recipes.custom.config import CustomWorkloadConfig
from orchestrator.campaign.validate import validate
from orchestrator.analysis.levers import break_even_steps, projected_time_s
from tests.conftest import TINY


def test_projection_and_break_even_by_hand() -> None:
    # eager: 0.5 s one-off, 100 ms/step; compiled: 20.5 s one-off, 80 ms/step
    assert projected_time_s(0.5, 0.1, 100) == 10.5
    assert projected_time_s(20.5, 0.08, 100) == 28.5
    assert break_even_steps(0.5, 0.1, 20.5, 0.08) == pytest.approx(1000.0)  # 20 s extra / 20 ms saved per step
    assert break_even_steps(0.5, 0.1, 20.5, 0.12) is None  # slower per step: never pays off
    assert break_even_steps(5.0, 0.1, 1.0, 0.09) == 0.0  # cheaper up front and per step


def _user_mlp_campaign(compose: Any, run_dir: Path, params: dict[str, Any],
                       sweep: SweepConfig) -> tuple[Any, dict[str, dict[str, Any]]]:
    """One round of a sweep over the in-process user recipe (tests/helpers/user_recipe.py):
    the campaign's result and its trial records by arm label."""
    cfg = compose([*TINY, "+sweep=fa2"])
    cfg.workload = CustomWorkloadConfig(
        name="user_mlp", recipe="tests.helpers.user_recipe:build", params=params,
        buckets=[BucketConfig(name="b4", seq_len=1, micro_batch=4)],
    )
    cfg.sweep = sweep
    cfg.protocol.repeats = 1
    validate(cfg)
    result = run_campaign(cfg, run_dir)
    recs = {r["arm_label"]: r for r in (json.loads(p.read_text())
                                        for p in run_dir.glob("trials/*/trial.json"))}
    return result, recs


def test_user_recipe_by_import_path_with_compile_and_graph_break(compose: Any, run_dir: Path) -> None:
    """An in-process user recipe (not in the registry) timed by the orchestrator; its compiled
    arm's graph break and compile time are recorded and reported."""
    result, recs = _user_mlp_campaign(
        compose, run_dir, {"compile": False, "graph_break": True, "width": 8},
        SweepConfig(name="user_compile", hypothesis="compiling the user's loss",
                    variable="workload.params.compile", baseline=False, values=[True],
                    labels=["compiled"], baseline_label="eager"))
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
    result = run_campaign(cfg, run_dir)
    (v,) = result.verdicts  # compiling changes no math: the probes agree with eager
    assert any(r.startswith("correctness gate passed") for r in v.reasons), v.reasons
    recs = {r["arm_label"]: r for r in (json.loads(p.read_text())
                                        for p in run_dir.glob("trials/*/trial.json"))}
    assert recs["default"]["status"] == "ok", recs["default"].get("error")
    assert recs["default"]["compile_time_s"] > 0 and recs["eager"]["compile_time_s"] == 0
    assert recs["default"]["recompiles_in_measured"] == 0 and recs["default"]["compile_steps"] >= 1
    assert recs["eager"]["compile_steps"] == 0
    assert recs["default"]["graph_breaks"] == 0  # the GPT's step traces as one graph
    md = (run_dir / "decisions.md").read_text()
    section = md.split("## Compile cost and time to train", 1)[1].split("\n## ", 1)[0]
    row = next(ln for ln in section.splitlines() if ln.startswith("| s32 | default |"))
    assert " s |" in row and "x)" in row  # compile time in seconds, projections with ratios
    # the default protocol measures a first run's compile: a fresh cache per trial, said so
    assert recs["default"]["compile_cache"] == "cold"
    assert "Compile cache (`protocol.compile_cache`): cold" in section


def test_cold_compile_cache_is_a_fresh_directory_per_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    from orchestrator.platform import compile_stats

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    with compile_stats.cache_scope("cold"):
        first = cache_dir()  # what inductor itself will use
        assert first != "/somewhere/else" and Path(first).is_dir() and not any(Path(first).iterdir())
        assert Path(os.environ["TRITON_CACHE_DIR"]).parent == Path(first)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/else"
    assert "TRITON_CACHE_DIR" not in os.environ and not Path(first).exists()
    with compile_stats.cache_scope("cold"):
        assert cache_dir() != first  # the next trial gets its own
    with compile_stats.cache_scope("warm"):
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/else"


def test_compile_cache_lookups_are_counted_from_torchs_counters() -> None:
    import torch._dynamo.utils as dyn

    from orchestrator.platform import compile_stats

    before = compile_stats.snapshot()
    dyn.counters["inductor"]["fxgraph_cache_hit"] += 2
    dyn.counters["aot_autograd"]["autograd_cache_miss"] += 1
    try:
        fields = compile_stats.trial_fields(before, before, compile_stats.snapshot())
    finally:
        dyn.counters["inductor"]["fxgraph_cache_hit"] -= 2
        dyn.counters["aot_autograd"]["autograd_cache_miss"] -= 1
    assert fields["compile_cache_hits"] == 2 and fields["compile_cache_misses"] == 1


def test_bad_compile_cache_names_the_key(compose: Any) -> None:
    from orchestrator.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"protocol\.compile_cache: 'hot'"):
        compose([*TINY, "+sweep=compile", "protocol.compile_cache=hot"])


def test_bucket_policies_count_recompiles_when_visiting_every_shape(compose: Any, run_dir: Path) -> None:
    """compile.visit_buckets: each trial runs one step on every bucket shape in its first
    (excluded) step, so static shapes recompile once per other bucket and dynamic ones do not.
    Backend eager (dynamo only) keeps it quick; the guards and recompiles are dynamo's."""
    three = ("workload.buckets=[{name: s32, seq_len: 32, micro_batch: 2}, "
             "{name: s48, seq_len: 48, micro_batch: 2}, {name: s64, seq_len: 64, micro_batch: 2}]")
    cfg = compose([*TINY, "+sweep=compile_shapes", "sweep.buckets=[s32]", "protocol.repeats=1",
                   "workload.model.compile.backend=eager",
                   "protocol.correctness.mode=off", three])
    run_campaign(cfg, run_dir)
    recs = {r["arm_label"]: r for r in (json.loads(p.read_text())
                                        for p in run_dir.glob("trials/*/trial.json"))}
    assert {r["status"] for r in recs.values()} == {"ok"}, {k: r.get("error") for k, r in recs.items()}
    static, dynamic, marked = recs["static"], recs["dynamic"], recs["mark_dynamic"]
    assert static["compile_buckets_visited"] == ["s48", "s64"]
    assert static["recompiles"] == 2  # one per other shape: the guards pin each size
    assert dynamic["recompiles"] < static["recompiles"] and marked["recompiles"] < static["recompiles"]
    for r in recs.values():
        assert r["recompiles_in_measured"] == 0 and r["compile_time_in_measured_s"] == 0
        assert r["compile_steps"] >= 1 and r["warmup_excess_s"] > 0
        steps = pd.read_csv(run_dir / "trials" / r["trial_id"] / "steps.csv", keep_default_na=False)
        first = steps.iloc[0]
        assert first["phase"] == "excluded" and "compile" in first["tags"].split(";")
        assert set(steps[steps["phase"] == "measured"]["tags"]) == {""}
    md = (run_dir / "decisions.md").read_text()
    section = md.split("## Compile cost and time to train", 1)[1].split("\n## ", 1)[0]
    assert "| s32 | static |" in section and "| 2 (0) |" in section
    assert "also ran one step on `s48`, `s64`" in section


def test_fullgraph_with_a_graph_break_fails_with_the_reason(compose: Any, run_dir: Path) -> None:
    result, recs = _user_mlp_campaign(
        compose, run_dir, {"compile": True, "graph_break": False, "fullgraph": True, "width": 8},
        SweepConfig(name="fullgraph", hypothesis="a graph break under fullgraph",
                    variable="workload.params.graph_break", baseline=False, values=[True],
                    labels=["broken"], baseline_label="whole"))
    assert recs["whole"]["status"] == "ok" and recs["whole"]["graph_breaks"] == 0
    broken = recs["broken"]
    assert broken["status"] == "failed"
    assert broken["error"].startswith("Unsupported: Call to `torch._dynamo.graph_break()` (Explanation: "
                                      "User-inserted graph break"), broken["error"]
    assert "fullgraph=True makes a graph break an error" in broken["error"]
    (v,) = result.verdicts
    assert v.verdict == "reject" and not v.timing_based
    assert "## Failed trials" in (run_dir / "decisions.md").read_text()


def test_a_graph_break_seen_before_in_this_process_counts_again() -> None:
    """An in-process re-run (inline launcher, interference) meets the same break reason
    again: it is the count that grows, and the re-run must still report the reason."""
    from orchestrator.platform.compile_stats import CompileSnapshot, trial_fields

    first = CompileSnapshot(break_reasons=(("Call to graph_break()", 1),), graph_breaks=1)
    again = CompileSnapshot(break_reasons=(("Call to graph_break()", 2),), graph_breaks=2)
    got = trial_fields(first, again, again)
    assert got["graph_breaks"] == 1 and got["graph_break_reasons"] == ["Call to graph_break()"]
    assert trial_fields(again, again, again)["graph_break_reasons"] == []
