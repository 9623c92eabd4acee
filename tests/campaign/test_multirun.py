"""Hydra multirun: one campaign per combination, and an index of them built from disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.campaign.multirun import build_index, render_index
from tests.conftest import TINY


def test_multirun_writes_an_index_of_campaigns_and_verdicts(tmp_path: Path) -> None:
    """Also: under a (fake) home directory, each campaign.log holds only its own job's lines
    and neither the home path nor the user name."""
    home = tmp_path / "home" / "zqxuser"
    home.mkdir(parents=True)
    sweep_dir = home / "multi run"
    env = dict(os.environ, HOME=str(home), USER="zqxuser", LOGNAME="zqxuser",
               MPLCONFIGDIR=str(tmp_path / "mpl"))
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "-m", *TINY, "+sweep=fa2", "sweep.buckets=[s32]",
         "sweep.values=[{backend:eager,sdpa_kernel:auto}]", "sweep.labels=[eager]",
         "protocol.repeats=1", "workload.seed=0,1", f"hydra.sweep.dir='{sweep_dir}'"],
        capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert str(home) in out.stderr  # the console shows the real path (the user's own screen)
    logs = {n: (sweep_dir / n / "campaign.log").read_text() for n in ("0_fa2", "1_fa2")}
    for text in logs.values():
        assert "variant(s) decided; run dir" in text, text  # the terminal summary is in it
        assert str(home) not in text and "zqxuser" not in text, text
    assert "1_fa2" not in logs["0_fa2"]  # job 1 wrote nothing into job 0's sealed log
    assert logs["0_fa2"].count("campaign fa2 on gpt_test") == 1
    index = json.loads((sweep_dir / "index.json").read_text())
    camps = index["campaigns"]
    assert [c["run_dir"] for c in camps] == ["0_fa2", "1_fa2"]
    for c in camps:
        assert c["workload"] == "gpt_test" and c["sweep"] == "fa2" and c["state"] == "decided"
        assert c["trials"] == {"planned": 2, "recorded": 2, "by_status": {"ok": 2}}
        assert [v["label"] for v in c["verdicts"]] == ["eager"]
    seeds = [json.loads((sweep_dir / c["run_dir"] / "config.json").read_text())["workload"]["seed"]
             for c in camps]
    assert seeds == [0, 1]
    md = (sweep_dir / "index.md").read_text()
    assert "| `0_fa2` | gpt_test | fa2 | 2/2 | eager: **" in md
    assert str(tmp_path) not in (sweep_dir / "index.json").read_text()  # relative paths only


def test_index_reports_a_broken_campaign_instead_of_failing(tmp_path: Path) -> None:
    good, bad = tmp_path / "0_fa2", tmp_path / "1_fa2"
    for d in (good, bad):
        (d / "trials" / "t0").mkdir(parents=True)
        (d / "plan.json").write_text(json.dumps({"schema_version": 1,
                                                 "trials": [{"trial_id": "t0"}]}))
    (good / "config.json").write_text(json.dumps({"workload": {"name": "w"},
                                                  "sweep": {"name": "fa2"}}))
    (good / "trials/t0/trial.json").write_text(json.dumps({"trial_id": "t0", "status": "ok"}))
    (good / "decisions.jsonl").write_text(json.dumps({"schema_version": 1, "arm_id": "a1",
                                                      "label": "x", "verdict": "retain"}) + "\n")
    (bad / "trials/t0/trial.json").write_text("{trunc")
    index = build_index(tmp_path)
    g, b = index["campaigns"]
    assert g["verdicts"] == [{"label": "x", "verdict": "retain", "reasons": []}]
    assert g["trials"]["planned"] == 1
    assert b["state"].startswith("incomplete") and b["config_error"]
    assert b["trials"]["by_status"] == {"unreadable": 1}
    assert "incomplete" in render_index(index)
