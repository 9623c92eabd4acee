"""Config checks of the levers: compile, loader, command workload, env switches, user recipes."""

from __future__ import annotations

from typing import Any

import pytest

from recipes.command.config import CommandWorkloadConfig
from recipes.gpt.config import GPTWorkloadConfig
from orchestrator.core.errors import ConfigError

CMD = ["workload=command_example", "+sweep=example_delay"]


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["workload.model.compile.mode=fast"],
         r"workload\.model\.compile\.mode: 'fast' is not a valid choice; choose one of: off, default"),
        (["workload.model.compile.backend=aot_eager", "workload.model.compile.mode=reduce-overhead"],
         r"workload\.model\.compile\.mode: 'reduce-overhead' is an inductor mode; with backend=aot_eager"),
        (["workload.model.compile.mark_dynamic=true"],
         r"workload\.model\.compile\.mark_dynamic: needs torch\.compile"),
        (["workload.loader.num_workers=2"],
         r"workload\.loader: DataLoader settings apply to the text pipeline; set workload\.data\.kind=text"),
        (["workload.data.kind=text", "workload.loader.prefetch_factor=2"],
         r"workload\.loader\.prefetch_factor: needs worker processes; set workload\.loader\.num_workers > 0"),
        (["workload.data.kind=text", "workload.loader.persistent_workers=true"],
         r"workload\.loader\.persistent_workers: needs worker processes"),
        (["workload.data.kind=csv"], r"workload\.data\.kind: 'csv' is not a valid choice; choose one of: synthetic, text"),
        (["workload.data.kind=text", "workload.data.text_path=/no/such/corpus.txt"],
         r"workload\.data\.text_path: no such file 'corpus\.txt'"),
        (["workload.recipe=tests.helpers.no_such_module:build"],
         r"workload\.recipe: cannot import 'tests\.helpers\.no_such_module' \(ModuleNotFoundError"),
        (["workload.recipe=tests.helpers.user_recipe:nope"],
         r"workload\.recipe: 'tests\.helpers\.user_recipe' has no callable 'nope'"),
        (["protocol.projection_steps=[0]"], r"protocol\.projection_steps\[0\]: must be > 0"),
    ],
)
def test_bad_gpt_levers_name_the_key(compose: Any, overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose(["workload=gpt_test", "+sweep=fa2", *overrides])


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["workload.command='{python} train.py --lr {lr2}'"],
         r"workload\.command: unknown placeholder \{lr2\}; declare it under workload\.params"),
        (["workload.command='run {'"], r"workload\.command: bad template"),
        (["+workload.env.X='{nope}'"], r"workload\.env\.X: unknown placeholder \{nope\}"),
        (["+workload.params.steps=3"], r"workload\.params\.steps: is a built-in placeholder"),
        (["workload.log.pattern='step (?P<step>\\d+)'"], r"workload\.log\.pattern: the pattern needs a time group"),
        (["workload.log.skip_steps=-1"], r"workload\.log\.skip_steps: must be >= 0"),
        (["workload.time_limit_s=1000"], r"workload\.time_limit_s: 1000 s must be below protocol\.trial_timeout_s=900"),
        (["workload.command=''"], r"workload\.command: is empty"),
    ],
)
def test_bad_command_workloads_name_the_key(compose: Any, overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose([*CMD, *overrides])


def test_protocol_and_launcher_checks_for_levers(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"protocol\.warmup_steps: must be >= 1 when an arm uses torch\.compile"):
        compose(["workload=gpt_test", "+sweep=compile", "protocol.warmup_steps=0"])
    with pytest.raises(ConfigError, match=r"workload\.model\.compile\.visit_buckets: counts the "
                       r"recompiles .* needs torch\.compile in some arm; set workload\.model\.compile\.mode"):
        compose(["workload=gpt_test", "+sweep=fa2", "workload.model.compile.visit_buckets=true"])
    with pytest.raises(ConfigError, match=r"launcher\.name: inline runs trials inside this process"):
        compose(["workload=gpt_test", "+sweep=omp_threads", "launcher=inline"])
    # a command workload gets the switch in its child's environment even inline
    cfg = compose([*CMD, "launcher=inline", "sweep.variable=env.OMP_NUM_THREADS",
                   "sweep.baseline='1'", "sweep.values=['2']", "sweep.labels=null",
                   "sweep.baseline_label=null"])
    assert isinstance(cfg.workload, CommandWorkloadConfig)


def test_lever_sweeps_compose(compose: Any) -> None:
    cfg = compose(["workload=gpt_test", "+sweep=dataloader"])
    assert isinstance(cfg.workload, GPTWorkloadConfig)
    # short epochs, so non-persistent workers restart inside the measured steps
    assert cfg.sweep.fixed == {"workload.data.kind": "text", "workload.loader.epoch_batches": 4}
    cfg = compose(["workload=gpt_test", "+sweep=compile_shapes"])
    assert cfg.sweep.values[1] == {"dynamic": None, "mark_dynamic": True}
    assert cfg.sweep.fixed["workload.model.compile.visit_buckets"] is True
