"""What a decision costs (issue 47): each arm's own warm compile caches, node time per trial,
arm and decision, the prediction before the campaign and the budget that caps it. A real
campaign of the stand-in GPU trainer (recipes/examples/startup_trainer.py: a start-up of which
a compile a warm cache skips, steps that wait), one arm per process, real subprocesses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.campaign.run import run_campaign
from orchestrator.core.errors import ConfigError

# 1 s to start, 0.8 s of it a compile a warm cache skips; 10 ms steps
FAST = ["+sweep=planted_startup", "protocol=quick", "launcher=local",
        "protocol.pairing=process", "workload.params.startup_s=1.0",
        "workload.params.compile_s=0.8", "workload.params.step_ms=10",
        "protocol.measured_steps=5", "protocol.warmup_steps=2", "protocol.repeats=3",
        "protocol.max_rounds=3"]


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(run.glob("trials/*/trial.json"))]


def test_each_arm_warms_its_own_cache_and_the_campaign_drops_them(
        compose: Any, run_dir: Path) -> None:
    cfg = compose([*FAST, f"run_dir='{run_dir}'", "protocol.arm_cache_store=false"])
    run_campaign(cfg, run_dir)
    recs = [r for r in _records(run_dir) if r.get("kind") == "timed"]
    assert len(recs) == 6 and all(r["status"] == "ok" for r in recs)
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(recs, key=lambda r: r["position"]):
        by_arm.setdefault(r["arm_id"], []).append(r)
    for arm, rs in by_arm.items():
        assert [r["compile_cache"] for r in rs] == ["arm"] * 3
        # the arm's first trial found its folder empty and filled it; the others reused it
        assert [r["compile_cache_fill"] for r in rs] == ["fills", "reuses", "reuses"], arm
        # the trainer saw its cache warm exactly when the record says so
        logs = [(Path(run_dir) / "trials" / r["trial_id"] / "command.log").read_text()
                for r in rs]
        assert ["compile cache cold" in x for x in logs] == [True, False, False]
        # the records show the arm's switches, not the orchestrator's cache folders
        assert not any("CACHE_DIR" in k for r in rs for k in (r.get("env") or {}))
    assert not (run_dir / "caches").exists()  # scratch: gone with the campaign


def test_the_next_campaign_of_the_same_arm_starts_warm_from_the_store(
        compose: Any, tmp_path: Path) -> None:
    """protocol.arm_cache_store (the default): each arm's folder in the user's compile store,
    named by the arm's identity; a second campaign with the same baseline and a new variant
    finds the baseline's caches warm from its first trial and fills the new variant's."""
    import os

    store = Path(os.environ["ORCH_COMPILE_CACHE_DIR"])
    first, second = tmp_path / "first", tmp_path / "second"
    run_campaign(compose([*FAST, "protocol.repeats=2", "protocol.max_rounds=2",
                          f"run_dir='{first}'"]), first)
    assert not (first / "caches").exists()
    notes = {p.stem: json.loads(p.read_text()) for p in store.glob("arm-*.json")}
    assert sorted(n["baseline"] for n in notes.values()) == [False, True]
    assert all((store / k).is_dir() for k in notes)
    run_campaign(compose([*FAST, "protocol.repeats=2", "protocol.max_rounds=2",
                          "sweep.values=[1.1]",
                          f"run_dir='{second}'"]), second)
    recs = {r["arm_id"]: r for r in _records(second)
            if r.get("kind") == "timed" and r["round"] == 0}
    base = next(a for a, r in recs.items() if r["is_baseline"])
    var = next(a for a, r in recs.items() if not r["is_baseline"])
    assert recs[base]["compile_cache_fill"] == "reuses"  # the first campaign compiled it
    assert recs[var]["compile_cache_fill"] == "fills"  # a new arm: its own, empty folder
    logs = {a: (second / "trials" / r["trial_id"] / "command.log").read_text()
            for a, r in recs.items()}
    assert "compile cache warm" in logs[base] and "compile cache cold" in logs[var]
    assert len(list(store.glob("arm-*.json"))) == 3  # the same baseline, two variants
    # nothing of the store's location in the records
    assert not any("CACHE_DIR" in k for r in recs.values() for k in (r.get("env") or {}))


def test_the_store_removes_the_least_recently_used_beyond_its_cap(tmp_path: Path) -> None:
    import time

    from orchestrator.platform import compile_stats

    for i, key in enumerate(["arm-a", "arm-b", "arm-c"]):
        (tmp_path / key).mkdir()
        (tmp_path / key / "blob").write_bytes(b"x" * 1000)
        compile_stats.note_use(tmp_path, key, {"arm_id": key})
        doc = json.loads((tmp_path / f"{key}.json").read_text())
        doc["used_at"] = time.time() - 100 + i  # a oldest, c newest
        (tmp_path / f"{key}.json").write_text(json.dumps(doc))
    # a is the oldest but in use by the campaign that ends: b goes, then c is within the cap
    assert compile_stats.evict(tmp_path, 2000, keep={"arm-a"}) == ["arm-b"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["arm-a", "arm-c"]
    assert not (tmp_path / "arm-b.json").exists()
    assert compile_stats.evict(tmp_path, 2000, keep=set()) == []


def test_a_sweep_over_compile_settings_stays_cold(compose: Any, tmp_path: Path) -> None:
    from orchestrator.spec.jobs import make_specs
    from orchestrator.spec.plan import plan_rounds
    from orchestrator.spec.sweep import resolve_arms

    cfg = compose(["workload=gpt_test", "+sweep=compile", "protocol=quick",
                   "launcher=inline"])
    arms = resolve_arms(cfg)
    planned = plan_rounds([a.arm_id for a in arms], [cfg.workload.buckets[0].name], range(1))
    specs = make_specs(cfg, tmp_path, arms, planned)
    assert {s.compile_cache for s in specs} == {"cold"} and not specs[0].cache_root
    cfg = compose([*FAST])
    arms = resolve_arms(cfg)
    planned = plan_rounds([a.arm_id for a in arms], ["b1"], range(1))
    specs = make_specs(cfg, tmp_path, arms, planned)
    assert {s.compile_cache for s in specs} == {"arm"}
    dirs = {s.env["TORCHINDUCTOR_CACHE_DIR"] for s in specs}
    assert len(dirs) == 2  # each arm its own folder, in the user's compile store
    import os
    assert all(d.startswith(os.environ["ORCH_COMPILE_CACHE_DIR"]) for d in dirs)
    specs = make_specs(compose([*FAST, "protocol.arm_cache_store=false"]), tmp_path, arms,
                       planned)
    dirs = {s.env["TORCHINDUCTOR_CACHE_DIR"] for s in specs}
    assert len(dirs) == 2 and all(str(tmp_path / "caches") in d for d in dirs)


def test_a_cache_variable_that_is_not_a_name_is_refused(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"protocol\.cache_env: 'MY-DIR' is not"):
        compose([*FAST, "protocol.cache_env=[MY-DIR]"])


def test_node_time_is_accounted_predicted_and_reported(compose: Any, run_dir: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    from orchestrator.campaign.cost import read_spent

    cfg = compose([*FAST, f"run_dir='{run_dir}'"])
    with caplog.at_level("INFO", logger="orchestrator.campaign.run"):
        run_campaign(cfg, run_dir)
    spent = read_spent(run_dir)
    timed = [s for s in spent if s.kind == "timed"]
    assert len(timed) == 6 and all(s.wall_s > 0.2 and s.nodes == 1 for s in timed)
    # a warm start skips the 0.4 s compile: each arm's first process is the dearest
    fills = [s.wall_s for s in timed if s.fill == "fills"]
    reuses = [s.wall_s for s in timed if s.fill == "reuses"]
    # (the reuses' median: one process slowed by another job on a busy machine stays one)
    assert len(fills) == 2 and len(reuses) == 4 and min(fills) > sorted(reuses)[1] + 0.4
    # predicted after the first round, before the others ran, and that range held
    plan = json.loads((run_dir / "plan.json").read_text())
    first = plan["cost"]["log"][0]
    assert first["after_processes"] == 2 and first["processes_left"] == [4, 4]
    total = sum(s.node_s for s in spent)
    assert first["lo_node_s"] <= total <= first["hi_node_s"]
    assert any("cost: predicted node time" in r.getMessage() for r in caplog.records)
    md = (run_dir / "decisions.md").read_text()
    sec = md[md.index("## Cost (node time)"):]
    assert f"over {len(spent)} process(es)" in sec and "% of it" in sec
    assert "inside the range" in sec and "| as-is |" in sec and "| slower-5pct |" in sec


def test_the_upper_end_leaves_out_the_first_process_own_start(compose: Any,
                                                              tmp_path: Path) -> None:
    """The campaign's first process also starts the fork server (measured: 6-8 s against
    2.4 s for the other arm's first and 1.2-1.5 s for warm starts); the processes left are
    bounded by the dearest of the others, the adaptive rounds' by the dearest warm start."""
    from orchestrator.campaign import cost
    from orchestrator.core.records import COSTS
    from orchestrator.spec.plan import plan_rounds

    cfg = compose([*FAST])

    def costs(*rows: tuple[str, float, str], kind: str = "timed") -> None:
        (tmp_path / COSTS).write_text("".join(json.dumps(
            {"trial_ids": [f"t{i}"], "arm_ids": [arm], "nodes": 1, "wall_s": wall,
             "steps_s": 0.2, "fill": fill, "kind": kind if i == 0 else "timed"}) + "\n"
            for i, (arm, wall, fill) in enumerate(rows)))

    left = plan_rounds(["a0", "a1"], ["b1"], range(2, 3))  # one more round: two processes
    costs(("a0", 7.6, "fills"), ("a1", 2.4, "fills"), ("a1", 1.5, "reuses"))
    got = cost.predict(cfg, tmp_path, left, 4)
    assert got is not None
    assert got.hi_node_s == pytest.approx(11.5 + 2 * 2.4 + 4 * 1.5)
    assert got.lo_node_s == pytest.approx(11.5 + 2 * 1.5)
    assert "leaves out the first process's own start" in got.basis
    # one process so far: it is all there is to go by
    costs(("a0", 7.6, "fills"))
    got = cost.predict(cfg, tmp_path, left, 4)
    assert got is not None and got.hi_node_s == pytest.approx(7.6 + 6 * 7.6)
    assert "leaves out" not in got.basis
    # a dearer later process (another job on the node, a cold arm) bounds the rest itself
    costs(("a0", 2.0, "fills"), ("a1", 3.0, "fills"), ("a1", 1.0, "reuses"))
    got = cost.predict(cfg, tmp_path, left, 4)
    assert got is not None and got.hi_node_s == pytest.approx(6.0 + 2 * 3.0 + 4 * 1.0)
    # a pilot started first (cold caches, a command's sizing): the timed processes all count
    costs(("a0", 3.0, ""), ("a0", 2.5, ""), ("a1", 2.0, ""), ("a1", 2.2, ""), kind="pilot")
    got = cost.predict(cfg, tmp_path, left, 4)
    assert got is not None and got.hi_node_s == pytest.approx(9.7 + 6 * 2.5)
    assert "leaves out" not in got.basis


