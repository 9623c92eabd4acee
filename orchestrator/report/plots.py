"""Plots of one campaign (matplotlib, Agg backend: no display needed). Each function writes
one PNG and returns its path, or None when the data for it does not exist."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.core.records import Decision

COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _arm_order(steps: pd.DataFrame, arms: Sequence[Mapping[str, Any]]) -> list[str]:
    labels = [a["label"] for a in arms]
    present = list(dict.fromkeys(steps["arm_label"])) if not steps.empty else []
    return [a for a in labels if a in present] + [a for a in present if a not in labels]


def clip_limit(data: Sequence[Any]) -> tuple[float, int]:
    """(limit, how many values lie above it): 1.5 x the 99th percentile of all values, so a
    violin shows the bulk of the steps when one stall is many times longer."""
    allv = np.concatenate([np.asarray(d, dtype=float) for d in data]) if data else np.array([])
    if allv.size == 0:
        return math.inf, 0
    lim = 1.5 * float(np.percentile(allv, 99))
    return lim, int((allv > lim).sum())


def step_distributions(steps: pd.DataFrame, arms: Sequence[Mapping[str, Any]],
                       out: Path) -> Path | None:
    measured = steps[steps["phase"] == "measured"] if not steps.empty else steps
    if measured.empty:
        return None
    plt = _plt()
    buckets = list(dict.fromkeys(measured["bucket"]))
    order = _arm_order(measured, arms)
    fig, axes = plt.subplots(1, len(buckets), figsize=(4.2 * len(buckets), 3.6), squeeze=False)
    for ax, bucket in zip(axes[0], buckets):
        sel = measured[measured["bucket"] == bucket]
        data = [sel[sel["arm_label"] == a]["step_time_s"].to_numpy() * 1e3 for a in order]
        keep = [(a, d) for a, d in zip(order, data) if len(d)]
        # the bulk of the steps, not one stall: clip at 1.5 x the 99th percentile of all arms
        lim, clipped = clip_limit([d for _, d in keep])
        parts = ax.violinplot([np.minimum(d, lim) for _, d in keep], showmedians=True)
        for i, body in enumerate(parts["bodies"]):
            body.set_facecolor(COLORS[i % len(COLORS)])
            body.set_alpha(0.6)
        ax.set_xticks(range(1, len(keep) + 1), [a for a, _ in keep], rotation=30, ha="right")
        ax.set_title(f"bucket {bucket}" + (f"\n{clipped} step(s) above {lim:.3g} ms drawn at it"
                                           if clipped else ""), fontsize=9 if clipped else None)
        ax.set_ylabel("step time (ms)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Measured step times per arm (warm-up excluded)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _floors(noise_floor: float | Mapping[str, Any] | None) -> tuple[float | None, dict[str, float]]:
    """(one floor for every row, per-scope floors): a scalar (older decisions.jsonl) or a
    mapping {bucket or "mixture": floor}."""
    if noise_floor is None:
        return None, {}
    if isinstance(noise_floor, Mapping):
        return None, {str(k): float(v) for k, v in noise_floor.items() if v is not None}
    return float(noise_floor), {}


def forest_guides(threshold: float | None, ni_margin: float | None
                  ) -> list[tuple[float, str, str, str]]:
    """The rule's lines on the speedup forest, (x, legend label, colour, line style): the
    equivalence band [1 / (1 + min_effect), 1 + min_effect] (every interval inside it:
    equivalent) and the non-inferiority margin 1 - ni_margin (a bucket whose interval lies
    below it: reject; a retain needs every bucket's above it)."""
    out = []
    if threshold and threshold > 1:
        out += [(threshold, (f"equivalence band ±{threshold - 1:.0%} "
                             f"[{1 / threshold:.3f}, {threshold:.3f}]"), "#4c72b0", "--"),
                (1 / threshold, "_nolegend_", "#4c72b0", "--")]
    if ni_margin:
        out.append((1 - ni_margin, (f"non-inferiority margin {1 - ni_margin:.3f} (a bucket "
                                    "below it: reject)"), "#c44e52", ":"))
    return out


def forest(
    decisions: Sequence[Decision], buckets: Sequence[str], out: Path,
    *, threshold: float | None = None, noise_floor: float | Mapping[str, Any] | None = None,
    aa: Mapping[str, Any] | None = None, ni_margin: float | None = None,
) -> Path | None:
    """Speedup intervals per variant and scope (bucket, mixture), with the rule's guides
    (:func:`forest_guides`: the equivalence band from ``threshold`` = 1 + min_effect, the
    non-inferiority margin 1 - ``ni_margin``). ``noise_floor``: the A/A
    noise floor, one value or per scope; drawn as a grey band 1 ± floor behind each row of its
    scope. ``aa``: {scope: {"speedup", "low", "high"}}, the A/A control's intervals, drawn as
    rows of their own."""
    rows = []
    for scope in [*buckets, "mixture"]:
        e = (aa or {}).get(scope)
        if e:
            rows.append((f"A/A control · {scope}", scope, e["speedup"], e["low"], e["high"],
                         "aa"))
    for d in decisions:
        for scope in [*buckets, "mixture"]:
            e = (d.get("speedups") or {}).get(scope)
            if e:
                rows.append((f"{d.label} · {scope}", scope, e["speedup"], e["low"],
                             e["high"], d.verdict.value))
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.4))
    ys = list(range(len(rows)))[::-1]
    verdict_color = {"retain": "#55a868", "reject": "#c44e52", "equivalent": "#4c72b0",
                     "inconclusive": "#8c8c8c",
                     "invalid": "#937860", "aa": "#555555"}
    everywhere, per_scope = _floors(noise_floor)
    if everywhere:
        ax.axvspan(1 - everywhere, 1 + everywhere, color="#dddddd", alpha=0.7,
                   label=f"A/A noise floor ±{everywhere:.1%}")
    labelled = False
    for y, (_, scope, *_rest) in zip(ys, rows):
        f = per_scope.get(scope)
        if f:
            ax.fill_betweenx([y - 0.45, y + 0.45], 1 - f, 1 + f, color="#cccccc", alpha=0.8,
                             lw=0, label=None if labelled else "A/A noise floor (1 ± floor)")
            labelled = True
    ax.axvline(1.0, color="black", lw=1)
    for x, label, color, style in forest_guides(threshold, ni_margin):
        ax.axvline(x, color=color, lw=1, ls=style, label=label)
    for y, (name, scope, sp, lo, hi, verdict) in zip(ys, rows):
        c = verdict_color.get(verdict, "#4c72b0")
        ax.plot([lo, hi], [y, y], color=c, lw=2)
        ax.plot([sp], [y], "o" if verdict != "aa" else "s", color=c)
    ax.set_yticks(ys, [r[0] for r in rows])
    ax.set_xlabel("speedup (baseline time / variant time), with interval")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def execution_order(steps: pd.DataFrame) -> pd.DataFrame:
    """Steps in the order they ran: processes by their place in the plan, then step number
    within each. Arms paired by steps share one process (``paired_process``), so their blocks
    interleave as they alternated, rather than one arm's steps after the other's."""
    df = steps.copy()
    if "paired_process" in df:
        proc = df["paired_process"].where(df["paired_process"].notna(), df["trial_id"])
    else:
        proc = df["trial_id"] if "trial_id" in df else df["position"]
    df["_process_at"] = df.groupby(proc)["position"].transform("min")
    return (df.sort_values(["_process_at", "step"], kind="stable")
            .drop(columns="_process_at").reset_index(drop=True))


