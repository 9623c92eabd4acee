"""The common levers' decisions.md sections (pure; their config checks are in
:mod:`orchestrator.campaign.validate`, the external-loss gate in :mod:`orchestrator.analysis.loss_gate`).

- torch.compile: compile time, graph breaks and recompiles per arm, and a time-to-train
  projection (one-off warm-up cost + N x steady step time) next to the steady-state ratio, so a
  win that needs many steps to pay for its compile is visible;
- dataloader: the input-bound share per arm (time blocked waiting for the batch / step time).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from orchestrator.core.section import Section
from orchestrator.spec.config import Config
from orchestrator.core.results import ok_timed

if TYPE_CHECKING:  # pandas is imported where reports are made
    import pandas as pd

# --------------------------------------------------------------------------- report sections


_ok = ok_timed


def _med(rows: pd.DataFrame, col: str) -> float | None:
    import pandas as pd

    if col not in rows:
        return None
    vals = pd.to_numeric(rows[col], errors="coerce").dropna()
    return float(vals.median()) if len(vals) else None


def _max(rows: pd.DataFrame, col: str) -> int | None:
    import pandas as pd

    if col not in rows:
        return None
    vals = pd.to_numeric(rows[col], errors="coerce").dropna()
    return int(vals.max()) if len(vals) else None


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "—"
    if x >= 3600:
        return f"{x / 3600:.2f} h"
    if x >= 60:
        return f"{x / 60:.1f} min"
    return f"{x:.2f} s"


def projected_time_s(one_off_s: float, step_s: float, steps: int) -> float:
    """Time to train ``steps`` steps: one-off warm-up cost (compile, autotune) + steps x step."""
    return max(one_off_s, 0.0) + steps * step_s


def break_even_steps(base_one_off_s: float, base_step_s: float, var_one_off_s: float,
                     var_step_s: float) -> float | None:
    """Steps after which the variant's total time drops below the baseline's; 0 = from the start,
    None = never (slower per step and not cheaper up front)."""
    extra = max(var_one_off_s, 0.0) - max(base_one_off_s, 0.0)
    saved = base_step_s - var_step_s
    if saved <= 0:
        return 0.0 if extra < 0 and saved == 0 else None
    return max(0.0, extra / saved)


def _touches(cfg: Config, fragment: str) -> bool:
    sweep = cfg.sweep
    if sweep is None:
        return False
    paths = list((sweep.knob or {}).values()) or [sweep.variable]
    return any(fragment in p for p in paths)


_CACHE_WHAT = {
    "cold": "cold: every trial compiled with a fresh, empty inductor/Triton cache, so `compile "
            "time` is what a first run on a machine pays",
    "warm": "warm: trials used this machine's own inductor/Triton caches, so `compile time` is "
            "what a rerun pays and depends on what compiled here before",
    "arm": "per arm: each arm compiled into a cache folder of its own, kept across its trials "
           "(and, in the user's compile store, across campaigns that run the same arm: "
           "`protocol.arm_cache_store`) and shared with no other arm, so a trial that found its "
           "arm's folder empty paid a first run's compile and the others a rerun's",
}


def _cache_line(cfg: Config, ok: pd.DataFrame) -> str:
    """Which compile caches the compile times were measured with, and how often they hit."""
    modes = (sorted({str(m) for m in ok["compile_cache"].dropna()})
             if "compile_cache" in ok else [])
    mode = modes[0] if len(modes) == 1 else str(cfg.protocol.compile_cache)
    what = _CACHE_WHAT.get(mode, mode)
    if str(cfg.protocol.compile_cache) == "auto" and mode in _CACHE_WHAT:
        what += (" (auto: cold for a sweep over compile settings, per arm otherwise)")
    if mode == "arm" and "compile_cache_fill" in ok:
        fills = int((ok["compile_cache_fill"] == "fills").sum())
        what += (f"; {fills} trial(s) found their arm's cache empty and filled it, "
                 f"{int((ok['compile_cache_fill'] == 'reuses').sum())} reused it")
    hits = _sum(ok, "compile_cache_hits")
    misses = _sum(ok, "compile_cache_misses")
    tail = ""
    if hits is not None or misses is not None:
        tail = (f"; FX-graph/AOTAutograd cache lookups over the trials: {hits or 0} hit(s), "
                f"{misses or 0} miss(es)")
    return f"Compile cache (`protocol.compile_cache`): {what}{tail}."


def _sum(rows: pd.DataFrame, col: str) -> int | None:
    import pandas as pd

    if rows.empty or col not in rows:
        return None
    vals = pd.to_numeric(rows[col], errors="coerce").dropna()
    return int(vals.sum()) if len(vals) else None


def compile_section(cfg: Config, trials: pd.DataFrame, analysis: Any) -> list[str]:
    import pandas as pd

    ok = _ok(trials)
    steps_n = list(cfg.protocol.projection_steps)
    lines = [
        ("`compile time` = torch's own total (frame + backward compile: dynamo, AOTAutograd, "
        "inductor codegen and autotuning), spent in the warm-up steps and excluded from the "
        "step times above; `one-off` = warm-up time above steady state (compile plus any other "
        "first-step cost), which the projection adds to N x the median step time. Medians over "
        "trials; graph breaks and recompiles are the most seen in one trial."),
        "",
        _cache_line(cfg, ok),
        "",
        "| bucket | arm | compile time | one-off | graph breaks | recompiles (in measured) "
        "| steady speedup | " + " | ".join(f"time for {n:,} steps (ratio)" for n in steps_n)
        + " | break-even |",
        "|---|---|---:|---:|---:|---:|---|" + "---|" * len(steps_n) + "---:|",
    ]
    base = analysis.arms[0]
    notes: list[str] = []
    for bucket in analysis.buckets:
        brow = ok[(ok["bucket"] == bucket) & (ok["arm_id"] == base.arm_id)] if not ok.empty else ok
        b_step = analysis.summaries[(bucket, base.arm_id)].step_time_median_s
        b_one = _med(brow, "warmup_excess_s") or 0.0
        for arm in analysis.arms:
            rows = ok[(ok["bucket"] == bucket) & (ok["arm_id"] == arm.arm_id)] if not ok.empty else ok
            s = analysis.summaries[(bucket, arm.arm_id)]
            if s.step_time_median_s is None:
                lines.append(f"| {bucket} | {arm.label} | — | — | — | — | no ok trial |"
                             + " — |" * len(steps_n) + " — |")
                continue
            one = _med(rows, "warmup_excess_s") or 0.0
            c = analysis.comparisons.get((bucket, arm.arm_id))
            sp = "baseline" if arm.is_baseline else (
                f"{c.estimate.speedup:.3f}x" if c and c.estimate else "—")
            cells = []
            for n in steps_n:
                t = projected_time_s(one, s.step_time_median_s, n)
                if arm.is_baseline or b_step is None:
                    cells.append(_fmt_s(t))
                else:
                    cells.append(f"{_fmt_s(t)} ({projected_time_s(b_one, b_step, n) / t:.3f}x)")
            if arm.is_baseline or b_step is None:
                be = "—"
            else:
                n_be = break_even_steps(b_one, b_step, one, s.step_time_median_s)
                be = "never" if n_be is None else f"{math.ceil(n_be):,} steps"
            rec, rec_m = _max(rows, "recompiles"), _max(rows, "recompiles_in_measured")
            lines.append(
                f"| {bucket} | {arm.label} | {_fmt_s(_med(rows, 'compile_time_s'))} | {_fmt_s(one)} "
                f"| {_max(rows, 'graph_breaks') if _max(rows, 'graph_breaks') is not None else '—'} "
                f"| {rec if rec is not None else '—'} ({rec_m if rec_m is not None else '—'}) "
                f"| {sp} | {' | '.join(cells)} | {be} |"
            )
            if rec_m:
                notes.append(f"- `{arm.label}` recompiled after its warm-up in `{bucket}` (a "
                             "shape or guard the warm-up never saw): those steps are tagged "
                             "`compile` and left out of the step times; their cost is in the "
                             "one-off")
            visited = next((v for v in rows.get("compile_buckets_visited", pd.Series(dtype=object))
                            if isinstance(v, list) and v), None)
            if visited:
                notes.append(f"- `{arm.label}` in `{bucket}` also ran one step on "
                             f"{', '.join(f'`{b}`' for b in visited)} in its first (excluded) "
                             "step (workload.model.compile.visit_buckets): its recompiles and "
                             "compile time include those shapes")
            reasons = sorted({r for v in rows.get("graph_break_reasons", pd.Series(dtype=object))
                              if isinstance(v, list) for r in v})
            for r in reasons[:3]:
                notes.append(f"- graph break in `{arm.label}`: {r}")
    return lines + ([""] + sorted(set(notes)) if notes else [])


def input_section(trials: pd.DataFrame, steps: pd.DataFrame, analysis: Any) -> list[str]:
    """Input-bound share per arm: measured time blocked on ``next(batches)`` / step time."""
    import pandas as pd

    ok = _ok(trials)
    lines = [
        ("Input-bound share = time the training loop waited for the next batch (DataLoader "
        "fetch + host-to-device copy) / step time, over measured steps; median over trials."),
        "",
        "| bucket | arm | input-bound share | data wait per step (ms) | median step (ms) |",
        "|---|---|---:|---:|---:|",
    ]
    for bucket in analysis.buckets:
        for arm in analysis.arms:
            rows = ok[(ok["bucket"] == bucket) & (ok["arm_id"] == arm.arm_id)] if not ok.empty else ok
            share = _med(rows, "data_wait_share")
            wait = None
            if not steps.empty and "data_wait_s" in steps and len(rows):
                sel = steps[steps["trial_id"].isin(rows["trial_id"]) & (steps["phase"] == "measured")]
                w = pd.to_numeric(sel["data_wait_s"], errors="coerce").dropna()
                wait = float(w.median()) if len(w) else None
            med = analysis.summaries[(bucket, arm.arm_id)].step_time_median_s
            lines.append(
                f"| {bucket} | {arm.label} | {'—' if share is None else f'{share:.1%}'} "
                f"| {'—' if wait is None else f'{wait * 1e3:.2f}'} "
                f"| {'—' if med is None else f'{med * 1e3:.2f}'} |"
            )
    return lines


def lever_sections(cfg: Config, trials: pd.DataFrame, steps: pd.DataFrame,
                   analysis: Any) -> list[Section]:
    import pandas as pd

    out: list[Section] = []
    compiled = "compile_time_s" in trials and bool(
        (pd.to_numeric(trials["compile_time_s"], errors="coerce").fillna(0) > 0).any())
    if compiled or _touches(cfg, ".compile."):
        out.append(Section("Compile cost and time to train", compile_section(cfg, trials, analysis)))
    text = cfg.workload.reads_text()
    if text or _touches(cfg, "workload.loader.") or _touches(cfg, "workload.data."):
        out.append(Section("Input pipeline", input_section(trials, steps, analysis)))
    return out