def test_a_calibration_record_s_costs_predict_before_any_process(compose: Any) -> None:
    """What a calibrating campaign's processes cost (its first, its cheapest, the dearest of
    the others, the dearest warm start) gives the next campaign a range before it starts one:
    the low end every process at the cheapest, the high end a first as dear as the record's
    first, the others as its dearest, the adaptive rounds' as its dearest warm start; a
    longer measured window moves each process by what its steps add."""
    from orchestrator.campaign import cost
    from orchestrator.spec.plan import plan_rounds

    cfg = compose([*FAST])
    spent = [cost.Spent(("pilot-b1",), ("a0",), "pilot", 1, 6.0),
             cost.Spent(("r0-a0",), ("a0",), "timed", 1, 2.4, fill="fills"),
             cost.Spent(("r0-a1",), ("a1",), "timed", 1, 2.6, fill="fills"),
             cost.Spent(("r1-a0",), ("a0",), "timed", 1, 1.2, fill="reuses"),
             cost.Spent(("r1-a1",), ("a1",), "timed", 1, 1.5, fill="reuses")]
    rec = cost.recorded_costs(spent)
    assert rec == {"first_node_s": 6.0, "least_node_s": 1.2, "dearest_node_s": 2.6,
                   "reuse_node_s": 1.5, "nodes": 1.0}
    assert cost.recorded_costs(spent[:1]) is None  # no timed process: nothing to go by
    left = plan_rounds(["a0", "a1"], ["b1"], range(0, 3))  # six processes, four adaptive
    got = cost.predict_from_record(cfg, left, 4, rec, "campaign first")
    assert got is not None and got.spent_node_s == 0 and got.processes_left == (6, 10)
    assert got.lo_node_s == pytest.approx(6 * 1.2)
    assert got.hi_node_s == pytest.approx(6.0 + 5 * 2.6 + 4 * 1.5)
    assert got.basis.startswith("before any timed process of this campaign, from what the "
                                "processes of campaign first cost")
    longer = cost.predict_from_record(cfg, left, 4, rec, "campaign first", (0.5, 1.0))
    assert longer is not None and longer.lo_node_s == pytest.approx(6 * 1.7)
    assert longer.hi_node_s == pytest.approx(7.0 + 5 * 3.6 + 4 * 2.5)
    assert "+0.5 to +1.0 s longer" in longer.basis
    assert cost.predict_from_record(cfg, left, 4, {"least_node_s": 1.0}, "x") is None
    # a gate's probe ran first (a campaign of an embedded recipe): its node time counts
    probed = cost.predict_from_record(cfg, left, 4, rec, "campaign first", spent_node_s=3.0)
    assert probed is not None and probed.spent_node_s == 3.0
    assert (probed.lo_node_s, probed.hi_node_s) == pytest.approx((3.0 + got.lo_node_s,
                                                                  3.0 + got.hi_node_s))


