"""Code revisions as the variable: a test repository with three commits, the middle one
planting a 10 % slowdown in its trainer script. Each arm runs from its own worktree under the
run directory (the checkout untouched), its code is recorded per trial, in source.txt and in
decisions.md; ``python -m orchestrator.check`` reports the regression with its exit code, and
``python -m orchestrator.bisect`` names the middle commit (and resumes where it was stopped).

The script's step is a sleep, so a planted 10 % is the same on a loaded CI machine: these tests
check the plumbing (worktrees, provenance, outcomes, the bisection), not the statistics
(bench/planted_effects.py and the simulator do that)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.campaign import regress, revisions
from orchestrator.core.records import Decision
from orchestrator.campaign.regress import Bisection, judge
from orchestrator.cli.autopilot import run_campaign_logged
from orchestrator.cli.bisect import entry as bisect_entry
from orchestrator.cli.check import against, comparison
from orchestrator.cli.check import parser as check_parser
from orchestrator.cli.check import entry as check_entry
from orchestrator.core.errors import ConfigError
from orchestrator.platform import git
from orchestrator.spec.config import SweepConfig
from orchestrator.spec.sweep import resolve_arms

TRAIN = """import sys, time
DELAY = {delay}
steps = int(sys.argv[1])
for i in range(steps):
    t0 = time.perf_counter()
    time.sleep(DELAY)
    dt = time.perf_counter() - t0
    print(f"step {{i + 1}} | loss {{2 / (1 + 0.1 * (i + 1)):.4f}} | time {{dt * 1e3:.3f}}ms", flush=True)
