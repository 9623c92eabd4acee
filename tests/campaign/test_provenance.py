"""source.txt / source.diff / command.txt, and the refusal to mix environments."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.campaign import provenance
from orchestrator.campaign.run import run_campaign
from orchestrator.analysis.decide import Verdict
from orchestrator.platform.environment import fingerprint
from orchestrator.core.errors import ConfigError
from tests.conftest import TINY


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "src repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "feature")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "c1")
    return repo


def test_git_state_clean_and_dirty(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    st = provenance.git_state(repo)
    assert st.dirty is False and st.branch == "feature" and len(st.commit or "") == 40
    (repo / "a.py").write_text("x = 2\n")
    (repo / "new file.py").write_text("y = 3\n")
    st = provenance.git_state(repo)
    assert st.dirty is True and st.untracked == ["new file.py"]
    assert "-x = 1" in st.diff and "+x = 2" in st.diff and "+y = 3" in st.diff
    sha = hashlib.sha256(st.diff.encode()).hexdigest()
    text = provenance.source_text(st, {"throughput-orchestrator": "0.1.0"}, sha)
    assert f"commit: {st.commit}" in text and "dirty: true" in text and sha in text
    assert "untracked" in text


def test_outside_git_says_so(tmp_path: Path) -> None:
    st = provenance.git_state(tmp_path)
    assert st.commit is None and st.error and "not a git checkout" in st.error
    assert "commit: unknown" in provenance.source_text(st, {}, None)


def test_command_text_records_overrides_launcher_and_arm_env() -> None:
    cmd = provenance.Command(
        argv=["-m", "orchestrator", "+sweep=omp", "launcher=local"],
        overrides=["+sweep=omp", "launcher=local"],
        launcher={"name": "local", "max_parallel": 1, "devices": [0, 1]},
        arm_env={"t1": {"OMP_NUM_THREADS": "1"}, "t4": {"OMP_NUM_THREADS": "4", "X": "a b"}},
        executable="/usr/bin/python3",
    )
    text = provenance.command_text(cmd, "2026-01-01T00:00:00+00:00")
    assert "command: python3 -m orchestrator +sweep=omp launcher=local" in text
    assert "  +sweep=omp\n  launcher=local\n" in text
    assert "launcher: local\n  max_parallel: 1\n  devices: [0, 1]" in text
    assert "  t4: OMP_NUM_THREADS=4 X='a b'" in text


def test_campaign_writes_provenance_and_resume_appends_command(compose: Any, run_dir: Path) -> None:
    cfg = compose([*TINY, "+sweep=fa2", "sweep.buckets=[s32]",
                   "sweep.values=[{backend:eager,sdpa_kernel:auto}]", "sweep.labels=[eager]",
                   "+sweep.fixed={env.OMP_NUM_THREADS: 1}"])
    run_campaign(cfg, run_dir, overrides=["+sweep=fa2", "launcher=inline"])
    src = (run_dir / "source.txt").read_text()
    assert "commit: " in src and "version throughput-orchestrator:" in src
    from orchestrator.report.load import _source

    assert len(_source(run_dir)["commit"]) == 40  # what the reports read
    assert "version recipe gpt:" in src
    if "dirty: true" in src:  # the worktree under test may carry uncommitted work
        assert (run_dir / "source.diff").is_file()
    cmd = (run_dir / "command.txt").read_text()
    assert "hydra_overrides:\n  +sweep=fa2\n  launcher=inline" in cmd
    assert "eager: OMP_NUM_THREADS=1" in cmd
    rep = json.loads((run_dir / "environment.json").read_text())
    assert rep["gathered_in"] == "trial process" and rep["source_trial"] == json.loads((run_dir / "plan.json").read_text())["trials"][0]["trial_id"]
    assert rep["env_switches"].get("OMP_NUM_THREADS") == "1"  # the arm's switch, seen inside
    recs = [json.loads(p.read_text()) for p in run_dir.glob("trials/*/trial.json")]
    assert all(r["environment"]["device_kind"] == "cpu" for r in recs)
    md = (run_dir / "decisions.md").read_text()
    assert "## Provenance" in md and "same device, driver, torch and library versions" in md
    run_campaign(cfg, run_dir)  # nothing left to run: a resume records its command too
    assert (run_dir / "command.txt").read_text().count("# started") == 2


def test_secret_set_by_a_sweep_arm_is_masked(compose: Any, run_dir: Path) -> None:
    from orchestrator.spec.sweep import resolve_arms

    cfg = compose([*TINY, "+sweep=fa2", "sweep.buckets=[s32]",
                   "+sweep.fixed={env.WANDB_API_KEY: k3y-from-the-sweep-0042}"])
    session = provenance.start(cfg, run_dir, resolve_arms(cfg), [])
    assert "k3y-from" not in (run_dir / "command.txt").read_text()
    assert session.sanitizer.text("wandb: k3y-from-the-sweep-0042") == \
        "wandb: <secret-env-WANDB_API_KEY>"


def test_resume_on_another_environment_is_refused(compose: Any, run_dir: Path) -> None:
    cfg = compose([*TINY, "+sweep=fa2", "sweep.buckets=[s32]"])
    tdir = run_dir / "trials" / "r000-s32-a0"
    tdir.mkdir(parents=True)
    (run_dir / "campaign.log").write_text("")  # a campaign's run directory (started elsewhere)
    other = dict(fingerprint("cpu"), torch="2.7.1", driver="3.1.0")
    rec = {"schema_version": 1, "trial_id": "r000-s32-a0", "status": "ok", "environment": other}
    (tdir / "trial.json").write_text(json.dumps(rec))
    with pytest.raises(ConfigError, match=r"environment\.on_mismatch: refusing to resume.*"
                                          r"torch: \"2\.13"):
        run_campaign(cfg, run_dir)
    assert not (run_dir / "plan.json").exists()  # nothing ran, nothing measured was touched
    assert json.loads((tdir / "trial.json").read_text()) == rec


def _section(cfg: Any, run_dir: Path, fps: list[dict[str, Any]]) -> tuple[list[Verdict], list[str]]:
    tdir = run_dir / "trials" / "t0"
    tdir.mkdir(parents=True, exist_ok=True)
    (tdir / "environment.json").write_text(json.dumps({"gathered_in": "trial process"}))
    recs = [{"trial_id": f"t{i}", "position": i, "environment": fp,
             "environment_report": "environment.json" if i == 0 else None}
            for i, fp in enumerate(fps)]
    verdicts = [Verdict("a1", "v", "retain", ["faster"])]
    _, body = provenance.environment_section(cfg, run_dir, recs, verdicts)
    return verdicts, body


def test_mixed_environments_invalidate_or_flag(compose: Any, run_dir: Path) -> None:
    a = {"torch": "2.13.0", "device_kind": "musa", "devices": ["MTT S4000 (arch 2.2, 48.0 GiB)"]}
    b = dict(a, devices=["MTT S5000 (arch 3.1, 80.0 GiB)"])
    cfg = compose([*TINY, "+sweep=fa2"])
    verdicts, body = _section(cfg, run_dir, [a, a])
    assert verdicts[0].verdict == "retain" and "same device" in body[-1]
    assert json.loads((run_dir / "environment.json").read_text())["source_trial"] == "t0"
    verdicts, body = _section(cfg, run_dir, [a, b])
    assert verdicts[0].verdict == "invalid"
    assert any("ENVIRONMENT MISMATCH" in line for line in body)
    assert any("S5000" in line and "S4000" in line for line in body)
    cfg = compose([*TINY, "+sweep=fa2", "environment.on_mismatch=flag"])
    verdicts, body = _section(cfg, run_dir, [a, b])
    assert verdicts[0].verdict == "retain" and verdicts[0].reasons[0].startswith("WARNING")
