"""Sanitization: unit cases worked out by hand, then a real campaign (the CLI, local launcher,
fresh trial processes) with planted secrets and identifying values, scanning every file of the
run directory."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.errors import ConfigError
from orchestrator.core.sanitize import (
    Identity,
    Sanitizer,
    is_secret_name,
    private_dir,
    reserve_run_dir,
    sanitize_run_dir,
)
from tests.helpers.leaky import LEAK_HOST, LEAK_IP

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_" + "Zx9" * 11  # a Hugging Face-shaped token
GH_TOKEN = "ghp_" + "A1b2" * 9
PASSWORD = "Sup3r-S3cret-Pa55"
USER = "alice-smith"
HOME = f"/home/{USER}"
HOST = "trainbox-7f3a"


def _san(**kw: Any) -> Sanitizer:
    env = {"HOME": HOME, "USER": USER, "HOSTNAME": HOST, "HF_TOKEN": TOKEN,
           "MY_SERVICE_PASSWORD": PASSWORD, "SLURM_NODELIST": "gpu-node[01-04]",
           "MY_TOKEN_FLAG": "true"}
    return Sanitizer(identity=Identity.detect(env), **kw)


def test_each_category_gets_a_stable_placeholder() -> None:
    s = _san(extra_patterns=("acme-[a-z]+",))
    line = (f"{HOST} -> {LEAK_HOST} at {LEAK_IP}:29500 as {USER}; {HOME}/data, /home/bob/x; "
            f"{TOKEN} {GH_TOKEN} https://bob:hunter2@git.example.com/x.git password={PASSWORD} "
            "api_key: 'abcdefgh' gpu-node03 192.168.1.20 fd12:3456::1 acme-widgets "
            "Authorization: Bearer abcdefghijk.lmnop")
    out = s.text(line)
    for planted in (HOST, LEAK_HOST, LEAK_IP, USER, HOME, "bob", TOKEN, GH_TOKEN, "hunter2",
                    PASSWORD, "abcdefgh", "gpu-node03", "192.168.1.20", "fd12:3456::1",
                    "acme-widgets", "abcdefghijk"):
        assert planted not in out, (planted, out)
    assert re.match(r"<host-\d> -> <host-\d> at <ip-1>:29500 as <user>; <home>/data, "
                    r"/home/<user-1>/x; <secret-env-HF_TOKEN> <secret-1> "
                    r"https://<credentials>@git\.example\.com/x\.git "
                    r"password=<secret-env-MY_SERVICE_PASSWORD> api_key: '<secret-\d>'", out), out
    assert "<redacted-1>" in out and "Bearer <secret-" in out
    # same value, same placeholder; a second pass changes nothing (idempotent)
    host = out.split(" ")[0]
    assert s.text(f"again {LEAK_IP} {HOST}") == f"again <ip-1> {host}"
    assert s.text(out) == out


def test_what_must_survive_is_kept() -> None:
    s = _san()
    text = ("torch 2.13.0 on 127.0.0.1 and 8.8.8.8; tokens_per_s=22233 max_tokens: 2048; "
            "commit e7b9c042df7a8dfdd952b2c35ce4e9eb2ec005cf; root logger; localhost:8080/x; "
            "MY_TOKEN_FLAG true; step_time_s,loss\n0.0123,4.5")
    assert s.text(text) == text


def test_keep_hostnames_switch() -> None:
    s = _san(keep_hostnames=True)
    out = s.text(f"{HOST} {LEAK_HOST} {LEAK_IP} {TOKEN}")
    assert out == f"{HOST} {LEAK_HOST} <ip-1> <secret-env-HF_TOKEN>"


def test_json_values_under_secret_keys_are_masked_whole() -> None:
    s = _san()
    data = {"env": {"WANDB_API_KEY": "short1", "TORCH_HUB_TOKEN": "x y z", "OMP_NUM_THREADS": "2"},
            "tokens_per_step": 128, "tokenizer": "gpt2", "path": f"{HOME}/run"}
    out = s.data(data)
    assert out["env"]["WANDB_API_KEY"].startswith("<secret-")
    assert out["env"]["TORCH_HUB_TOKEN"].startswith("<secret-")
    assert out["env"]["OMP_NUM_THREADS"] == "2"
    assert out["tokens_per_step"] == 128 and out["tokenizer"] == "gpt2"
    assert out["path"] == "<home>/run"
    assert is_secret_name("GITHUB_TOKEN") and is_secret_name("db_password")
    assert not is_secret_name("tokens_per_s") and not is_secret_name("TOKENIZERS_PARALLELISM")


def test_run_dir_files_rewritten_atomically_and_numbering_continues(tmp_path: Path) -> None:
    (tmp_path / "trials" / "t0").mkdir(parents=True)
    (tmp_path / "old.txt").write_text("earlier run saw <ip-3>\n")
    (tmp_path / "trials" / "t0" / "stderr.log").write_text(f"dial {LEAK_IP}\n")
    (tmp_path / "trials" / "t0" / "trial.json").write_text(json.dumps({"error": f"at {LEAK_IP}"}))
    (tmp_path / "trace.json.gz").write_bytes(gzip.compress(f'{{"host": "{LEAK_HOST}"}}'.encode()))
    (tmp_path / "plot.png").write_bytes(b"\x89PNG\r\n")
    changed = sanitize_run_dir(tmp_path, _san())
    assert {p.name for p in changed} == {"stderr.log", "trial.json", "trace.json.gz"}
    assert (tmp_path / "trials" / "t0" / "stderr.log").read_text() == "dial <ip-4>\n"
    assert json.loads((tmp_path / "trials" / "t0" / "trial.json").read_text()) == {"error": "at <ip-4>"}
    assert LEAK_HOST not in gzip.decompress((tmp_path / "trace.json.gz").read_bytes()).decode()
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_resume_reuses_the_placeholders_kept_outside_the_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sanitizer sessions on one run directory (a campaign and its resume): a value gets
    the same placeholder in both; the private map is outside the run directory and holds no
    value in clear."""
    store = tmp_path / "private"
    monkeypatch.setenv("ORCHESTRATOR_PRIVATE_DIR", str(store))
    run = tmp_path / "run"
    (run / "trials").mkdir(parents=True)
    first = _san()
    reserve_run_dir(run, first)
    (run / "trials" / "a.log").write_text(f"dial {LEAK_IP} then 10.0.0.9 on {LEAK_HOST}\n")
    assert first.file(run / "trials" / "a.log")
    assert (run / "trials" / "a.log").read_text() == "dial <ip-1> then <ip-2> on <host-1>\n"

    second = _san()  # a new process: nothing in memory
    reserve_run_dir(run, second)
    (run / "trials" / "b.log").write_text(f"{LEAK_HOST}: 10.0.0.9, 192.168.7.7, {LEAK_IP}\n")
    second.file(run / "trials" / "b.log")
    assert (run / "trials" / "b.log").read_text() == "<host-1>: <ip-2>, <ip-3>, <ip-1>\n"

    pmap = private_dir(run)
    assert pmap is not None and pmap.parent == store and run not in pmap.parents
    assert {p.name for p in run.rglob("*") if p.is_file()} == {"a.log", "b.log", "run_id.txt"}
    text = (pmap / "placeholders.json").read_text()
    assert LEAK_IP not in text and LEAK_HOST not in text and "<ip-3>" in text
    assert oct((pmap / "placeholders.json").stat().st_mode & 0o777) == "0o600"
    # without the private map, numbering still never reuses a placeholder for a new value
    (pmap / "placeholders.json").unlink()
    third = _san()
    reserve_run_dir(run, third)
    assert third.text("10.0.0.9") == "<ip-4>"
    # a private store configured inside the run directory is refused
    monkeypatch.setenv("ORCHESTRATOR_PRIVATE_DIR", str(run / "store"))
    assert private_dir(run) is None