def test_a_budget_smaller_than_the_campaign_stops_inside_it(compose: Any, run_dir: Path) -> None:
    from orchestrator.campaign.cost import read_spent

    # the first process (the fork server's start too) costs about 3 node-s and the dearest
    # so far bounds the next ones: 8 node-s hold the first round, not a second
    cfg = compose([*FAST, f"run_dir='{run_dir}'", f"protocol.budget_node_hours={8 / 3600}"])
    result = run_campaign(cfg, run_dir)
    spent = sum(s.node_s for s in read_spent(run_dir))
    assert spent <= 8 and 1 <= len(read_spent(run_dir)) < 6
    plan = json.loads((run_dir / "plan.json").read_text())
    stop = next(x for x in plan["cost"]["log"] if "budget_stop" in x)
    assert "budget of" in stop["budget_stop"]
    md = (run_dir / "decisions.md").read_text()
    assert "Budget: 0.00222222 node-h" in md and "reached:" in md
    assert all(v.verdict != "retain" for v in result.verdicts)  # no claim past its evidence


def _control_trials(run: Path) -> list[str]:
    plan = json.loads((run / "plan.json").read_text())
    control = (plan.get("control_arm") or {}).get("arm_id")
    return [r["trial_id"] for r in _records(run) if control and r["arm_id"] == control]


