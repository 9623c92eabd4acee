"""The external-loss gate (pure): for ``command`` workloads, each variant's logged loss
trajectory against the baseline's, round by round and bucket by bucket.

An external trainer has no model in the orchestrator's process for the correctness probes to
compare, so its numerics are judged on what it logs (``workload.loss_rtol``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.spec.config import Config
from orchestrator.analysis.decide import Gate
from orchestrator.core.results import ok_timed

if TYPE_CHECKING:  # pandas is imported where a campaign is analysed
    import pandas as pd


_ok = ok_timed


def _logged_losses(trial: Any, loss: Any) -> dict[int, float]:
    """step -> logged loss of one trial, non-finite ones included. steps.csv cannot tell a
    logged ``nan`` from a step without a loss, so the trial's ``nonfinite_loss_steps`` does."""
    out: dict[int, float] = {}
    try:
        rows = loss.loc[trial["trial_id"]]
    except KeyError:
        rows = None
    if rows is not None:
        out = {int(s): float(v) for s, v in rows.items()}
    nonfinite = trial.get("nonfinite_loss_steps")
    if isinstance(nonfinite, list):
        for s in map(int, nonfinite):
            if s not in out or math.isfinite(out[s]):
                out[s] = math.nan
    return out


def work_gates(trials: pd.DataFrame, arms: Sequence[Any]) -> dict[str, Gate]:
    """A variant whose trials did other work per step than the baseline's in the same bucket
    (tokens per step from the log, or workload.tokens_per_step) cannot be compared on speed:
    a gate that cannot be evaluated (the verdict is invalid), naming both figures."""
    ok = _ok(trials)
    if ok.empty or "tokens_per_step" not in ok:
        return {}
    base, out = arms[0], {}  # type: tuple[Any, dict[str, Gate]]
    for arm in arms[1:]:
        for bucket in sorted({str(b) for b in ok["bucket"]}):
            sel = ok[ok["bucket"] == bucket]
            mine, theirs = (sorted({int(t) for t in sel[sel["arm_id"] == a.arm_id]
                                    ["tokens_per_step"].dropna()}) for a in (base, arm))
            if mine and theirs and mine != theirs:
                src = sorted({str(x) for x in sel.get("tokens_source", []) if isinstance(x, str)})
                out[arm.arm_id] = Gate(
                    "work per step", "error",
                    f"at {bucket} the variant's steps did {'/'.join(map(str, theirs))} tokens, "
                    f"the baseline's {'/'.join(map(str, mine))} (tokens per step from "
                    f"{', '.join(src) or 'the trials'}): a throughput comparison needs the same "
                    "work per step; keep what sets it (batch or sequence size) fixed")
                break
    return out


@dataclass
class _Tally:
    """One variant's logged losses against the baseline's, over every round and bucket."""

    worst: float = 0.0
    worst_at: str = ""
    compared: int = 0
    nonfinite: list[str] = field(default_factory=list)
    silent: list[str] = field(default_factory=list)


def _loss_series(steps: pd.DataFrame) -> pd.Series:
    """(trial_id, step) -> logged loss, the rows without a loss left out."""
    if not steps.empty and "loss" in steps:
        return steps.dropna(subset=["loss"]).set_index(["trial_id", "step"])["loss"]
    import pandas as pd  # start-up cost: pandas only where a campaign is analysed

    return pd.Series(dtype=float, index=pd.MultiIndex.from_tuples([], names=["trial_id", "step"]))


def _nonfinite_steps(lb: dict[int, float], lv: dict[int, float], where: str) -> list[str]:
    """The variant's non-finite losses at steps where the baseline's is finite, or where the
    baseline logs none and only finite ones elsewhere."""
    out: list[str] = []
    base_finite = all(math.isfinite(x) for x in lb.values())
    for step in sorted(lv):
        v, b = lv[step], lb.get(step)
        if math.isfinite(v):
            continue
        shown = f"loss {'nan' if math.isnan(v) else f'{v:g}'} at {where} step {step}"
        if b is not None and math.isfinite(b):
            out.append(f"{shown} where the baseline's is {b:.6g}")
        elif b is None and base_finite:
            out.append(f"{shown} (the baseline logs no loss at that step, and "
                       "only finite ones elsewhere)")
    return out


