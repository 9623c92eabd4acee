"""Shared pieces of the launcher tests: specs built by hand, Slurm detection, process lookup."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator, Optional

from orchestrator.spec.jobs import ProbeSpec, TrialSpec



@contextlib.contextmanager
def in_dir(path: Path) -> Iterator[None]:
    """Run the block in ``path`` (contextlib.chdir, which Python 3.10 lacks)."""
    cwd = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(cwd)


DEFAULT_SLURM_CONF = "/tmp/orchestrator-slurm/slurm.conf"

TEST_WORKLOAD: dict[str, Any] = {
    "name": "gpt_test", "kind": "gpt", "recipe": "gpt", "precision": "fp32", "seed": 0,
    "world_size": 1,
    "buckets": [{"name": "s32", "seq_len": 32, "micro_batch": 2, "weight": 1.0}],
    "model": {"vocab_size": 64, "n_layer": 1, "n_head": 2, "d_model": 32, "d_ff": 64,
              "dropout": 0.0, "attention": {"backend": "sdpa", "sdpa_kernel": "auto",
                                            "block_q": 64, "block_k": 64}},
    "optimizer": {"name": "adamw", "lr": 3e-4, "weight_decay": 0.1, "beta1": 0.9,
                  "beta2": 0.95, "grad_clip": 1.0},
    "data": {"kind": "synthetic", "seed": 1234},
}


def make_spec(run_dir: Path, arm: int, recipe: str = "gpt", rnd: int = 0, position: int = 0,
              world_size: int = 1, label: Optional[str] = None, measured: int = 3) -> TrialSpec:
    workload = {**TEST_WORKLOAD, "recipe": recipe, "world_size": world_size}
    tid = f"r{rnd:03d}-s32-a{arm}"
    return TrialSpec(
        trial_id=tid, trial_dir=str(run_dir / "trials" / tid), bucket=TEST_WORKLOAD["buckets"][0],
        arm_id=f"a{arm}", arm_label=label or recipe.rsplit(":", 1)[-1], is_baseline=arm == 0,
        round=rnd, position=position, workload=workload, device="cpu", warmup_steps=1,
        measured_steps=measured)


def make_probes(run_dir: Path, variant: str = "gpt", steps: int = 2) -> list[ProbeSpec]:
    """The gate's probes for a baseline (gpt) and one variant (recipe ``variant``), in the
    order the gate runs them: baseline, variant, baseline repeat."""
    root = run_dir / "correctness"

    def probe(name: str, arm: int, role: str, recipe: str,
              cross: Optional[dict[str, str]] = None) -> ProbeSpec:
        return ProbeSpec(name=name, arm_id=f"a{arm}", arm_label=recipe.rsplit(":", 1)[-1],
                         role=role, probe_dir=str(root / name),
                         workload={**TEST_WORKLOAD, "recipe": recipe},
                         buckets=[TEST_WORKLOAD["buckets"][0]],
                         init_checkpoint=str(root / "init.pt"), batch_dir=str(root / "batches"),
                         device="cpu", steps=steps, cross_load=cross or {})

    return [probe("a0", 0, "baseline", "gpt"), probe("a1", 1, "variant", variant),
            probe("a0-repeat", 0, "baseline_repeat", "gpt", {"a1": str(root / "a1" / "final.pt")})]


def slurm_conf() -> Optional[str]:
    """The SLURM_CONF of a running cluster (scripts/slurm_local.sh start), else None."""
    if shutil.which("sbatch") is None or shutil.which("scontrol") is None:
        return None
    conf = os.environ.get("SLURM_CONF") or (DEFAULT_SLURM_CONF if os.path.exists(
        DEFAULT_SLURM_CONF) else None)
    env = dict(os.environ, **({"SLURM_CONF": conf} if conf else {}))
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=env,
                             timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (conf or "") if "is UP" in out else None


SLURM_SKIP_REASON = ("no running Slurm: start one with `bash scripts/slurm_local.sh start` "
                     "(scripts/test.sh and .ci/run do)")


def require_slurm() -> str:
    """SLURM_CONF of the running cluster; skips without one, or fails when the run demands it
    (ORCH_REQUIRE_SLURM=1, set by .ci/run, so CI never passes by skipping)."""
    import pytest

    conf = slurm_conf()
    if conf is None:
        if os.environ.get("ORCH_REQUIRE_SLURM") == "1":
            pytest.fail("ORCH_REQUIRE_SLURM=1 but no Slurm is running: " + SLURM_SKIP_REASON)
        pytest.skip(SLURM_SKIP_REASON)
    return conf


def pids_running(needle: str) -> list[int]:
    """Processes whose command line contains ``needle`` (read from /proc)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd and int(p.name) != os.getpid():
            pids.append(int(p.name))
    return pids


