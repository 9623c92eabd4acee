"""Every conf file composes; bad input gives one line naming the key, and exit code 2."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import group_options
from orchestrator.spec.config import Config
from orchestrator.core.convert import from_dict, to_dict
from recipes.gpt.config import GPTWorkloadConfig
from recipes.muon.config import MuonTPWorkloadConfig
from recipes.registry import workload_from_dict
from recipes.synthetic.config import SyntheticWorkloadConfig
from orchestrator.core.errors import ConfigError


def test_every_conf_file_composes(compose: Any) -> None:
    groups = ["workload", "protocol", "invariants", "launcher", "hardware"]
    # sweeps name paths of one workload family: command sweeps vary a command workload's
    # params, calibrate the synthetic workloads, tp_mode the muon_tp workloads; every other
    # sweep targets the GPT workloads
    families = ("command", "synthetic", "muon_tp", "own_offset")
    sweep_family = {"example_delay": "command", "planted_command": "command",
                    "planted_client": "command", "nanogpt_delay": "command",
                    "planted_startup": "command",
                    "calibrate": "synthetic", "tp_mode": "muon_tp", "own_offset": "own_offset"}
    # a command sweep varies its own example's params
    command_example = {"example_delay": "command_example", "planted_command": "command_busy",
                       "planted_client": "command_client", "nanogpt_delay": "nanogpt_client",
                       "planted_startup": "command_startup"}
    needs_cwd = ("nanogpt_cpu", "nanogpt_client")

    def family(workload: str) -> str:
        return next((f for f in families if workload.startswith(f)), "gpt")

    # nanoGPT's train.py as a command: it needs the checkout's path, here any directory
    cfg = compose(["workload=nanogpt_cpu", f"workload.cwd={Path.cwd()}", "+sweep=planted_command",
                   "sweep.variable=workload.params.compile", "sweep.baseline=False",
                   "sweep.values=[True]", "sweep.labels=[compiled]"])
    assert cfg.workload.kind == "command" and cfg.workload.tokens_per_step
    with pytest.raises(ConfigError, match=r"^workload\.cwd: /path/to/nanoGPT is not a directory"):
        compose(["workload=nanogpt_cpu", "+sweep=planted_command"])
    # patched to use orchestrator.client: its delay is switched between steps
    cfg = compose([f"workload.cwd={Path.cwd()}", "+sweep=nanogpt_delay"])
    assert cfg.workload.name == "nanogpt_client" and list(cfg.workload.switchable) == ["delay_ms"]

    first = {"command": "example_delay", "synthetic": "calibrate", "muon_tp": "tp_mode",
             "own_offset": "own_offset", "gpt": "fa2"}
    for group in groups:
        for option in group_options(group):
            if option in needs_cwd:
                continue  # above
            own = {w: sw for sw, w in command_example.items()}
            sweep = (own.get(option) or first[family(option)]) if group == "workload" else "fa2"
            cfg = compose([f"{group}={option}", f"+sweep={sweep}"])
            assert isinstance(cfg, Config)
    for sweep, workload in itertools.product(group_options("sweep"), group_options("workload")):
        if sweep_family.get(sweep, "gpt") != family(workload) or workload in needs_cwd:
            continue
        if sweep in command_example and workload != command_example[sweep]:
            continue
        env_sweep = sweep in ("omp_threads", "alloc_conf", "alloc_conf_musa")
        cfg = compose([f"workload={workload}", f"+sweep={sweep}"]
                      + (["launcher=local"] if env_sweep else []))
        assert cfg.sweep is not None and cfg.sweep.name == sweep
        kind = family(workload)
        if kind == "command":
            assert not isinstance(cfg.workload, GPTWorkloadConfig)
        else:
            from recipes.custom.config import CustomWorkloadConfig

            schema = {"synthetic": SyntheticWorkloadConfig, "muon_tp": MuonTPWorkloadConfig,
                      "own_offset": CustomWorkloadConfig}
            assert isinstance(cfg.workload, schema.get(kind, GPTWorkloadConfig))


def test_default_config_runs_on_cpu_defaults(compose: Any) -> None:
    cfg = compose(["+sweep=fa2_tiling"])
    assert cfg.device == "auto" and cfg.launcher.name == "local"
    assert cfg.workload.name == "gpt_tiny"
    assert cfg.sweep.knob == {
        "block_q": "workload.model.attention.block_q",
        "block_k": "workload.model.attention.block_k",
    }
    assert len(cfg.sweep.values) >= 3


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["protocol.warmup_stpes=3"], r"protocol\.warmup_stpes: unknown key; did you mean protocol\.warmup_steps\?"),
        (["workload=nope"], r"workload: no option 'nope'; choose one of: .*gpt_tiny"),
        (["protocol.repeats=abc"], r"protocol\.repeats: .*could not be converted to Integer"),
        (["protocol.repeats=0"], r"protocol\.repeats: must be > 0"),
        (["protocol=quick", "protocol.repeats=3"],
         r"^protocol\.max_rounds: 2 is below protocol\.repeats=3 .*set protocol\.max_rounds=3"),
        (["protocol.confidence=1.5"], r"protocol\.confidence: must be in \[0\.5, 1\)"),
        (["device=tpu"], r"device: 'tpu' is not a valid choice; choose one of: auto, cpu, cuda, musa"),
        (["workload.precision=fp8"], r"workload\.precision: 'fp8' is not a valid choice"),
        (["workload.model.attention.backend=fast"], r"attention\.backend: 'fast' is not a valid choice; choose one of: eager, sdpa, tiled, triton, fa2, flash_attn"),
        (["workload.model.n_head=3"], r"workload\.model\.n_head: d_model=32 must be divisible"),
        (["launcher.nme=x"], r"launcher\.nme: unknown key; did you mean launcher\.name\?"),
        (["workload.recipe=nosuch"], r"workload\.recipe: unknown recipe 'nosuch'"),
    ],
)
def test_bad_overrides_name_the_key(compose: Any, overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose(["workload=gpt_test", "+sweep=fa2", *overrides])


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ([], r"sweep: no sweep selected; add \+sweep=NAME, one of: .*fa2_tiling"),
        (["+sweep=nosuch"], r"sweep: no option 'nosuch'"),
        (["+sweep=fa2_tiling", "sweep.knob=null", "sweep.variable=workload.model.d_model",
          "sweep.baseline=1", "sweep.values=[2]"], r"frozen by invariants .*model architecture"),
        (["+sweep=fa2_tiling", "sweep.knob=null", "sweep.variable=workload.model.attention.block_q",
          "sweep.baseline=32", "sweep.values=[{block_q:64,block_k:64}]", "sweep.labels=null"],
         r"sweep\.values\[0\]: .*would change more than one knob"),
        (["+sweep=fa2_tiling", "sweep.values=[{block_q:64}]", "sweep.labels=null"],
         r"sweep\.values\[0\]: keys \['block_q'\] must be exactly the knob fields"),
        (["+sweep=fa2_tiling", "sweep.knob=null", "sweep.variable=workload.model.attention.blok_q",
          "sweep.baseline=32", "sweep.values=[64]", "sweep.labels=null"],
         r"sweep\.variable: .*does not exist.*did you mean workload\.model\.attention\.block_q"),
        (["+sweep=fa2", "sweep.values=[{backend:fast,sdpa_kernel:auto}]", "sweep.labels=null"],
         r"sweep\.values\[0\]: arm 'backend=fast,sdpa_kernel=auto' sets workload\.model\.attention\.backend"),
        (["+sweep=fa2", "sweep.buckets=[s999]"], r"sweep\.buckets: 's999' is not a workload bucket"),
        (["+sweep=fa2", "sweep.labels=[a]"], r"sweep\.labels: has 1 entries for 5 values"),
        (["+sweep=fa2", "sweep.values=[{backend:sdpa,sdpa_kernel:math}]", "sweep.labels=null"],
         r"repeats the baseline"),
    ],
)
def test_bad_sweeps_are_refused(compose: Any, overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose(["workload=gpt_test", *overrides])


def test_cli_prints_one_line_and_exits_2(tmp_path: Any) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "+sweep=fa2", "protocol.warmup_stpes=3"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: protocol.warmup_stpes: unknown key")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists()  # failed before any work


def test_multirun_preflight_checks_every_combination(tmp_path: Any) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "-m", "workload=gpt_test,gpt_nope", "+sweep=fa2"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 2
    assert "workload: no option 'gpt_nope'" in proc.stderr


def test_dataclass_round_trip(compose: Any) -> None:
    cfg = compose(["workload=gpt_test", "+sweep=fa2"])
    w = workload_from_dict(to_dict(cfg.workload))
    assert w == cfg.workload
    with pytest.raises(ConfigError, match=r"workload\.bogus: unknown key"):
        workload_from_dict({**to_dict(cfg.workload), "bogus": 1})
    assert from_dict(Config, {"device": "cpu"}).device == "cpu"


@pytest.mark.parametrize(("sweep", "workload", "kind"), [
    ("tp_mode", "muon_tp", "muon_tp"),
    ("example_delay", "command_example", "command"),
    ("calibrate", "synthetic", "synthetic"),
    ("fa2", "gpt_tiny", "gpt"),
])
def test_a_one_kind_sweep_picks_its_own_workload_unless_one_is_given(
    compose: Any, sweep: str, workload: str, kind: str
) -> None:
    cfg = compose([f"+sweep={sweep}"])
    assert (cfg.workload.name, cfg.workload.kind) == (workload, kind)
    assert cfg.sweep.workload_kind == kind and cfg.sweep.workload_example == workload


@pytest.mark.parametrize(("overrides", "match"), [
    (["workload=gpt_tiny", "+sweep=tp_mode"],
     (r"^workload: sweep 'tp_mode' needs a workload of kind 'muon_tp' \(e\.g\. workload=muon_tp, "
      r"its default\); workload=gpt_tiny is of kind 'gpt'; drop workload= or choose one of kind "
      r"'muon_tp'$")),
    (["workload=gpt_test", "+sweep=example_delay"],
     (r"^workload: sweep 'example_delay' needs a workload of kind 'command' \(e\.g\. "
      r"workload=command_example, its default\); workload=gpt_test is of kind 'gpt'")),
    (["workload=synthetic", "+sweep=fa2"],
     r"^workload: sweep 'fa2' needs a workload of kind 'gpt' \(e\.g\. workload=gpt_tiny"),
    (["+sweep=tp_mode", "sweep.workload_kind=tpu"],
     r"^sweep\.workload_kind: 'tpu' is not a valid choice; choose one of: gpt, command"),
])
def test_a_one_kind_sweep_refuses_a_workload_of_another_kind(
    compose: Any, overrides: list[str], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        compose(overrides)


def test_cli_refuses_a_workload_of_another_kind_in_one_line(capsys: Any) -> None:
    from orchestrator.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["workload=gpt_tiny", "+sweep=tp_mode"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a workload of kind 'muon_tp'" in err[0]
    assert "does not exist in the workload config" not in err[0]
