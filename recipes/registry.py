"""The bundled recipes, by name: each one's config schema (its workload kind), its builder and
its decisions.md sections.

Importing this module registers every bundled workload schema (each recipe's ``config`` module
registers its own with :func:`orchestrator.spec.config.workload_schema`). Builders and report sections are named by import path
and imported only when used, so building one recipe never imports another (nor torch into the
pre-flight). One's own recipe is named by import path too (``workload.recipe=pkg.module:build``).
"""

from __future__ import annotations

import importlib
from typing import Any

import recipes.command.config  # noqa: F401  (registers kind command)
import recipes.custom.config  # noqa: F401  (registers kind custom)
import recipes.gpt.config  # noqa: F401  (registers kind gpt)
import recipes.muon.config  # noqa: F401  (registers kind muon_tp)
import recipes.synthetic.config  # noqa: F401  (registers kind synthetic)
from orchestrator.core.section import Section
from orchestrator.spec.config import WORKLOAD_SCHEMAS, WorkloadConfig
from orchestrator.core.convert import from_dict
from orchestrator.core.errors import ConfigError
from orchestrator.core.trial_record import TrialRecordDict

# the order messages list the bundled kinds in (the default workload's first); kinds registered
# by one's own code follow in the order they were registered
KIND_ORDER = ("gpt", "command", "custom", "synthetic", "muon_tp")

# name -> "module:function"; imported lazily so building one recipe never imports another
REGISTRY: dict[str, str] = {
    "gpt": "recipes.gpt.recipe:build",
    "command": "recipes.command.recipe:build",
    "synthetic": "recipes.synthetic.recipe:build",
    "muon_tp": "recipes.muon.recipe:build",
}

# registry name -> the workload keys its trainers switch between steps (the builder's
# recipes.base.switchable declaration, kept here so planning needs no recipe import; a test
# checks the two agree)
SWITCHABLE: dict[str, tuple[str, ...]] = {
    "gpt": ("workload.model.attention.backend", "workload.model.attention.block_q",
            "workload.model.attention.block_k", "workload.model.attention.sdpa_kernel",
            "workload.model.attention.num_warps", "workload.model.attention.num_stages"),
    "synthetic": ("workload.extra_work_fraction", "workload.epoch_steps"),
    "muon_tp": ("workload.tp.mode",),
}

# workload kind -> "module:function(records) -> [(title, markdown lines)]": decisions.md sections
REPORTS: dict[str, str] = {
    "muon_tp": "recipes.muon.report:sections",
}


def workload_kinds() -> list[str]:
    """Every registered workload kind, in the order messages list them."""
    rank = {k: i for i, k in enumerate(KIND_ORDER)}
    return sorted(WORKLOAD_SCHEMAS, key=lambda k: rank.get(k, len(rank)))


def workload_from_dict(data: dict[str, Any]) -> WorkloadConfig:
    """The workload's dataclass (its kind's schema) from plain data (a spec's ``workload``)."""
    schema = WORKLOAD_SCHEMAS.get(data.get("kind", ""))
    if schema is None:
        raise ConfigError(
            "workload.kind",
            f"unknown workload kind {data.get('kind')!r}; choose one of: "
            f"{', '.join(workload_kinds())}",
        )
    return from_dict(schema, data, "workload.")  # type: ignore[no-any-return]


def builder_path(name: str) -> str:
    """``module:function`` of a recipe named by registry name or import path."""
    target = REGISTRY.get(name, name if ":" in name else None)
    if target is None:
        raise KeyError(f"unknown recipe {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return target


def switchable_keys(name: str) -> tuple[str, ...]:
    """The keys recipe ``name`` (a registry name or import path) can switch between steps."""
    if name in REGISTRY:
        return SWITCHABLE.get(name, ())
    module, _, attr = builder_path(name).partition(":")
    return tuple(getattr(getattr(importlib.import_module(module), attr), "switchable", ()))


def check_import_path(target: str) -> str | None:
    """Why ``pkg.module:build`` cannot be used as a recipe, or None when it can."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        return f"{target!r} is not an import path; write pkg.module:function"
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 -- any import failure is the user's to fix
        first = (str(exc).strip().splitlines() or [""])[0]
        return (f"cannot import {module!r} ({type(exc).__name__}: {first}); put its package on "
                "PYTHONPATH or install it")
    fn = getattr(mod, attr, None)
    if not callable(fn):
        names = sorted(n for n in dir(mod) if not n.startswith("_") and callable(getattr(mod, n)))
        return f"{module!r} has no callable {attr!r}; callables there: {', '.join(names[:10])}"
    return None


def report_sections(kind: str, records: list[TrialRecordDict]) -> list[Section]:
    target = REPORTS.get(kind)
    if target is None:
        return []
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)(records)  # type: ignore[no-any-return]
