"""Workloads the orchestrator can time. Each recipe is registered by name.

A recipe builds a :class:`recipes.base.Trainer` for one bucket on one device; the orchestrator
owns warm-up, timing and synchronisation, recipes never time themselves.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

# name -> "module:function"; imported lazily so building one recipe never imports another
REGISTRY: dict[str, str] = {
    "gpt": "recipes.gpt.recipe:build",
}


def get_builder(name: str) -> Callable[..., Any]:
    target = REGISTRY.get(name, name if ":" in name else None)
    if target is None:
        raise KeyError(f"unknown recipe {name!r}; known: {', '.join(sorted(REGISTRY))}")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