"""
# a few rounds of short trials: a sleep's step time hardly varies, so this decides 10 %; each
# trial summarised by its median of 7 steps, so one step stalled by a busy CI machine (a 50 ms
# hiccup in a 3-step mean widened an interval to straddle the margin once) cannot move it
PROTO = ["protocol=quick", "protocol.repeats=3", "protocol.max_rounds=3", "launcher=local",
         "protocol.measured_steps=7", "protocol.trial_summary=median",
         "protocol.interference_retries=0", "device=cpu"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                           "user.email=t@example.com", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo3(tmp_path: Path) -> dict[str, Any]:
    """A trainer repository (c1: 10 ms steps; c2: 11 ms, the slowdown; c3: a README) and a
    config directory with a command workload run from it."""
    repo = tmp_path / "trainer repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("data/\n")
    (repo / "train.py").write_text(TRAIN.format(delay=0.010))
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "c1: 10 ms steps")
    (repo / "train.py").write_text(TRAIN.format(delay=0.011))
    _git(repo, "commit", "-qam", "c2: plant a 10% slowdown")
    (repo / "README").write_text("notes\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-qm", "c3: a README")
    conf = tmp_path / "conf"
    (conf / "workload").mkdir(parents=True)
    (conf / "workload" / "rev_test.yaml").write_text(
        "defaults:\n  - /schema/workload/command@_here_\n  - _self_\nname: rev_test\n"
        "command: '{python} train.py {steps}'\n"
        f"cwd: {json.dumps(str(repo))}\ntime_limit_s: 60\n"
        "buckets:\n  - {name: s1, seq_len: 1, micro_batch: 1}\n")
    commits = _git(repo, "rev-list", "--reverse", "HEAD").split()
    return {"repo": repo, "conf": str(conf), "c": commits}


def _args(repo3: dict[str, Any]) -> list[str]:
    return ["--config-dir", repo3["conf"], "workload=rev_test", *PROTO]


def _untouched(repo: Path, head: str) -> None:
    assert _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "rev-parse", "HEAD") == head
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # only the checkout


def test_check_reports_the_regression_with_its_exit_code_and_records_each_arms_code(
        repo3: dict[str, Any], tmp_path: Path, capsys: Any) -> None:
    c1, _, c3 = repo3["c"]
    out = tmp_path / "check"
    rc = check_entry([*_args(repo3), "--base", c1[:10], "--head", "main", "--dir", str(out)])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 1, line
    assert line.startswith("check: regression: main against ") and "slower" in line
    assert "beyond the 2% margin" in line and "decisions.md" in line
    # every trial ran its arm's commit from that commit's worktree
    records = [json.loads(p.read_text()) for p in out.glob("trials/*/trial.json")]
    assert records and all(r["status"] == "ok" for r in records)
    by_arm = {r["arm_label"]: r["code"] for r in records}
    assert by_arm[f"base {c1[:10]}"]["commit"] == c1
    assert by_arm["head main"]["commit"] == c3 and by_arm["head main"]["branch"] == "main"
    assert all(c["dirty"] is False and c["worktree"] == f"worktrees/{c['commit'][:12]}"
               for c in by_arm.values())
    source = (out / "source.txt").read_text()
    assert "user_code head main: repo " in source and f"commit {c3}" in source
    md = (out / "decisions.md").read_text()
    code = md.split("## Code", 1)[1].split("\n## ", 1)[0]
    assert f"commit `{c1[:12]}`" in code and "changes 2 file(s)" in code and "`train.py`" in code
    # the checkout was never touched, and the worktrees are gone
    _untouched(repo3["repo"], c3)
    assert not (out / "worktrees").exists()


def test_revisions_alternate_each_from_its_worktree(repo3: dict[str, Any], tmp_path: Path,
                                                   capsys: Any) -> None:
    """Paired by steps, each arm's commit runs as a process of its own from its worktree, the
    arms taking turns (orchestrator.worker.pairing.alternation): the regression is found all the same."""
    c1, _, c3 = repo3["c"]
    out = tmp_path / "check"
    rc = check_entry([*_args(repo3), "protocol.pairing=steps", "--base", c1[:10], "--head",
                      "main", "--dir", str(out)])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 1, line
    records = [json.loads(p.read_text()) for p in out.glob("trials/r*/trial.json")]
    assert records and {r["paired_by"] for r in records} == {"alternation"}
    by_arm = {r["arm_label"]: r for r in records}
    assert by_arm["head main"]["code"]["commit"] == c3
    assert by_arm[f"base {c1[:10]}"]["code"]["commit"] == c1
    # its own steps, from the worktree's train.py: 11 ms against 10 ms
    assert (by_arm["head main"]["step_time_median_s"]
            > 1.05 * by_arm[f"base {c1[:10]}"]["step_time_median_s"])
    _untouched(repo3["repo"], c3)
    assert not (out / "worktrees").exists()


def test_the_uncommitted_changes_are_an_arm_only_when_asked(repo3: dict[str, Any],
                                                            tmp_path: Path, compose: Any) -> None:
    repo, (c1, c2, c3) = repo3["repo"], repo3["c"]
    (repo / "train.py").write_text(TRAIN.format(delay=0.010))  # uncommitted: undo the slowdown
    (repo / "data").mkdir()
    (repo / "data" / "tokens.bin").write_text("ignored by git, shared into each worktree")
    # a check measures commits: a dirty checkout is refused in one line, nothing written
    out = tmp_path / "refused"
    with pytest.raises(ConfigError) as exc:
        comparison(_args(repo3)[2:], [repo3["conf"]], "HEAD~2", "main", out)
    assert "source.require_clean" in str(exc.value) and "WORKTREE" in str(exc.value)
    assert not out.exists()
    # WORKTREE: a snapshot of the uncommitted state, against its own HEAD
    run = tmp_path / "dirty"
    cfg = comparison(_args(repo3)[2:] + ["source.share=[data]"], [repo3["conf"]], "HEAD",
                     "WORKTREE", run)
    run_campaign_logged(cfg, run)
    code = json.loads((run / "code.json").read_text())["arms"]
    head = code["a1"]
    assert head["revision"] == "WORKTREE" and head["dirty"] is True
    assert len(head["diff_sha256"]) == 64 and head["snapshot_of"] == c3
    assert head["commit"] not in (c1, c2, c3)  # a commit object no branch reaches
    assert "dirty true; diff_sha256 " + head["diff_sha256"] in (run / "source.txt").read_text()
    d = regress.head_decision(run)
    assert d.verdict == "retain", d.headline  # the uncommitted change undid the slowdown
    # the user's files, index and branch are as they were
    assert _git(repo, "status", "--porcelain").splitlines() == ["M train.py"]
    assert _git(repo, "diff", "--cached", "--name-only") == ""  # the index: nothing staged
    assert _git(repo, "rev-parse", "HEAD") == c3
    assert not _git(repo, "branch", "--contains", head["commit"])


def test_bad_revisions_are_refused_in_one_line(repo3: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "x"
    for base, head, key, words in (
            ("nope", "HEAD", "sweep.baseline", "no commit 'nope'"),
            ("main", "HEAD", "sweep.values[0]", "same commit"),
            ("HEAD", "WORKTREE", "sweep.values[0]", "no uncommitted changes")):
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator.check", *_args(repo3), "--base", base,
             "--head", head, "--dir", str(out)], capture_output=True, text=True, check=False)
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {key}: ") and words in err[0], err
        assert not out.exists()
    # a workload that runs in the orchestrator's own processes has no revisions to run
    proc = subprocess.run([sys.executable, "-m", "orchestrator.check", "workload=gpt_test",
                           "--base", "HEAD", "--head", "HEAD~1", "--dir", str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "command workload" in proc.stderr, proc.stderr


@pytest.mark.parametrize("d, outcome", [
    ({"verdict": "reject", "speedups": {"s": {"speedup": 0.9, "low": 0.88, "high": 0.92}}},
     "regression"),
    ({"verdict": "reject", "speedups": {"s": {"speedup": 0.99, "low": 0.985, "high": 0.995}}},
     "ok"),  # slower, but within the margin
    ({"verdict": "equivalent", "speedups": {"s": {"speedup": 1.0, "low": 0.99, "high": 1.01}}},
     "ok"),
    ({"verdict": "inconclusive", "speedups": {"s": {"speedup": 0.97, "low": 0.9, "high": 1.05}}},
     "inconclusive"),
    ({"verdict": "invalid", "reasons": ["the baseline has no measurement"]}, "invalid"),
    ({"verdict": "reject", "headline": "reject: failed (crashed)", "speedups": {}},
     "regression"),  # the head crashes where the base runs
])
def test_outcomes_and_their_exit_codes(d: dict[str, Any], outcome: str) -> None:
    j = judge(Decision.parse("decisions.jsonl", {"schema_version": 1, "arm_id": "a1", **d}),
              margin=0.02)
    assert j.outcome == outcome, j.line
    assert j.exit_code == {"ok": 0, "regression": 1, "inconclusive": 3, "invalid": 4}[outcome]


def test_bisect_names_the_middle_commit_and_resumes(repo3: dict[str, Any], tmp_path: Path,
                                                    capsys: Any) -> None:
    c1, c2, c3 = repo3["c"]
    out = tmp_path / "bisect"
    calls: list[Path] = []

    def killed_on_the_second(cfg: Any, run_dir: Path) -> Any:
        calls.append(run_dir)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the bisection stopped from outside, mid-way
        return run_campaign_logged(cfg, run_dir)

    def compose(base: str, head: str, run_dir: Path, confidence: float) -> Any:
        return comparison(_args(repo3)[2:], [repo3["conf"]], base, head, run_dir, confidence)

    b = Bisection(out, repo3["repo"], c1, "main", 0.02, 0.95, 1, compose, killed_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        b.run()
    state = json.loads((out / "bisect.json").read_text())
    assert [s["status"] for s in state["steps"]] == ["done", "started"]
    assert state["steps"][0]["commit"] == c3  # the bad end, confirmed first
    # the same command again: the finished comparison is replayed, the stopped one resumed
    rc = bisect_entry([*_args(repo3), "--good", c1, "--bad", "main", "--dir", str(out)])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 0, line
    assert line.startswith(f"bisect: first slower commit: {c2[:12]} 'c2: plant a 10% slowdown'")
    state = json.loads((out / "bisect.json").read_text())
    assert state["invocations"] == 2 and [s["commit"] for s in state["steps"]] == [c3, c2]
    assert state["steps"][1]["resumed"] == 1
    assert state["result"]["culprit"] == c2 and state["result"]["last_good"] == c1
    # Bonferroni: two commits after the good end, at most (1 + 1) x 2 comparisons
    assert state["comparisons_at_most"] == 4 and abs(state["step_confidence"] - 0.9875) < 1e-9
    md = (out / "decisions.md").read_text()
    assert f"**Result: first slower commit: {c2[:12]}" in md and "| 2 | `" in md
    _untouched(repo3["repo"], c3)


def test_first_parent_path_and_snapshot_leave_the_checkout_alone(repo3: dict[str, Any]) -> None:
    repo, (c1, c2, c3) = repo3["repo"], repo3["c"]
    assert git.first_parent_path(repo, c1, c3) == [c2, c3]
    with pytest.raises(git.GitError):
        git.first_parent_path(repo, c3, c1)
    (repo / "new.py").write_text("x = 1\n")
    (repo / "README").write_text("changed\n")
    commit, left_out = git.snapshot(repo)
    assert left_out == []
    assert _git(repo, "show", f"{commit}:new.py") == "x = 1"
    assert _git(repo, "show", f"{commit}:README") == "changed"
    assert sorted(_git(repo, "status", "--porcelain").splitlines()) == ["?? new.py", "M README"]
    assert _git(repo, "diff", "--cached", "--name-only") == ""


def _code_doc(run: Path, repo: Path, arms: dict[str, dict[str, Any]],
              started: str) -> None:
    run.mkdir()
    (run / "code.json").write_text(json.dumps({
        "repo": str(repo), "commits": {}, "moved": [],
        "started": {"commit": started, "branch": "main", "dirty": False, "diff_sha256": None},
        "arms": arms}))


def test_a_revision_changing_a_frozen_path_is_invalid(repo3: dict[str, Any], tmp_path: Path,
                                                      compose: Any) -> None:
    repo, (c1, _, c3) = repo3["repo"], repo3["c"]
    cfg = compose(["workload=rev_test", "source.frozen_paths=[README, 'model/*']"], False,
                  [repo3["conf"]])
    run = tmp_path / "run"
    _code_doc(run, repo, {
        "a0": {"label": "base", "commit": c1, "dirty": False, "worktree": "worktrees/x"},
        "a1": {"label": "head", "commit": c3, "dirty": False, "worktree": "worktrees/y"}}, c3)
    head = SimpleNamespace(label="head", verdict="retain", reasons=[])
    section = revisions.code_section(cfg, run, [head])[0]
    assert head.verdict == "invalid" and "frozen by source.frozen_paths" in head.reasons[0]
    assert any("**changes a frozen path** (`README`)" in line for line in section.lines)


def test_a_checkout_that_changed_under_in_place_trials_is_flagged(
        repo3: dict[str, Any], tmp_path: Path, compose: Any) -> None:
    repo, (_, c2, _) = repo3["repo"], repo3["c"]
    cfg = compose(["workload=rev_test"], False, [repo3["conf"]])
    run = tmp_path / "run"
    _code_doc(run, repo, {"a0": {"label": "base", "commit": c2, "dirty": False},
                          "a1": {"label": "v", "commit": c2, "dirty": False}}, c2)
    v = SimpleNamespace(label="v", verdict="retain", reasons=[])
    section = revisions.code_section(cfg, run, [v])[0]
    assert "the checkout changed while the trials ran in place" in v.reasons[0]
    assert any("**WARNING" in line for line in section.lines)


def test_check_against_a_ledger_version_takes_its_commit(repo3: dict[str, Any],
                                                          tmp_path: Path) -> None:
    c1 = repo3["c"][0]
    ledger = tmp_path / "baselines" / "rev_test"
    ledger.mkdir(parents=True)
    (ledger / "v0.json").write_text(json.dumps({
        "schema_version": 1, "workload": "rev_test", "version": "v0", "parent": None,
        "overrides": {"source.revision": c1}}))
    a = check_parser().parse_args([*_args(repo3), "--against", "v0", "--head", "main",
                                   f"baselines_dir={tmp_path / 'baselines'}"])
    overrides, base = against(a)
    assert base == c1 and "baseline=v0" in overrides
    a = check_parser().parse_args([*_args(repo3), "--head", "main"])
    with pytest.raises(ConfigError, match="--base"):
        against(a)


def test_a_checkout_run_in_place_records_its_dirty_state(repo3: dict[str, Any],
                                                         tmp_path: Path, compose: Any) -> None:
    """No revision asked: the arms run the checkout as it is, and its uncommitted change is
    recorded per arm (dirty, the diff's SHA-256) in the code record and source.txt's lines."""
    repo, c3 = repo3["repo"], repo3["c"][2]
    (repo / "README").write_text("edited, not committed\n")
    cfg = compose(["workload=rev_test"], False, [repo3["conf"]])
    cfg.sweep = SweepConfig(name="env", hypothesis="h", variable="env.FOO", baseline="1",
                            values=["2"])
    arms = resolve_arms(cfg)
    run = tmp_path / "run"
    run.mkdir()
    arms, running = revisions.materialize(cfg, run, arms, arms)
    for a in running:
        c = a.code
        assert c["commit"] == c3 and c["branch"] == "main" and c["dirty"] is True
        assert len(c["diff_sha256"]) == 64 and c["worktree"] is None and a.job_overrides == {}
    lines = revisions.source_lines(running)
    assert len(lines) == 2 and all("(the checkout in place)" in x and "dirty true; "
                                   f"diff_sha256 {running[0].code['diff_sha256']}" in x
                                   for x in lines)