def timeline(steps: pd.DataFrame, arms: Sequence[Mapping[str, Any]], out: Path) -> Path | None:
    if steps.empty:
        return None
    plt = _plt()
    df = execution_order(steps)
    order = _arm_order(df, arms)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for i, arm in enumerate(order):
        sel = df[df["arm_label"] == arm]
        for phase, marker, alpha in (("warmup", "x", 0.5), ("measured", "o", 0.8)):
            s = sel[sel["phase"] == phase]
            ax.scatter(s.index, s["step_time_s"] * 1e3, s=10, marker=marker, alpha=alpha,
                       color=COLORS[i % len(COLORS)], label=arm if phase == "measured" else None)
    ax.set_yscale("log")
    paired = "paired_process" in df and df["paired_process"].notna().any()
    ax.set_xlabel("step, in execution order across trials (x = warm-up, excluded)"
                  + ("\narms sharing a process drawn block by block, as they alternated"
                     if paired else ""))
    ax.set_ylabel("step time (ms)")
    ax.set_title("Step time over the run: warm-up and drift")
    ax.legend(fontsize=8, ncol=min(4, len(order)))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def memory_title(results: pd.DataFrame) -> str:
    """What the bars mean, from the records' ``peak_mem_source``: one process ran every arm
    (pairing by steps) and its peak could not be reset per arm (the CPU's peak RSS), or it
    was read per arm, or each trial was its own process."""
    sources = ({str(x) for x in results["peak_mem_source"].dropna()}
               if "peak_mem_source" in results else set())
    if any("all arms" in x for x in sources):
        return ("Peak memory: one process ran every arm, so each bar is that process's peak\n"
                "(shared by the arms, not per arm: " + min(sources) + ")")
    if any("this arm's blocks" in x for x in sources):
        return "Peak memory per arm (reset and read per arm in the process they shared)"
    return "Peak memory per arm" + (f" ({min(sources)})" if len(sources) == 1 else "")