def test_the_aa_arm_runs_once_then_a_fresh_calibration_stands_in(
        compose: Any, tmp_path: Path) -> None:
    import os

    from orchestrator.campaign import calibration

    # trials sized by time (a command told its steps): a pilot learns the step time, unless a
    # fresh record holds it
    aa = [*FAST, "protocol.aa_arm=true", "protocol.measured_min_s=0.05"]
    first, second, third, fourth = (tmp_path / n for n in ("first", "second", "third", "fourth"))
    run_campaign(compose([*aa, f"run_dir='{first}'"]), first)
    assert len(_control_trials(first)) == 3  # no record yet: the A/A arm ran
    assert [r["kind"] for r in _records(first)].count("pilot") == 1
    files = list(calibration.store_dir().glob("*.json"))
    assert len(files) == 1 and str(calibration.store_dir()) == os.environ["ORCH_CALIBRATION_DIR"]
    rec = json.loads(files[0].read_text())
    assert rec["campaign"] == "first" and rec["rounds"] == 3 and "/" not in json.dumps(
        {k: v for k, v in rec.items() if k != "interval"})  # no path, no host name
    # the baseline's variance components and costs, which size the next campaign's first rounds
    (bucket, comp), = rec["components"].items()
    assert comp["step_s"] > 0 and comp["fixed_s"] > 0.1 and comp["sigma_within"] > 0
    plan1 = json.loads((first / "plan.json").read_text())
    assert "no variance components" in plan1["first_plan"]["why"]
    # the same machine, workload and pairing: the record stands in for the A/A arm
    result = run_campaign(compose([*aa, f"run_dir='{second}'"]), second)
    plan = json.loads((second / "plan.json").read_text())
    assert plan["control_arm"] is None and plan["calibration"]["record_id"] == rec["record_id"]
    # ... and its components size the first rounds by cost, from the start
    sized = plan["first_plan"]["buckets"][bucket]
    assert sized["choice"] >= 5 and "n* = " in sized["why"] or "spread is all step noise" in sized["why"]
    assert plan["first_plan"]["from"].startswith("the calibration of campaign first")
    # ... and its step time sizes the trials without a pilot (the pilot's floor: 7 steps)
    by_record = plan["sizing"]["buckets"][bucket]
    assert by_record["pilot"] is None and by_record["recorded_step_s"] == comp["step_s"]
    assert "no pilot: the step time is the calibration of campaign first" in by_record["why"]
    n = max(sized["choice"], by_record["measured_steps"])
    assert {t["measured_steps"] for t in plan["trials"] if t["round"] < 3} == {n}
    assert all(r["measured_steps_run"] >= n for r in _records(second)
               if r.get("kind") == "timed")
    assert len(_records(second)) == 6 and result.verdicts[0].verdict in ("reject", "inconclusive")
    assert not (second / "trials" / f"pilot-{bucket}").exists()
    # ... and what its processes cost predicts this campaign's node time before it starts one
    assert set(rec["costs"]) == {"first_node_s", "least_node_s", "dearest_node_s",
                                 "reuse_node_s", "nodes"}
    early = plan["cost"]["log"][0]
    assert early["from_record"] and early["after_processes"] == 0 and early["spent_node_s"] == 0
    assert early["processes_left"][0] == 6 and "campaign first" in early["basis"]
    assert "Predicted before any timed process (from a calibration record's costs)" in (
        second / "decisions.md").read_text()
    md = (second / "decisions.md").read_text()
    assert "A/A control: not run in this campaign; relying on the calibration of campaign first" in md
    assert "no pilot: the step time is the calibration of campaign first" in md
    # asked for every campaign, or a stale record: the A/A arm runs again
    run_campaign(compose([*aa, "protocol.calibration_max_age_h=0", f"run_dir='{third}'"]), third)
    assert len(_control_trials(third)) == 3
    rec = json.loads(files[0].read_text())
    files[0].write_text(json.dumps({**rec, "at": rec["at"] - 200 * 3600}))
    run_campaign(compose([*aa, f"run_dir='{fourth}'"]), fourth)
    assert len(_control_trials(fourth)) == 3


