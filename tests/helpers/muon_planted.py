"""A planted broken tp_mode for the correctness-gate test (test-only; never a shipped recipe).

``build`` is the ``muon_tp`` recipe except that ``distributed`` Newton-Schulz returns its result
scaled by ``PLANTED_SCALE``: an error of 5e-4 relative in the update of every sharded weight,
which the tp_mode sweep's 1e-4 update tolerance must catch (the default fp32 one, 1e-3, would
not). Used as ``workload.recipe=tests.helpers.muon_planted:build``; the probe processes import
it by that path.
"""

from __future__ import annotations

from typing import Any

import torch

import recipes.muon.optimizer as optimizer_mod
from recipes.muon.newton_schulz import newton_schulz_tp
from recipes.muon.recipe import MuonTPTrainer

PLANTED_SCALE = 1.0005


def _planted_ns(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    out = newton_schulz_tp(x, *args, **kwargs)
    return out * PLANTED_SCALE if kwargs.get("mode") == "distributed" else out


def build(workload: Any, bucket: Any, device: str) -> MuonTPTrainer:
    optimizer_mod.newton_schulz_tp = _planted_ns  # type: ignore[assignment]
    return MuonTPTrainer(workload, bucket, device)