def memory_figure(results: pd.DataFrame) -> Any:
    """The peak-memory bar chart (figure, axes), its legend outside the bars; None without
    figures."""
    if results.empty or "peak_mem_bytes" not in results or results["peak_mem_bytes"].isna().all():
        return None
    plt = _plt()
    piv = results.pivot_table(index="arm_label", columns="bucket", values="peak_mem_bytes",
                              sort=False) / 2**20
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    piv.plot.bar(ax=ax, rot=30, color=COLORS[: len(piv.columns)])
    ax.set_ylabel("peak memory (MiB)")
    ax.set_xlabel("")
    ax.set_title(memory_title(results), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    # right of the axes, where no bar is (inside, "best" may still cover one)
    ax.legend(title="bucket", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0)
    fig.tight_layout()
    return fig, ax


def memory(results: pd.DataFrame, out: Path) -> Path | None:
    made = memory_figure(results)
    if made is None:
        return None
    fig, _ = made
    fig.savefig(out, dpi=110)
    _plt().close(fig)
    return out


def load_phases(run_dir: Path) -> dict[str, dict[str, float]]:
    """{profile name: {phase: seconds}} from framework-profile summaries that carry phases."""
    out: dict[str, dict[str, float]] = {}
    for path in sorted(run_dir.glob("profiles/framework/**/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        phases = data.get("phases") if isinstance(data, dict) else None
        if isinstance(phases, dict) and phases:
            vals = {}
            for k, v in phases.items():
                if isinstance(v, dict):
                    v = v.get("time_s", v.get("seconds", v.get("mean_s")))
                if isinstance(v, (int, float)):
                    vals[str(k)] = float(v)
            if vals:
                out[str(data.get("arm_label") or path.stem)] = vals
    return out


def phase_breakdown(run_dir: Path, out: Path) -> Path | None:
    phases = load_phases(run_dir)
    if not phases:
        return None
    plt = _plt()
    df = pd.DataFrame(phases).T.fillna(0.0) * 1e3
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(df) + 1.6))
    df.plot.barh(stacked=True, ax=ax, color=COLORS[: len(df.columns)])
    ax.set_xlabel("time per step (ms)")
    ax.set_title("Phase breakdown (profiled trials)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def lineage(doc: Mapping[str, Any], out: Path) -> Path | None:
    """The baseline lineage (lineage.json): each version's measured speedup over its parent
    with its interval, and the cumulative speedup against v0 measured end to end (``verify``)
    at the last version; None when no version after v0 has a measurement."""
    versions = list(doc.get("versions") or [])
    steps = [(i, v["step_speedup"]) for i, v in enumerate(versions) if v.get("step_speedup")]
    cum = (doc.get("cumulative") or {}).get("speedup")
    # verified cumulative speedups of earlier versions (a verify run while they were latest)
    earlier = [(i, v["cumulative"]) for i, v in enumerate(versions[:-1]) if v.get("cumulative")]
    if cum:
        earlier.append((len(versions) - 1, cum))
    if not steps and not earlier:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.5 * len(versions) + 2), 3.6))
    ax.axhline(1.0, color="black", lw=1)
    for n, (i, e) in enumerate(steps):
        ax.errorbar([i - 0.08], [e["speedup"]], yerr=[[e["speedup"] - e["low"]],
                    [e["high"] - e["speedup"]]], fmt="o", color=COLORS[0], capsize=4,
                    label="step: speedup over its parent" if n == 0 else None)
    for n, (i, e) in enumerate(earlier):
        ax.errorbar([i + 0.08], [e["speedup"]], yerr=[[e["speedup"] - e["low"]],
                    [e["high"] - e["speedup"]]], fmt="s", color=COLORS[2], capsize=4,
                    label="cumulative against v0 (measured by verify)" if n == 0 else None)
    names = [v["version"] + (f"\n+{v['change']['label']}" if v.get("change") else "")
             for v in versions]
    ax.set_xticks(range(len(versions)), names)
    ax.set_xlim(-0.5, len(versions) - 0.5)
    ax.set_yscale("log")  # speedups compose by multiplication: equal ratios, equal heights
    ax.set_ylabel("speedup, with interval (log scale)")
    ax.set_title(f"Baseline lineage of {doc.get('workload')}: "
                 + " -> ".join(v["version"] for v in versions))
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
