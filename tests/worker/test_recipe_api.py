"""The recipe API (recipes/base.py): required members typed, optional hooks declared with their
defaults, and the orchestrator reaching every trainer through them, never probing by name."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from orchestrator.worker.bootstrap import load_recipe
from recipes.base import (
    HOOKS,
    PROBE_HOOKS,
    Hooked,
    Recipe,
    TrainerHooks,
    probe_hooks_missing,
    with_hooks,
)

ROOT = Path(__file__).resolve().parents[2]


class Bare:
    """A user's trainer that knows nothing of TrainerHooks."""

    tokens_per_step = 8
    samples_per_step = 2
    model = "the model"

    def batches(self) -> Any:
        return iter(range(3))

    def train_step(self, batch: Any) -> float:
        return 0.5

    def step_tags(self) -> list[str]:  # one hook of its own
        return ["epoch_boundary"]


def test_a_trainer_without_hooks_gets_the_declared_defaults() -> None:
    t = with_hooks(Bare())
    assert isinstance(t, Hooked) and isinstance(t, TrainerHooks)
    assert t.step_tags() == ["epoch_boundary"]  # its own hook wins
    assert t.visit_shapes() is None and t.extra_record() == {}
    assert t.executes() is None and t.executes_covers == ()
    assert t.useful_flops_per_step() is None and t.useful_flops_definition is None
    shard = object()
    assert t.full_tensor("w", shard) is shard
    assert (t.tokens_per_step, t.samples_per_step, t.train_step(0)) == (8, 2, 0.5)
    assert list(t.batches()) == [0, 1, 2] and t.model == "the model"  # anything else: its own
    assert probe_hooks_missing(t) == [h for h in PROBE_HOOKS if h not in (
        "model", "batches", "train_step")]


def test_bundled_trainers_declare_their_hooks_by_subclassing() -> None:
    from recipes.command.recipe import CommandTrainer
    from recipes.gpt.recipe import GPTTrainer
    from recipes.muon.recipe import MuonTPTrainer
    from recipes.synthetic.recipe import SyntheticTrainer

    for cls in (GPTTrainer, MuonTPTrainer, SyntheticTrainer, CommandTrainer):
        assert issubclass(cls, TrainerHooks), cls
    assert set(HOOKS) <= set(dir(TrainerHooks))


def test_recipes_declare_what_they_are() -> None:
    assert load_recipe("synthetic").host_only and not load_recipe("synthetic").external
    assert load_recipe("command").external and not load_recipe("command").host_only
    gpt = load_recipe("gpt")
    assert isinstance(gpt, Recipe) and not gpt.external and not gpt.host_only
    user = load_recipe("tests.helpers.user_recipe:build")
    assert user.name == "tests.helpers.user_recipe:build" and not user.external


def test_the_orchestrator_never_probes_a_hook_by_name() -> None:
    """getattr/hasattr with a hook's name appear only in recipes/base.py (the declaration)."""
    names = set(HOOKS) | set(PROBE_HOOKS) | {"external", "host_only"}
    found = []
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.args[1].value}")
    assert not found, found
