"""Entry from the trial runner for ``kind == "profile"``: dispatch on the layer."""

from __future__ import annotations

from typing import Any

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.worker.profile.framework import run_framework
from orchestrator.worker.profile.tools import run_bounded, run_tool_layer

LAYERS = ("framework", "system", "compute", "bounded")


def run_profiled(spec: Any, base: TrialBase) -> TrialRecordDict:
    layer = spec.profile.get("layer")
    if layer == "framework":
        return run_framework(spec, base)
    if layer in ("system", "compute"):
        return run_tool_layer(spec, base)
    if layer == "bounded":
        return run_bounded(spec, base)
    raise ValueError(f"profile layer {layer!r} is not one of {', '.join(LAYERS)}")