def test_vendor_reports_leave_the_run_dir_unless_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compose: Any
) -> None:
    """Binary vendor profiler reports cannot be rewritten: by default they are moved into the
    private store; ``sanitize.keep_vendor_reports=true`` keeps them (private use)."""
    monkeypatch.setenv("ORCHESTRATOR_PRIVATE_DIR", str(tmp_path / "private"))
    secret = f"nsys profile on {HOST} by {USER} in {HOME}".encode()
    for keep in (False, True):
        run = tmp_path / f"run-{keep}"
        (run / "profiles" / "system").mkdir(parents=True)
        for suffix in (".nsys-rep", ".msys-rep", ".ncu-rep", ".mcu-rep"):
            (run / "profiles" / "system" / f"prof{suffix}").write_bytes(b"\0BIN" + secret)
        (run / "trace.json.gz").write_bytes(gzip.compress(f'{{"h": "{HOST}"}}'.encode()))
        cfg = compose(["workload=gpt_test", "+sweep=fa2",
                       f"sanitize.keep_vendor_reports={str(keep).lower()}"])
        san = Sanitizer.from_config(cfg.sanitize, environ={"HOSTNAME": HOST, "USER": USER,
                                                           "HOME": HOME})
        assert san.keep_vendor_reports is keep
        sanitize_run_dir(run, san)
        left = sorted(p.name for p in (run / "profiles" / "system").iterdir())
        store = private_dir(run)
        assert store is not None and run not in store.parents
        moved = store / "vendor_reports" / "profiles" / "system"
        if keep:
            assert len(left) == 4 and not moved.exists()
        else:
            assert left == []
            assert sorted(p.name for p in moved.iterdir()) == [
                "prof.mcu-rep", "prof.msys-rep", "prof.ncu-rep", "prof.nsys-rep"]
            assert (moved / "prof.nsys-rep").read_bytes() == b"\0BIN" + secret
        assert HOST not in gzip.decompress((run / "trace.json.gz").read_bytes()).decode()