def _tally(ok: pd.DataFrame, logged: dict[Any, dict[int, float]], base_id: str,
           arm_id: str) -> _Tally:
    """Each of the variant's trials against the baseline's trial of its round and bucket."""
    t = _Tally()
    for _, brow in ok[ok["arm_id"] == base_id].iterrows():
        vrows = ok[(ok["arm_id"] == arm_id) & (ok["bucket"] == brow["bucket"])
                   & (ok["round"] == brow["round"])]
        lb = logged[brow["trial_id"]]
        where = f"{brow['bucket']} round {brow['round']}"
        for _, vrow in vrows.iterrows():
            lv = logged[vrow["trial_id"]]
            if not lb:
                continue
            if not lv:
                t.silent.append(where)
                continue
            t.nonfinite += _nonfinite_steps(lb, lv, where)
            for step in sorted(set(lb) & set(lv)):
                b, v = lb[step], lv[step]
                if not (math.isfinite(b) and math.isfinite(v)):
                    continue
                rel = abs(v - b) / max(abs(b), 1e-12)
                t.compared += 1
                if rel > t.worst:
                    t.worst, t.worst_at = rel, f"{where} step {step}"
    return t


def _trajectory_gate(t: _Tally, loss_rtol: float) -> Gate | None:
    """The loss trajectory gate of one variant; None when no logged losses could be compared."""
    if t.nonfinite:
        n = len(t.nonfinite)
        more = f" (and {n - 1} more non-finite step(s))" if n > 1 else ""
        return Gate("loss trajectory", "fail", f"non-finite {t.nonfinite[0]}{more}")
    if t.silent:
        return Gate("loss trajectory", "error",
                    f"the baseline logs losses but the variant logs none "
                    f"({', '.join(sorted(set(t.silent))[:3])}); make the variant "
                    "print its loss, or set a workload.log.pattern with a "
                    "(?P<loss>...) group")
    if t.compared == 0:
        return None  # no logged losses to compare: no gate rather than a guess
    detail = f"largest relative loss difference {t.worst:.2e} over {t.compared} logged steps"
    if t.worst > loss_rtol:
        return Gate("loss trajectory", "fail",
                    f"{detail} (at {t.worst_at}) exceeds workload.loss_rtol={loss_rtol:g}")
    return Gate("loss trajectory", "pass", f"{detail} <= {loss_rtol:g}")


def loss_trajectory_gates(cfg: Config, trials: pd.DataFrame, steps: pd.DataFrame,
                          arms: Sequence[Any]) -> dict[str, list[Any]]:
    """Correctness for external commands: per round and bucket, each variant's logged loss at
    every step both logs share must lie within ``workload.loss_rtol`` of the baseline's.

    Fails when the variant logs a non-finite loss (nan/inf) at a step where the baseline's is
    finite (naming the first such step); cannot be evaluated (``error``) when the baseline logs
    losses and the variant logs none; no gate when neither logs a loss."""
    w = cfg.workload
    if not w.runs_own_process():
        return {}
    ok = _ok(trials)
    if ok.empty:
        return {}
    # the arms' work per step first
    out: dict[str, list[Any]] = {a: [g] for a, g in work_gates(ok, arms).items()}
    loss = _loss_series(steps)
    logged = {r["trial_id"]: _logged_losses(r, loss) for _, r in ok.iterrows()}
    base = arms[0]
    for arm in arms[1:]:
        gate = _trajectory_gate(_tally(ok, logged, base.arm_id, arm.arm_id), w.loss_rtol)
        if gate is not None:
            out[arm.arm_id] = [*out.get(arm.arm_id, []), gate]
    return out
