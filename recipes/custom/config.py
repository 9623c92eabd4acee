"""The ``custom`` workload's schema (kind ``custom``): one's own in-process recipe, named by
import path (``recipe: my_pkg.module:build``), with its own ``params`` (swept as
``workload.params.NAME``). The schema registers itself under its kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.spec.config import WorkloadConfig, workload_schema


@workload_schema
@dataclass
class CustomWorkloadConfig(WorkloadConfig):
    """An in-process user recipe (``recipe: my_pkg.module:build``) with its own parameters."""

    kind: str = "custom"
    params: dict[str, Any] = field(default_factory=dict)
