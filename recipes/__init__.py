"""Workloads the orchestrator can time. Each recipe is registered by name.

A recipe builds a :class:`recipes.base.Trainer` for one bucket on one device; the orchestrator
owns warm-up, timing and synchronisation, recipes never time themselves. One's own recipe is
named by import path (``workload.recipe=my_pkg.module:build``); see :mod:`recipes.base`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# name -> "module:function"; imported lazily so building one recipe never imports another
REGISTRY: dict[str, str] = {
    "gpt": "recipes.gpt.recipe:build",
    "command": "recipes.command.recipe:build",
    "synthetic": "recipes.synthetic.recipe:build",
    "muon_tp": "recipes.muon.recipe:build",
}


def get_builder(name: str) -> Callable[..., Any]:
    target = REGISTRY.get(name, name if ":" in name else None)
    if target is None:
        raise KeyError(f"unknown recipe {name!r}; known: {', '.join(sorted(REGISTRY))}")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


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


# workload kind -> "module:function(records) -> [(title, markdown lines)]": decisions.md sections
REPORTS: dict[str, str] = {
    "muon_tp": "recipes.muon.report:sections",
}


def report_sections(kind: str, records: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    target = REPORTS.get(kind)
    if target is None:
        return []
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)(records)  # type: ignore[no-any-return]
