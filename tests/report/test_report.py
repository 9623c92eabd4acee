"""Reports from run directories the tests create: golden text for tables, real plots, HTML in
headless Chromium, CSV/Parquet and a real local MLflow store."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orchestrator.cli.report import main as report_main
from orchestrator.report.load import load_campaigns
from orchestrator.report.log import build_log, render_log
from tests.helpers.require import need_chromium, need_module
from tests.helpers.rundirs import write_campaign

DAY = 86400.0
T0 = 1_780_000_000.0  # 2026-05-28 UTC

GOLDEN_LOG = """\
# Decision log

3 decision(s); latest decision per variable first; superseded decisions are kept and marked. Speedup = baseline step time / variant step time.

| date (UTC) | workload | variable | baseline → variant | buckets | verdict | speedup [CI] | correctness | commit | run |
|---|---|---|---|---|---|---|---|---|---|
| 2026-05-30 20:26 | gpt_test | `attention_backend` | sdpa-math → sdpa-flash | s32, s64 | **inconclusive** | 1.010x [0.980, 1.040] (mixture) | not run | 0123456789ab | [new](new/summary.md) |
| 2026-05-28 20:26 | gpt_test | `attention_backend` | sdpa-math → sdpa-flash | s32, s64 | ~~retain~~ (superseded) | 1.250x [1.220, 1.280] (mixture) | not run | 0123456789ab | [old](old/summary.md) |
| 2026-05-29 20:26 | gpt_tiny | `attention_tile` | sdpa-math → 64x64 | s128 | **reject** | 0.900x [0.850, 0.950] (s128) | not run | unknown | [tile](tile/summary.md) |
"""


def _tree(root: Path) -> Path:
    write_campaign(root / "old", decided_at=T0, variants=(("sdpa-flash", "retain", 1.25),))
    write_campaign(root / "new", decided_at=T0 + 2 * DAY, variants=(("sdpa-flash", "inconclusive", 1.01),))
    write_campaign(root / "tile", sweep="fa2_tiling", workload="gpt_tiny", variable="attention_tile",
                   decided_at=T0 + DAY, variants=(("64x64", "reject", 0.9),), buckets=("s128",),
                   commit=None)
    return root


def test_decision_log_golden(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    campaigns, skipped = load_campaigns(root)
    assert not skipped and len(campaigns) == 3
    assert render_log(build_log(campaigns, base=root)) == GOLDEN_LOG


def test_filters(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    campaigns, _ = load_campaigns(root)
    assert [r.run_dir for r in build_log(campaigns, base=root, workload="gpt_tiny")] == ["tile"]
    assert [r.run_dir for r in build_log(campaigns, base=root, verdict="retain")] == ["old"]
    assert [r.run_dir for r in build_log(campaigns, base=root, variable="attention_backend")] == ["new", "old"]
    assert [r.run_dir for r in build_log(campaigns, base=root, since="2026-05-29")] == ["new", "tile"]
    assert [r.run_dir for r in build_log(campaigns, base=root, until="2026-05-28")] == ["old"]


def test_an_invalid_campaign_supersedes_no_verdict(tmp_path: Path) -> None:
    """An invalid campaign says nothing about the variant: a later invalid run leaves the
    earlier reject standing (both listed, neither struck out by it), and a later valid
    verdict supersedes both."""
    root = tmp_path / "tree"
    write_campaign(root / "reject", decided_at=T0, variants=(("tiled", "reject", 0.8),))
    write_campaign(root / "broken", decided_at=T0 + DAY, variants=(("tiled", "invalid", 1.0),))
    campaigns, _ = load_campaigns(root)
    rows = {r.run_dir: r for r in build_log(campaigns, base=root)}
    assert not rows["reject"].superseded and not rows["broken"].superseded
    assert "| **reject** |" in render_log(list(rows.values()))
    write_campaign(root / "again", decided_at=T0 + 2 * DAY, variants=(("tiled", "invalid", 1.0),))
    campaigns, _ = load_campaigns(root)
    rows = {r.run_dir: r for r in build_log(campaigns, base=root)}
    assert rows["broken"].superseded and not rows["again"].superseded  # invalid by invalid
    assert not rows["reject"].superseded
    write_campaign(root / "retain", decided_at=T0 + 3 * DAY, variants=(("tiled", "retain", 1.2),))
    campaigns, _ = load_campaigns(root)
    rows = {r.run_dir: r for r in build_log(campaigns, base=root)}
    assert [n for n, r in rows.items() if not r.superseded] == ["retain"]


def test_incompatible_schema_is_skipped_and_said(tmp_path: Path, capsys: Any) -> None:
    root = _tree(tmp_path)
    write_campaign(root / "future", schema_version=99)
    campaigns, skipped = load_campaigns(root)
    assert len(campaigns) == 3
    assert len(skipped) == 1 and "incompatible schema" in skipped[0] and "future" in skipped[0]
    assert report_main([str(root), "--no-plots", "--strict"]) == 2
    assert "campaign(s) skipped" in capsys.readouterr().err


def test_config_and_trial_schema_versions_are_checked(tmp_path: Path, capsys: Any) -> None:
    import json

    root = _tree(tmp_path)
    cfg = json.loads((root / "tile" / "config.json").read_text())
    (root / "tile" / "config.json").write_text(json.dumps({**cfg, "schema_version": 99}))
    campaigns, skipped = load_campaigns(root)
    assert len(campaigns) == 2 and "config.json: schema_version 99" in skipped[0]
    (root / "old" / "trials" / "t0").mkdir(parents=True)
    (root / "old" / "trials" / "t0" / "trial.json").write_text(json.dumps(
        {"schema_version": 99, "trial_id": "t0", "status": "ok"}))
    (root / "old" / "trials" / "t0" / "steps.csv").write_text("step,step_time_s,phase\n")
    assert report_main([str(root / "old"), "--strict"]) == 2
    assert "trial.json: schema_version 99" in capsys.readouterr().err


def test_a_copied_tree_renders_the_same_decision_log(tmp_path: Path) -> None:
    """Reports come from the run directories alone: a copy elsewhere gives the same log."""
    root = _tree(tmp_path / "a")
    assert report_main([str(root), "--no-plots"]) == 0
    shutil.copytree(root, tmp_path / "b" / "moved")
    (tmp_path / "b" / "moved" / "decision_log.md").unlink()
    assert report_main([str(tmp_path / "b" / "moved"), "--no-plots"]) == 0
    assert (tmp_path / "b" / "moved" / "decision_log.md").read_text() == \
        (root / "decision_log.md").read_text() == GOLDEN_LOG


def test_bad_paths_exit_2(tmp_path: Path, capsys: Any) -> None:
    assert report_main([str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert report_main([str(tmp_path)]) == 2
    assert "no campaign run directories" in capsys.readouterr().err


def test_summary_tables_golden(tmp_path: Path) -> None:
    run = write_campaign(tmp_path / "c")
    assert report_main([str(run), "--no-plots"]) == 0
    md = (run / "summary.md").read_text()
    assert "| sdpa-flash | retain | 1.250x [1.220, 1.280] | s32: planted retain |" in md
    assert "| s32 | tiled | 12.50 | 5,120 | 0.800x [0.750, 0.850] | 3/3 | 300 |" in md
    assert "| s32 | sdpa-math | 10.00 | 6,400 | — | 3/3 | 300 |" in md
    # up to date: not re-rendered unless forced
    before = (run / "summary.md").stat().st_mtime_ns
    assert report_main([str(run), "--no-plots"]) == 0
    assert (run / "summary.md").stat().st_mtime_ns == before


@pytest.fixture(scope="module")
def real_campaign(tmp_path_factory: Any) -> Path:
    from orchestrator.campaign.run import run_campaign
    from orchestrator.cli.main import compose

    run_dir = tmp_path_factory.mktemp("real") / "fa2 run"
    cfg = compose(["workload=gpt_test", "protocol=quick", "launcher=inline", "+sweep=fa2",
                   "sweep.values=[{backend:sdpa,sdpa_kernel:flash}]", "sweep.labels=[flash]"])
    run_campaign(cfg, run_dir)
    return run_dir


def _nontrivial_png(path: Path) -> None:
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 300
    assert float(img[..., :3].std()) > 0.05  # not a blank canvas


def test_plots_from_a_real_campaign(real_campaign: Path) -> None:
    assert report_main([str(real_campaign), "--force"]) == 0
    for name in ("step_times.png", "speedup_forest.png", "timeline.png", "memory.png"):
        _nontrivial_png(real_campaign / "plots" / name)
    md = (real_campaign / "summary.md").read_text()
    assert "![Speedup with intervals](plots/speedup_forest.png)" in md
    html = (real_campaign / "summary.html").read_text()
    assert "data:image/png;base64," in html and "<img" in html and "plots/" not in html


def test_html_opens_in_headless_chromium(real_campaign: Path, tmp_path: Path) -> None:
    browser = need_chromium()
    assert report_main([str(real_campaign)]) == 0
    html = real_campaign / "summary.html"
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", html.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    dom = proc.stdout
    assert "<table>" in dom and "<th>verdict</th>" in dom, proc.stderr[-2000:]
    assert ">flash</td>" in dom
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={shot}",
         "--window-size=1200,1600", html.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    _nontrivial_png(shot)


def test_exports_csv_parquet_and_mlflow(tmp_path: Path) -> None:
    for module in ("pyarrow", "mlflow", "sqlalchemy"):
        need_module(module)
    root = _tree(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert report_main([str(root), "--no-plots", "--parquet", "--mlflow", uri]) == 0
    csv = pd.read_csv(root / "decision_log.csv")
    pq = pd.read_parquet(root / "decision_log.parquet")
    assert len(csv) == len(pq) == 3 and list(csv["verdict"]) == list(pq["verdict"])
    assert set(pd.read_csv(root / "results_all.csv")["run_dir"]) == {"old", "new", "tile"}

    import mlflow

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["throughput-orchestrator"])
    assert len(runs) == 3
    assert set(runs["tags.verdict"]) == {"retain", "inconclusive", "reject"}
    row = runs[runs["tags.verdict"] == "reject"].iloc[0]
    assert row["params.variable"] == "attention_tile"
    assert row["metrics.s128.speedup"] == pytest.approx(0.9)
    arts = mlflow.MlflowClient().list_artifacts(row["run_id"])
    assert {"decisions.jsonl", "plan.json", "results.csv"} <= {a.path for a in arts}
    assert (tmp_path / "mlartifacts").is_dir()  # artifacts beside the store, not in the cwd
    # exporting again does not duplicate
    assert report_main([str(root), "--no-plots", "--mlflow", uri]) == 0
    again = mlflow.search_runs(experiment_names=["throughput-orchestrator"])
    assert len(again) == 3, again[["tags.orchestrator.run_dir", "tags.verdict", "status"]]


def test_noise_floor_band_from_a_campaign_with_an_aa_arm(compose: Any, tmp_path: Path,
                                                          monkeypatch: Any) -> None:
    """campaign.finalize writes the per-bucket noise floor and the A/A intervals to
    decisions.jsonl, and the forest plot draws the band from them."""
    import json

    from orchestrator.campaign.run import run_campaign
    from orchestrator.core.records import Decision
    from orchestrator.report import plots

    drawn: list[dict[str, Any]] = []
    real_forest = plots.forest

    def spy(*args: Any, **kw: Any) -> Any:
        drawn.append(kw)
        return real_forest(*args, **kw)

    monkeypatch.setattr(plots, "forest", spy)
    run_dir = tmp_path / "aa"
    cfg = compose(["workload=synthetic_mix", "+sweep=calibrate", "protocol=quick",
                   "protocol.aa_arm=true", "workload.units_per_token=0.05",
                   "launcher=inline", "sweep.values=[1.0]", "sweep.labels=[2x-work]"])
    assert cfg.protocol.aa_arm
    run_campaign(cfg, run_dir)
    (line,) = [json.loads(t) for t in (run_dir / "decisions.jsonl").read_text().splitlines()]
    buckets = [b["name"] for b in json.loads((run_dir / "plan.json").read_text())["buckets"]]
    assert set(line["noise_floor"]) == {*buckets, "mixture"} and len(buckets) == 2
    for scope, floor in line["noise_floor"].items():
        aa = line["aa_control"][scope]["aa"]
        assert floor == pytest.approx(abs(aa["speedup"] - 1)) and aa["low"] <= aa["high"]
    # the summary rendered by the campaign handed the band (and the A/A rows) to the plot
    (kw,) = drawn
    assert kw["noise_floor"] == line["noise_floor"]
    assert set(kw["aa"]) == set(line["noise_floor"])
    assert kw["ni_margin"] == cfg.protocol.ni_margin  # the margin that decides rejects
    assert "A/A control (the baseline against itself)" in (run_dir / "summary.md").read_text()
    assert "data:image/png;base64," in (run_dir / "summary.html").read_text()  # right away
    # and the band is really drawn: the render differs from the same plot without it
    import matplotlib.image as mpimg

    band, bare = tmp_path / "band.png", tmp_path / "bare.png"
    wide = {k: 0.2 for k in line["noise_floor"]}  # wide enough to show at any noise level
    decision = Decision.parse(run_dir / "decisions.jsonl", line)
    real_forest([decision], buckets, band, noise_floor=wide)
    real_forest([decision], buckets, bare)
    a, b = mpimg.imread(band), mpimg.imread(bare)
    assert a.shape == b.shape and float(abs(a - b).max()) > 0.1


def test_missing_optional_dependency_fails_under_ci(monkeypatch: Any) -> None:
    """Outside CI a missing optional dependency skips its test; under .ci/run it fails."""
    monkeypatch.delenv("ORCH_REQUIRE_TEST_DEPS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no_such_module_zq"):
        need_module("no_such_module_zq")
    monkeypatch.setenv("ORCH_REQUIRE_TEST_DEPS", "1")
    with pytest.raises(pytest.fail.Exception, match="ORCH_REQUIRE_TEST_DEPS=1 but"):
        need_module("no_such_module_zq")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception, match="chromium is not installed"):
        need_chromium()
    assert need_module("json").dumps([]) == "[]"


def test_mlflow_tells_apart_campaigns_in_equally_named_folders(tmp_path: Path) -> None:
    """Multirun folders are all named like 0_fa2: two sweeps' campaigns are two exports; a
    copy of an exported tree is not exported again."""
    for module in ("mlflow", "sqlalchemy"):
        need_module(module)
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for i, sweep_dir in enumerate(("sweep_a", "sweep_b")):
        write_campaign(tmp_path / "runs" / sweep_dir / "0_fa2", decided_at=T0 + i * DAY,
                       variants=(("sdpa-flash", "retain", 1.25),))
    assert report_main([str(tmp_path / "runs" / "sweep_a"), "--no-plots", "--no-summaries",
                        "--mlflow", uri]) == 0
    assert report_main([str(tmp_path / "runs" / "sweep_b"), "--no-plots", "--no-summaries",
                        "--mlflow", uri]) == 0
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["throughput-orchestrator"])
    assert len(runs) == 2 and runs["tags.orchestrator.decision_key"].nunique() == 2
    assert set(runs["tags.orchestrator.run_dir"]) == {"0_fa2/a1"}  # relative to each root
    shutil.copytree(tmp_path / "runs", tmp_path / "copy")
    assert report_main([str(tmp_path / "copy"), "--no-plots", "--no-summaries",
                        "--mlflow", uri]) == 0
    assert len(mlflow.search_runs(experiment_names=["throughput-orchestrator"])) == 2


def test_equivalent_is_carried_by_the_log_the_summary_and_the_csv_export(tmp_path: Path) -> None:
    """The fifth verdict through every report: decision log (and its --verdict filter),
    summary.md / summary.html (headline, collapsible reasons and grouped warnings), CSV."""
    import json

    root = tmp_path / "tree"
    run = write_campaign(root / "aa", sweep="tp_mode", workload="muon_tp", variable="workload.tp.mode",
                         variants=(("auto", "equivalent", 1.0),), buckets=("s64",))
    line = json.loads((run / "decisions.jsonl").read_text())
    line.update(headline="equivalent: no difference that matters (s64 1.000x [0.990, 1.010], "
                         "within the band); keep whichever is simpler",
                warnings=["s64: steps vary 12% within a trial", "s64: steps vary 12% within a trial"])
    (run / "decisions.jsonl").write_text(json.dumps(line) + "\n")
    campaigns, _ = load_campaigns(root)
    assert [r.verdict for r in build_log(campaigns, base=root, verdict="equivalent")] == ["equivalent"]
    assert report_main([str(root), "--no-plots", "--verdict", "equivalent"]) == 0
    assert "**equivalent**" in (root / "decision_log.md").read_text()
    assert list(pd.read_csv(root / "decision_log.csv")["verdict"]) == ["equivalent"]
    md = (run / "summary.md").read_text()
    assert "| auto | equivalent | 1.000x [0.950, 1.050] | equivalent: no difference that matters" in md
    html = (run / "summary.html").read_text()
    assert "<details><summary>auto: equivalent: reasons</summary>" in html
    # the two identical warnings are one, under its scope
    assert "<details><summary>auto: equivalent: warnings (1)</summary><ul><li>s64: steps vary" in html
    assert "class='equivalent'" in html


def test_violins_are_clipped_to_the_bulk_of_the_steps() -> None:
    import numpy as np

    from orchestrator.report.plots import clip_limit

    steps = [np.full(199, 10.0), np.array([10.0] * 200 + [3000.0])]
    lim, clipped = clip_limit(steps)
    assert lim == pytest.approx(15.0) and clipped == 1  # 1.5 x the 99th percentile (10 ms)


def test_decisions_header_prints_no_placeholders() -> None:
    """decisions.md's environment line from trial records as a table gives them: the first ok
    record may lack the versions (NaN), and a command workload's has no device count or torch;
    neither prints nan, None or xNone."""
    from orchestrator.campaign.render import env_line

    nan = float("nan")
    cpu = {"kind": "cpu", "name": "AMD EPYC", "count": 2}
    got = env_line([{"status": "ok", "device": cpu, "torch_version": nan, "python_version": nan},
                    {"status": "ok", "device": cpu, "torch_version": "2.13.0",
                     "python_version": "3.11.7"}])
    assert got == "cpu: AMD EPYC (x2), torch 2.13.0, python 3.11.7"
    external = {"kind": "external", "name": "not probed (external command)", "count": None}
    got = env_line([{"status": "ok", "device": external, "torch_version": None,
                     "python_version": "3.11.7"}])
    assert got == "external command (its device and torch are not probed), python 3.11.7"
    got = env_line([{"status": "ok", "device": {**cpu, "count": nan}, "torch_version": None,
                     "python_version": "3.11.7"}])  # synthetic: no torch in the trial
    assert got == "cpu: AMD EPYC, python 3.11.7"


def test_excluded_steps_are_named_by_the_tags_seen() -> None:
    from orchestrator.analysis.decisions_md import excluded_line

    assert excluded_line(6, {"switch": 6}) == (
        "6 tagged step(s) excluded (switch; the steps after each arm switch, pairing by steps)")
    assert excluded_line(5, {"compile": 2, "epoch_boundary": 3}) == (
        "5 tagged step(s) excluded (epoch_boundary 3, compile 2)")
    assert "compile" in excluded_line(2, {})  # an older record without the counts


def test_plots_draw_the_rule_the_blocks_as_they_ran_and_say_what_memory_means() -> None:
    """The forest's guides are the rule's: the equivalence band and the non-inferiority
    margin; the timeline orders arms paired by steps by their step in the shared process;
    the memory chart says when one process's peak is every arm's, and keeps its legend off
    the bars."""
    from orchestrator.report import plots

    guides = plots.forest_guides(1.02, 0.05)
    assert [round(x, 3) for x, *_ in guides] == [1.02, 0.98, 0.95]
    assert guides[0][1] == "equivalence band ±2% [0.980, 1.020]"
    assert guides[2][1] == "non-inferiority margin 0.950 (a bucket below it: reject)"
    assert not any("retain" in label for _, label, *_ in guides)

    # two arms of one process alternating every 3 steps, then a process of its own
    steps = pd.DataFrame({
        "trial_id": ["p-a0"] * 6 + ["p-a1"] * 6 + ["q-a0"] * 2,
        "paired_process": ["p-a0"] * 12 + [None] * 2,
        "arm_label": ["base"] * 6 + ["var"] * 6 + ["base"] * 2,
        "position": [0] * 6 + [1] * 6 + [2] * 2,
        "step": [0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11, 0, 1],
        "phase": ["measured"] * 14, "step_time_s": [0.01] * 14})
    got = plots.execution_order(steps)
    assert list(got["arm_label"]) == ["base"] * 3 + ["var"] * 3 + ["base"] * 3 + ["var"] * 3 \
        + ["base"] * 2
    assert list(got["step"][:12]) == list(range(12))

    def results(source: str) -> pd.DataFrame:
        return pd.DataFrame({"arm_label": ["a", "b", "a", "b"], "bucket": ["s1", "s1", "s2", "s2"],
                             "peak_mem_bytes": [3e8, 3e8, 4e8, 4e8],
                             "peak_mem_source": [source] * 4})

    shared = plots.memory_title(results("process peak RSS (the paired process, all arms)"))
    assert shared.startswith("Peak memory: one process ran every arm") and "not per arm" in shared
    assert "reset and read per arm" in plots.memory_title(
        results("cuda allocator peak (this arm's blocks)"))
    fig, ax = plots.memory_figure(results("process peak RSS"))
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    bars = [p.get_window_extent() for p in ax.patches]
    assert bars and not any(legend.overlaps(b) for b in bars)
    plots._plt().close(fig)