def test_bad_extra_pattern_names_the_key(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"sanitize\.extra_patterns\[0\]: '\(' is not a valid"):
        compose(["workload=gpt_test", "+sweep=fa2", "sanitize.extra_patterns=['(']"])
    with pytest.raises(ConfigError, match=r"environment\.on_mismatch: 'maybe' is not a valid"):
        compose(["workload=gpt_test", "+sweep=fa2", "environment.on_mismatch=maybe"])


def test_planted_secrets_reach_no_file_of_a_real_campaign(tmp_path: Path) -> None:
    """The real CLI, local launcher, fresh trial processes. Secrets are planted in the trial
    environment, in a config value, in a path under the user's home, and in a stderr/log line
    with a private IP and host names; the leaky recipe also fails with them in its error."""
    run_dir = tmp_path / "run ü"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_TOKEN=TOKEN, MY_SERVICE_PASSWORD=PASSWORD,
               USER=USER, LOGNAME=USER, HOME=HOME, HOSTNAME=HOST,
               TORCH_HUB_TOKEN="tht_" + "k" * 24)
    hypothesis = f"leaky logs; ask {GH_TOKEN} at acme-internalproj for access"
    cmd = [
        sys.executable, "-m", "orchestrator", "workload=gpt_test", "protocol=quick",
        "protocol.repeats=1", "launcher=local", "+sweep=fa2", "sweep.buckets=[s32]",
        "sweep.knob=null", "sweep.variable=workload.recipe", "sweep.baseline=gpt",
        "sweep.values=[tests.helpers.leaky:build_raise]", "sweep.labels=[leaky]",
        "sweep.fixed={}", "sweep.baseline_label=null", f"sweep.hypothesis='{hypothesis}'",
        "sanitize.extra_patterns=['acme-[a-z]+']", f"run_dir='{run_dir}'",
        # a profiled trial per arm: gzipped traces in the run directory, scanned decompressed
        "profile=framework", "profile.wait_steps=0", "profile.active_steps=1",
        f"hydra.run.dir='{tmp_path / 'hydra'}'",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    names = {str(p.relative_to(run_dir)) for p in files}
    for expected in ("environment.json", "source.txt", "command.txt", "config.json",
                     "decisions.md", "campaign.log", "trials/r000-s32-a1/stderr.log"):
        assert expected in names, sorted(names)
    planted = [TOKEN, GH_TOKEN, PASSWORD, USER, HOME, HOST, LEAK_HOST, LEAK_IP,
               "acme-internalproj", "k" * 24]
    # every file is scanned in the form its content has: gzipped ones decompressed (the
    # profiled trial's traces), text as text, images as bytes; no other kind may appear
    scanned: dict[str, int] = {}
    for p in files:
        raw = p.read_bytes()
        suffix = p.suffix.lower()
        if suffix == ".gz":
            raw = gzip.decompress(raw)
            suffix = Path(p.stem).suffix.lower() + ".gz"
        elif suffix == ".pt":  # torch.save archives (correctness probes): stored, not
            with zipfile.ZipFile(p) as zf:  # deflated, so the byte scan sees their strings
                assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
        scanned[suffix] = scanned.get(suffix, 0) + 1
        text = raw.decode("utf-8", errors="replace")
        for value in planted:
            assert value not in text, f"{value!r} leaked into {p.relative_to(run_dir)}"
    assert set(scanned) <= {".json", ".jsonl", ".csv", ".txt", ".md", ".log", ".diff", ".html",
                            ".png", ".pt", ".json.gz"}, scanned
    assert scanned.get(".json.gz", 0) >= 1  # a profiled trace really was decompressed
    # the values did flow through: their placeholders are where they would have been
    stderr = (run_dir / "trials/r000-s32-a1/stderr.log").read_text()
    assert "<host-" in stderr and "<ip-" in stderr and "<home>/datasets" in stderr
    assert "<secret-env-HF_TOKEN>" in stderr and "<user>" in stderr
    rec = json.loads((run_dir / "trials/r000-s32-a1/trial.json").read_text())
    assert rec["status"] == "failed" and "<ip-" in rec["error"]
    assert "<secret-" in (run_dir / "command.txt").read_text()
    assert "<redacted-" in (run_dir / "decisions.md").read_text()
    envrep = json.loads((run_dir / "environment.json").read_text())
    assert envrep["gathered_in"] == "trial process"
    assert envrep["env_switches"]["TORCH_HUB_TOKEN"].startswith("<secret")
    assert envrep["errors"] == {}
    assert "commit: " in (run_dir / "source.txt").read_text()
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["sweep"]["hypothesis"].startswith("leaky logs; ask <secret-")