def pids_writing(path: str | Path) -> list[int]:
    """Processes whose stdout (descriptor 1) is ``path``: a trial's process, spawned (its
    command line names the spec) or forked from the fork server (its command line is the
    server's), found the same way."""
    want = os.path.realpath(path)
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if os.path.realpath(os.readlink(p / "fd" / "1")) == want:
                pids.append(int(p.name))
        except OSError:
            continue
    return pids


def pids_under(root: str | Path) -> list[int]:
    """Trial (or probe) processes of a run directory, spawned or forked: a command line naming
    a path under ``root``, or stdout written to a file under it."""
    want = os.path.realpath(root) + os.sep
    pids = set(pids_running(str(root)))
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if os.path.realpath(os.readlink(p / "fd" / "1")).startswith(want):
                pids.add(int(p.name))
        except OSError:
            continue
    return sorted(pids)


def child_pids(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` (read from /proc)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            pids.append(int(p.name))
    return pids


# local: the default start method (auto: forked from the fork server); local-spawn: every trial
# through `python -m orchestrator.worker.trial`
LAUNCHERS = ["inline", "local", "local-spawn", "slurm"]


def launcher_for(name: str, run_dir: Path, monkeypatch: Any) -> Any:
    """A launcher under test; skips (with the reason) when Slurm is not running."""
    if name == "inline":
        from orchestrator.launch.inline import InlineLauncher

        return InlineLauncher()
    if name in ("local", "local-spawn"):
        from orchestrator.launch.local import LocalLauncher

        launcher = LocalLauncher(device="cpu",
                                 start_method="spawn" if name == "local-spawn" else "auto")
        return launcher
    conf = require_slurm()
    if conf:
        monkeypatch.setenv("SLURM_CONF", conf)
    from orchestrator.spec.config import SlurmLauncherConfig
    from orchestrator.launch.slurm import SlurmLauncher

    cfg = SlurmLauncherConfig(partition="debug", time_limit_min=20, poll_interval_s=0.5,
                              lost_after_s=30.0)
    return SlurmLauncher(cfg, folder=str(run_dir / "slurm"))


TWO_NODE_CONF = "/tmp/orchestrator-slurm2/slurm.conf"  # scripts/slurm_twonode.sh's default
TWO_NODE_SKIP_REASON = ("no two-node Slurm: start it with `bash scripts/slurm_twonode.sh start` "
                        "(scripts/test.sh and .ci/run do)")


def require_two_nodes() -> str:
    """SLURM_CONF of the two-node cluster (scripts/slurm_twonode.sh, partition ``two``, nodes
    orchn1 and orchn2); skips without one, or fails where the run demands Slurm
    (ORCH_REQUIRE_SLURM=1)."""
    import pytest

    conf = os.environ.get("ORCH_SLURM2_CONF", TWO_NODE_CONF)
    ok = False
    if shutil.which("sbatch") is not None and os.path.exists(conf):
        try:
            out = subprocess.run(["sinfo", "-h", "-p", "two", "-o", "%t %D"], capture_output=True,
                                 text=True, env=dict(os.environ, SLURM_CONF=conf), timeout=20,
                                 check=False).stdout
            ok = sum(int(n) for t, n in (ln.split() for ln in out.splitlines() if ln.strip())
                     if t.rstrip("*") in ("idle", "mix", "alloc")) == 2
        except (OSError, subprocess.TimeoutExpired, ValueError):
            ok = False
    if not ok:
        if os.environ.get("ORCH_REQUIRE_SLURM") == "1":
            pytest.fail("ORCH_REQUIRE_SLURM=1 but the two-node cluster is not up: "
                        + TWO_NODE_SKIP_REASON)
        pytest.skip(TWO_NODE_SKIP_REASON)
    return conf
