"""Nothing lost, nothing half-done (issue 34): a refused or concurrent command leaves a run
directory byte-identical, a killed campaign leaves no process behind, an interrupt is one line,
and every bad input is one line with exit code 2 before any work."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.platform import rundir
from orchestrator.core.errors import ConfigError
from orchestrator.core.sanitize import Sanitizer, is_secret_env, looks_like_credential
from orchestrator.tools import compute_mfu, summarize_steps

ROOT = Path(__file__).resolve().parents[2]
BASE = ["workload=synthetic", "+sweep=calibrate", "protocol=quick", "launcher=inline",
        "protocol.correctness.mode=off"]
QUICK = [*BASE, "sweep.values=[0.1]", "sweep.labels=['ten|pct']"]


def cli(args: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def start(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            start_new_session=True)


def tree_hash(d: Path) -> dict[str, str]:
    """Every file under ``d`` (path -> sha256), and every directory (-> 'dir')."""
    out = {}
    for p in sorted(d.rglob("*")):
        rel = str(p.relative_to(d))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def one_error_line(proc: subprocess.CompletedProcess[str], match: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("error: ") and match in lines[-1], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished campaign's run directory (a label with '|' in it)."""
    work = tmp_path_factory.mktemp("finished campaign")
    run = work / "run dir"
    proc = cli([*QUICK, f"run_dir='{run}'"], cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


# --------------------------------------------------------------------------- refusals


def test_a_refused_resume_or_rerun_leaves_the_run_dir_byte_identical(
        finished: Path, tmp_path: Path) -> None:
    before = tree_hash(finished)
    cases = [
        # resume= of a finished run of another plan (other values)
        ([*BASE, "sweep.values=[0.5]", "sweep.labels=[x]", f"resume='{finished}'"],
         "planned for a different"),
        # a rerun into it with other sweep values
        ([*BASE, "sweep.values=[0.5,0.7]", "sweep.labels=[x,y]", f"run_dir='{finished}'"],
         "planned for a different"),
        # a resume into it with another pairing
        ([*QUICK, "protocol.pairing=steps", f"resume='{finished}'"], "planned for a different"),
    ]
    for args, match in cases:
        proc = cli(args, cwd=tmp_path)
        one_error_line(proc, match)
        assert tree_hash(finished) == before
    assert not any(tmp_path.iterdir()), "a refused command left something in the cwd"


def test_a_refused_new_run_dir_leaves_no_directory(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper"
    # refused after the run directory is known: a NaN, a resume that is no campaign
    one_error_line(cli([*QUICK, "protocol.min_effect=nan", f"run_dir='{target}'"], tmp_path),
                   "protocol.min_effect: must be a number, got nan")
    one_error_line(cli([*QUICK, f"resume='{target}'"], tmp_path), "does not exist")
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("mine")
    one_error_line(cli([*QUICK, f"run_dir='{tmp_path / 'stuff'}'"], tmp_path),
                   "is not empty and no campaign wrote it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stuff"]
    assert (tmp_path / "stuff" / "notes.txt").read_text() == "mine"


def test_two_campaigns_into_one_run_dir_one_runs_the_other_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "shared run"
    slow = [*QUICK, "protocol.measured_steps=200", f"run_dir='{run}'"]
    first = start(slow, tmp_path)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and first.poll() is None and not (
                run.is_dir() and rundir.lock_holder(run) == first.pid):
            time.sleep(0.05)
        assert rundir.lock_holder(run) == first.pid, first.stderr.read() if first.stderr else ""
        t0 = time.time()
        second = cli(slow, cwd=tmp_path)
        refused_in_s = time.time() - t0
        one_error_line(second, f"another campaign (pid {first.pid}) is running in")
        out, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err[-3000:]
    plan = json.loads((run / "plan.json").read_text())
    ids = [t["trial_id"] for t in plan["trials"]]
    on_disk = sorted(p.parent.name for p in run.glob("trials/*/trial.json"))
    assert sorted(ids) == on_disk and len(set(ids)) == len(ids)
    assert "another campaign" not in (run / "campaign.log").read_text()
    print(f"second campaign refused after {refused_in_s:.2f} s (interpreter start included)")


def test_bad_run_dirs_and_launchers_are_one_line_before_any_work(tmp_path: Path) -> None:
    a_file = tmp_path / "a file"
    a_file.write_text("x")
    one_error_line(cli([*QUICK, f"run_dir='{a_file / 'run'}'"], tmp_path), "which is a file")
    one_error_line(cli([*QUICK, f"run_dir='{a_file}'"], tmp_path), "is a file, not a directory")
    # no Slurm client on PATH
    bare = tmp_path / "bin"
    bare.mkdir()
    one_error_line(cli(["workload=synthetic", "+sweep=calibrate", "launcher=slurm"], tmp_path,
                       env={"PATH": str(bare)}), "launcher: slurm: sbatch, squeue, scancel not on PATH")
    if shutil.which("squeue"):  # a client, but no controller behind the configuration
        bogus = tmp_path / "slurm.conf"
        bogus.write_text("ClusterName=none\nSlurmctldHost=localhost\nSlurmctldPort=1\n")
        one_error_line(cli(["workload=synthetic", "+sweep=calibrate", "launcher=slurm"], tmp_path,
                           env={"SLURM_CONF": str(bogus)}), "launcher: slurm: no controller answers")
    assert {p.name for p in tmp_path.iterdir()} <= {"a file", "bin", "slurm.conf"}


def test_an_immutable_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(locked)],
                                        capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not permitted here (needs CAP_LINUX_IMMUTABLE)")
    try:
        one_error_line(cli([*QUICK, f"run_dir='{locked / 'run'}'"], tmp_path), "is not writable")
        # the default run directory under a current directory that cannot be written
        one_error_line(cli(QUICK, locked), "cannot create outputs/calibrate/")
    finally:
        subprocess.run([chattr, "-i", str(locked)], check=True)
    assert not any(locked.iterdir())


# --------------------------------------------------------------------------- processes


TRAINER = """\
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a trainer that ignores SIGTERM
steps = int(sys.argv[1])
for i in range(steps):
    t = time.perf_counter(); time.sleep(0.003)
    print(f"step {i} time {(time.perf_counter() - t) * 1000:.3f}ms loss 1.0", flush=True)
time.sleep(float(sys.argv[2]))
"""


def command_args(tmp_path: Path, run: Path, hang_s: float) -> list[str]:
    script = tmp_path / "stubborn_trainer.py"
    script.write_text(TRAINER)
    return ["workload=command_example", "+sweep=example_delay", "protocol=quick",
            f"workload.command='{{python}} {script} {{steps}} {hang_s}'",
            "workload.time_limit_s=300", f"run_dir='{run}'"], script


def trainer_pids(script: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if str(script).encode() in cmd and state != "Z":
                out.append(int(d.name))
    return out


def wait_for(pred: Any, limit_s: float) -> bool:
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return bool(pred())


@pytest.mark.slow
def test_kill_9_during_a_command_trial_leaves_no_process_and_resume_kills_survivors(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    args, script = command_args(tmp_path, run, hang_s=600)
    proc = start(args, tmp_path)
    try:
        assert wait_for(lambda: trainer_pids(script), 120), proc.stderr.read() if proc.stderr else ""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # its watchdog takes the command's whole session down (5 s allowed)
        assert wait_for(lambda: not trainer_pids(script), 5.0), trainer_pids(script)
        sessions = list(run.glob("trials/*/command.session.json"))
        assert sessions, "the running command's session was not recorded"

        # the watchdog killed too (an OOM killer, a kill of everything): the record remains,
        # and a resume kills what survived before it runs anything
        survivor = subprocess.Popen([sys.executable, str(script), "1", "600"],
                                    start_new_session=True, stdout=subprocess.DEVNULL)
        sessions[0].write_text(json.dumps({"session": survivor.pid,
                                           "start_ticks": _ticks(survivor.pid)}))
        resumed = start([*args[:-1], f"resume='{run}'", "sweep.values=[5]"], tmp_path)
        try:
            assert wait_for(lambda: survivor.poll() is not None, 120)
        finally:
            os.killpg(resumed.pid, signal.SIGKILL)
            resumed.wait()
        assert survivor.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in trainer_pids(script):
            os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not trainer_pids(script), 5.0)


def _ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_is_one_line_with_its_exit_code(tmp_path: Path, sig: int, code: int) -> None:
    run = tmp_path / "run"
    args, script = command_args(tmp_path, run, hang_s=600)
    proc = start(args, tmp_path)
    try:
        assert wait_for(lambda: trainer_pids(script), 120)
        os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in err
    name = signal.Signals(sig).name
    last = err.strip().splitlines()[-1]
    on_disk = {p.parent.name: json.loads(p.read_text()).get("status")
               for p in run.glob("trials/*/trial.json")}
    assert f"interrupted ({name}) after 0 of 4 trials; resume with: python -m orchestrator " \
           "workload=command_example" in last and "resume=" in last, (on_disk, err[-2000:])
    assert f"interrupted ({name})" in (run / "campaign.log").read_text()
    assert wait_for(lambda: not trainer_pids(script), 5.0)


# --------------------------------------------------------------------------- config routes


USER_SWEEP = """\
defaults:
  - /schema/sweep/sweep@_here_
  - _self_
name: my_sweep
hypothesis: more work per token is slower
variable: workload.units_per_token
baseline: 1.0
values: [1.1]
"""


def test_config_dir_and_searchpath_get_the_same_checks(tmp_path: Path) -> None:
    mine = tmp_path / "my conf"
    (mine / "sweep").mkdir(parents=True)
    (mine / "sweep" / "my_sweep.yaml").write_text(USER_SWEEP)
    for route in (["--config-dir", str(mine)], [f"hydra.searchpath=['file://{mine}']"]):
        ok = cli([*route, "workload=synthetic", "+sweep=my_sweep", "--cfg", "job"], tmp_path)
        assert ok.returncode == 0 and "name: my_sweep" in ok.stdout, ok.stderr[-2000:]
        one_error_line(cli([*route, "workload=synthetic", "+sweep=my_sweep",
                            "protocol.warmup_stpes=3"], tmp_path),
                       "protocol.warmup_stpes: unknown key; did you mean protocol.warmup_steps?")
    (mine / "sweep" / "my_sweep.yaml").write_text(USER_SWEEP.replace("values: [1.1]", "valuez: [1]"))
    one_error_line(cli(["--config-dir", str(mine), "workload=synthetic", "+sweep=my_sweep"],
                       tmp_path), "sweep.valuez: unknown key")
    (mine / "sweep" / "my_sweep.yaml").write_text(USER_SWEEP + "labels: [a\n")
    one_error_line(cli(["--config-dir", str(mine), "workload=synthetic", "+sweep=my_sweep"],
                       tmp_path), f"{mine / 'sweep' / 'my_sweep.yaml'}:10: YAML error")
    (mine / "sweep" / "my_sweep.yaml").write_text(USER_SWEEP)
    (mine / "sweep" / "fa2.yaml").write_text(USER_SWEEP)  # a copy of a shipped name
    one_error_line(cli(["--config-dir", str(mine), "+sweep=fa2"], tmp_path),
                   "has the name of a shipped config (sweep/fa2.yaml)")
    one_error_line(cli(["--config-dir", str(tmp_path / "nope"), "+sweep=fa2"], tmp_path),
                   "--config-dir: ")
    one_error_line(cli(["-cn", "other", "+sweep=fa2"], tmp_path), "-cn: is not supported")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my conf"]


def test_a_yaml_error_in_the_conf_dir_names_its_file_and_line(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    with open(conf / "protocol" / "quick.yaml", "a") as f:
        f.write("  - broken: [\n")
    proc = cli(["workload=synthetic", "+sweep=calibrate", "protocol=quick"], tmp_path,
               env={"ORCHESTRATOR_CONF_DIR": str(conf)})
    one_error_line(proc, f"{conf / 'protocol' / 'quick.yaml'}:")
    assert "YAML error" in proc.stderr


@pytest.mark.parametrize("override,key", [
    ("protocol.min_effect=nan", "protocol.min_effect"),
    ("protocol.ni_margin=nan", "protocol.ni_margin"),
    ("protocol.warn_cv=nan", "protocol.warn_cv"),
    ("protocol.measured_min_s=nan", "protocol.measured_min_s"),
    ("protocol.alpha_spending=nan", "protocol.alpha_spending"),
    ("protocol.warmup_tolerance=nan", "protocol.warmup_tolerance"),
    ("protocol.trial_timeout_s=nan", "protocol.trial_timeout_s"),
    ("workload.buckets.0.weight=nan", "workload.buckets[0].weight"),
    ("workload.units_per_token=nan", "workload.units_per_token"),
])
def test_nan_is_refused_by_every_range_check(compose: Any, override: str, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        compose(["workload=synthetic", "+sweep=calibrate", override])
    assert str(exc.value) == f"{key}: must be a number, got nan"


def test_labels_buckets_and_new_params(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"sweep\.labels\[1\]: 'x' names another arm too"):
        compose(["workload=synthetic", "+sweep=calibrate", "sweep.labels=[x,x,y]"])
    with pytest.raises(ConfigError, match=r"sweep\.buckets: is empty; list the buckets"):
        compose(["workload=synthetic", "+sweep=calibrate", "sweep.buckets=[]"])
    with pytest.raises(ConfigError, match=r"workload\.params\.mode: is not set in this config; "
                                          r"a new key needs a leading \+: \+workload\.params\.mode"):
        compose(["workload=command_example", "+sweep=example_delay", "workload.params.mode=ok"])


def test_a_label_with_a_pipe_keeps_the_decision_tables_whole(finished: Path) -> None:
    md = (finished / "decisions.md").read_text()
    assert "ten\\|pct" in md
    rows = [ln for ln in md.splitlines() if ln.startswith("|") and "ten" in ln]
    assert rows
    header_cells = {}
    for block in md.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        if len(lines) >= 2:
            n = lines[0].replace("\\|", "").count("|")
            for ln in lines:
                assert ln.replace("\\|", "").count("|") == n, (lines[0], ln)
            header_cells[lines[0]] = n
    assert header_cells


# --------------------------------------------------------------------------- tools, secrets


def _run_tool(capsys: Any, mod: Any, argv: list[str]) -> tuple[int, str, str]:
    rc = mod.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_tools_refuse_impossible_inputs(tmp_path: Path, capsys: Any) -> None:
    rc, out, err = _run_tool(capsys, compute_mfu, [
        "--flops-kind", "useful", "--flops-per-device-step-tflop", "1000", "--step-seconds",
        "0.01", "--peak-tflops-per-device", "1"])
    assert rc == 2 and out == "" and "MFU above 100% (10000000%) is impossible" in err
    binary = tmp_path / "b.json"
    binary.write_bytes(bytes(range(256)))
    rc, out, err = _run_tool(capsys, compute_mfu, ["--flops-kind", "useful", "--buckets",
                                                   str(binary), "--peak-tflops-per-device", "1"])
    assert rc == 2 and "b.json is not UTF-8 text" in err and len(err.strip().splitlines()) == 1
    log = tmp_path / "neg.log"
    log.write_text("step 1 time -5.0ms\nstep 2 time 5.0ms\nstep 3 time 5.0ms\n")
    rc, out, err = _run_tool(capsys, summarize_steps, [str(log)])
    assert rc == 2 and "step 1 has a step time of -0.005 s; a step time must be > 0" in err


def test_credentials_are_redacted_by_value_too() -> None:
    assert is_secret_env("INTERNAL_CREDS", "creds_FAKE_777")  # the name
    assert is_secret_env("BUILD_INFO", "xK9mQ2vL8nR4tY6wZ1cF3hJ5")  # the value's shape
    assert not looks_like_credential("/usr/local/bin:/usr/bin:/bin")
    assert not looks_like_credential("0123456789abcdef0123456789abcdef01234567")  # a digest
    assert not is_secret_env("CREDIT_LIMIT", "1000")
    s = Sanitizer.from_config(environ={"INTERNAL_CREDS": "creds_FAKE_777",
                                       "BUILD_INFO": "xK9mQ2vL8nR4tY6wZ1cF3hJ5", "HOME": "/root"})
    text = s.text("login creds_FAKE_777 and xK9mQ2vL8nR4tY6wZ1cF3hJ5 end")
    assert "creds_FAKE_777" not in text and "xK9mQ2vL8nR4tY6wZ1cF3hJ5" not in text


def test_a_command_log_never_keeps_a_planted_credential(tmp_path: Path) -> None:
    run = tmp_path / "run"
    script = tmp_path / "leaky.py"
    script.write_text("import os, sys\nprint('using', os.environ['INTERNAL_CREDS'])\n"
                      "for i in range(int(sys.argv[1])):\n"
                      "    print(f'step {i} time 2.0ms loss 1.0', flush=True)\n")
    proc = cli(["workload=command_example", "+sweep=example_delay", "protocol=quick",
                "launcher=inline", f"workload.command='{{python}} {script} {{steps}}'",
                f"run_dir='{run}'"], tmp_path, env={"INTERNAL_CREDS": "creds_FAKE_777"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    logs = list(run.glob("trials/*/command.log"))
    assert logs
    for p in run.rglob("*"):
        if p.is_file():
            assert b"creds_FAKE_777" not in p.read_bytes(), p


# --------------------------------------------------------------------------- soak


def _campaign_pids(run: Path) -> list[int]:
    """Processes whose command line names the run directory (the campaign, its trials)."""
    out = []
    needle = str(run).encode()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in cmd and state != "Z":
                out.append(int(d.name))
    return out


@pytest.mark.slow
def test_soak_killed_three_times_at_random_points_then_resumed(tmp_path: Path,
                                                               compose: Any) -> None:
    """SIGKILL, SIGTERM and SIGINT in a random order, at random points of a campaign of real trial
    processes (launcher=local), each followed by a resume: the final run directory has every
    planned trial exactly once, and its verdicts are those the analysis gives the same records
    in one go."""
    import random

    from orchestrator.campaign.run import finalize

    rng = random.Random(34)
    run = tmp_path / "soak run"
    args = ["workload=synthetic", "+sweep=calibrate", "protocol=quick", "launcher=local",
            "protocol.correctness.mode=off", "sweep.values=[0.05,0.2]", "sweep.labels=[p5,p20]",
            "protocol.repeats=3", "protocol.max_rounds=3", "protocol.measured_steps=40"]
    kinds = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]
    rng.shuffle(kinds)
    outcomes = []
    for sig in kinds:  # one of each signal, in a random order (CI time)
        # killed before it planned (the interpreter still starting): it starts afresh
        where = f"resume='{run}'" if (run / "plan.json").exists() else f"run_dir='{run}'"
        proc = start([*args, where], tmp_path)
        time.sleep(rng.uniform(2.0, 7.0))
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
        outcomes.append((signal.Signals(sig).name, proc.returncode))
        if sig != signal.SIGKILL and proc.returncode in (130, 143):
            assert "Traceback" not in err, err[-3000:]
        assert wait_for(lambda: not _campaign_pids(run), 10.0), _campaign_pids(run)
    final = cli([*args, f"resume='{run}'"], tmp_path, timeout=600)
    assert final.returncode == 0, (outcomes, final.stderr[-3000:])
    plan = json.loads((run / "plan.json").read_text())
    ids = [t["trial_id"] for t in plan["trials"]]
    assert len(ids) == len(set(ids)) == 3 * 3  # 3 rounds x (baseline, 2 variants)
    records = {p.parent.name: json.loads(p.read_text()) for p in run.glob("trials/*/trial.json")}
    assert sorted(records) == sorted(ids), outcomes
    assert all(r["status"] == "ok" for r in records.values()), {
        k: r["status"] for k, r in records.items()}
    assert len(list(run.glob("trials/*/command.session.json"))) == 0
    # the verdicts of the same records analysed in one go
    again = tmp_path / "analysed again"
    shutil.copytree(run, again)
    cfg = compose([*args, f"run_dir='{again}'"])
    got = finalize(cfg, again)
    written = [json.loads(ln) for ln in (run / "decisions.jsonl").read_text().splitlines()]
    assert [(v["label"], v["verdict"]) for v in written] == [
        (v.label, v.verdict) for v in got.verdicts], outcomes
    print("soak:", outcomes)