def test_an_uncalibrated_record_is_not_relied_on(compose: Any, tmp_path: Path) -> None:
    from orchestrator.campaign import calibration
    from orchestrator.spec.sweep import resolve_arms

    cfg = compose([*FAST, "protocol.aa_arm=true"])
    key = calibration.key_of(cfg, resolve_arms(cfg), {"kind": "cpu", "name": "cpu"})
    rec = calibration.Calibration(key, 0.0, False, 0.01, [0.98, 1.0], 3, "command_startup",
                                  "process", "old")
    calibration.store_dir().mkdir(parents=True, exist_ok=True)
    (calibration.store_dir() / f"{key}.json").write_text(json.dumps(
        {"version": calibration.VERSION, **rec.__dict__, "at": __import__("time").time()}))
    got, why = calibration.reusable(cfg, key)
    assert got is None and "not calibrated" in why


def test_a_calibration_is_filed_per_compile_cache_mode(compose: Any) -> None:
    """A cold cache recompiles in every trial, a warm one does not: their start-up costs and
    spreads differ, so a record made under one is never reused under the other; ``auto`` files
    under the mode it resolves to (``arm`` here: the arms do not differ in a compile setting)."""
    from orchestrator.campaign import calibration
    from orchestrator.spec.sweep import resolve_arms

    dev = {"kind": "cpu", "name": "cpu"}
    keys = {}
    for mode in ("auto", "arm", "cold", "warm"):
        cfg = compose([*FAST, "protocol.aa_arm=true", f"protocol.compile_cache={mode}"])
        keys[mode] = calibration.key_of(cfg, resolve_arms(cfg), dev)
    assert keys["auto"] == keys["arm"]
    assert len({keys["arm"], keys["cold"], keys["warm"]}) == 3


def test_the_first_rounds_are_sized_by_cost_from_recorded_components(compose: Any) -> None:
    """Kalibera and Jones from the first round: a dear start-up and little between-process
    variance make long trials; much between-process variance keeps the protocol's window; the
    rounds a decision at the margin takes come with it; no record, no sizing."""
    from orchestrator.campaign.lengths import first_round_plan

    cfg = compose([*FAST])
    cfg.protocol.pairing = "process"
    dear = {"b": {"sigma_within": 0.02, "sigma_between": 0.002, "steps": 5.0, "step_s": 0.01,
                  "fixed_s": 20.0}}
    steps, doc = first_round_plan(cfg, dear, "rec")
    # n* = sqrt(20 x pi/2 x 0.02^2 / (0.01 x 0.002^2)) = 560
    assert 550 < steps["b"] < 570 and doc["from"] == "rec"
    assert doc["buckets"]["b"]["expected_rounds"] is not None
    noisy = {"b": {**dear["b"], "sigma_between": 0.05, "fixed_s": 0.5}}
    steps, doc = first_round_plan(cfg, noisy, "rec")
    assert steps["b"] == 5 and "kept within" in doc["buckets"]["b"]["why"]
    assert doc["buckets"]["b"]["expected_rounds"] is None  # 5 % between, a 2 % margin, 3 rounds
    assert first_round_plan(cfg, None, "") == ({}, {"why": first_round_plan(cfg, None, "")[1]["why"]})
    cfg.protocol.pairing = "steps"
    assert first_round_plan(cfg, dear, "rec")[0] == {}
