"""The profiling section of decisions.md (pure formatting over the run directory's files)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from orchestrator.core.records import TrialKind
from orchestrator.platform.flops import utilization
from orchestrator.core import phases as ph
from orchestrator.analysis.profile.diff import diff_traces
from orchestrator.analysis.profile.trace_stats import FrameworkSummary, PhaseShare
from orchestrator.core.sanitize import VENDOR_REPORT_SUFFIXES
from orchestrator.core.results import Status
from orchestrator.core.trial_record import TrialRecordDict

TOP_CHANGES = 5


def _load(path: Path) -> FrameworkSummary | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def _list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else []


def _text(x: Any) -> str:
    return x if isinstance(x, str) else ""


def _link(text: str, rel: str) -> str:
    return f"[{text}]({quote(rel)})"


def _cell(phase_row: PhaseShare | None) -> str:
    if not phase_row:
        return "—"
    share = phase_row.get("share")
    pct = f" ({share * 100:.0f}%)" if isinstance(share, (int, float)) else ""
    return f"{phase_row['time_s'] * 1e3:.2f}{pct}"


def phase_table(summaries: Sequence[tuple[str, FrameworkSummary | None]],
                timed_s: Sequence[float | None]) -> list[str]:
    """Phase breakdown of each arm side by side (ms per profiled step and share of it), then
    the timed median and the profiler's overhead against it."""
    labels = [label for label, _ in summaries]
    out = ["| phase | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    rows: dict[str, list[PhaseShare | None]] = {}
    order: list[str] = []
    for i, (_, s) in enumerate(summaries):
        table = dict((s or {}).get("phases", {}))
        if s and s.get("trace_step_s"):
            table["step"] = {"time_s": s["trace_step_s"], "share": 1.0}
        for name, r in table.items():
            if name not in rows:
                rows[name] = [None] * len(summaries)
                order.append(name)
            rows[name][i] = r
    for name in order:
        shown = "**step (profiled)**" if name == "step" else name
        out.append(f"| {shown} | " + " | ".join(_cell(c) for c in rows[name]) + " |")
    timed = ["—" if t is None else f"{t * 1e3:.2f}" for t in timed_s]
    out.append("| timed median step | " + " | ".join(timed) + " |")
    over = []
    for (_, s), t in zip(summaries, timed_s):
        prof = (s or {}).get("profiled_step_median_s")
        over.append(f"{prof / t:.2f}x" if prof and t else "—")
    out.append("| profiler overhead (profiled / timed) | " + " | ".join(over) + " |")
    return out


def _changes(run_dir: Path, base: FrameworkSummary, var: FrameworkSummary) -> str:
    d = diff_traces(run_dir / "profiles" / "framework" / base["trace"],
                    run_dir / "profiles" / "framework" / var["trace"], top=TOP_CHANGES)
    parts = [f"`{r['name']}` {r['delta_us'] / 1e3:+.2f} ms"
             + (f" ({r['change']})" if r["change"] != "changed" else "")
             for r in d["ops"]]
    return "; ".join(parts) or "no operator changed"


def _g(x: Any) -> str:
    return f"{x / 1e9:.4g} GFLOP" if isinstance(x, (int, float)) else "—"


def flops_lines(sums: Sequence[tuple[str, FrameworkSummary | None]],
                timed_s: Sequence[float | None], peaks: Sequence[Any]) -> list[str]:
    """Each arm's FLOPs per step by kind, and its **profiler-attributed utilization** (never
    called MFU): profiler FLOPs from the profiled run over the timed median step of the
    non-profiled trials, against each peak of the Utilization section."""
    out: list[str] = []
    for (label, s), t in zip(sums, timed_s):
        f = (s or {}).get("flops") or {}
        useful = (f.get("useful") or {}).get("per_step")
        pa = f.get("profiler_attributed")
        if not isinstance(pa, dict):
            if s:
                out.append(f"- `{label}`: useful (analytic) {_g(useful)}/step; profiler-attributed "
                           f"FLOPs {f.get('profiler_attributed_note', 'not counted')}")
            continue
        per = pa.get("per_step")
        ratio = pa.get("ratio_to_useful")
        cov = pa.get("coverage_time")
        line = (f"- `{label}`: useful (analytic) {_g(useful)}/step; **profiler-attributed** "
                f"{_g(per)}/step" + (f" ({ratio:.3g}x useful)" if ratio else "")
                + (f", ops with a profiler FLOP formula: {cov:.0%} of "
                   f"{pa.get('coverage_time_basis')} op time" if isinstance(cov, (int, float))
                   else ""))
        utils = []
        for pk in peaks:
            if pk.peak_tflops is None or not per or not t:
                continue
            u = utilization(float(per), float(t), float(pk.peak_tflops))
            utils.append(f"{u * 100:.3g}% vs `{pk.label}` ({pk.kind} peak, "
                         f"{pk.peak_tflops:.4g} TFLOP/s {pk.dtype})")
        if utils:
            line += "; profiler-attributed utilization (not MFU): " + ", ".join(utils)
        elif not t:
            line += "; no timed median step to divide by"
        out.append(line)
    if out:
        out[:0] = [("FLOPs per device-step by kind. The profiler-attributed count comes from the "
                    "profiled run, the step time from the timed median of the non-profiled "
                    "trials, the peaks from the Utilization section; it is **not an MFU**: "
                    "the profiler's formulas differ from the useful count (they add "
                    "elementwise add/mul and miss kernels without a formula)."), ""]
    return out


def profile_section(run_dir: Path, mode: str, buckets: Sequence[str], arms: Sequence[Any],
                    records: Sequence[TrialRecordDict],
                    timed_median_s: dict[tuple[str, str], float | None],
                    peaks: Sequence[Any] = (), keep_vendor_reports: bool = False) -> list[str]:
    """Body of the ``Profiles`` section; empty when nothing was profiled. ``peaks`` are the
    Utilization section's (:class:`orchestrator.analysis.utilization.PeakSummary`). Vendor reports
    are named without a link unless ``keep_vendor_reports``: the run directory's seal moves
    them to the private store (orchestrator.core.sanitize)."""
    def artifact(x: str) -> str:
        if not keep_vendor_reports and x.lower().endswith(VENDOR_REPORT_SUFFIXES):
            return f"`{Path(x).name}` (moved to the private store)"
        return _link(Path(x).name, x)

    prof = {(r.get("bucket"), r.get("arm_id")): r for r in records
            if r.get("kind") == TrialKind.PROFILE and r.get("layer") == mode}
    if mode == "off" and not prof:
        return []
    out = [(f"Layer `{mode}`: one profiled trial per arm and bucket, run after the timed trials "
            "in their own processes; none of it enters the timing statistics above.")]
    if mode in ("system", "compute"):
        out.append("")
        out.append(
            "**Vendor reports are kept here unsanitized** (sanitize.keep_vendor_reports=true): "
            "they are binary and may hold host names, user names and command lines; do not share "
            "this run directory." if keep_vendor_reports else
            "Vendor reports (`.nsys-rep`, `.msys-rep`, `.ncu-rep`, `.mcu-rep`) are binary and "
            "cannot be sanitized (they may hold host names and command lines): they are moved "
            "out of this run directory into the private store (`~/.cache/orchestrator/private/"
            "<run id>/vendor_reports/`, or `$ORCHESTRATOR_PRIVATE_DIR`) when the campaign ends; "
            "set `sanitize.keep_vendor_reports=true` to keep them here, for private use only.")
    for bucket in buckets:
        out += ["", f"### Bucket `{bucket}`", ""]
        status = []
        for a in arms:
            r = prof.get((bucket, a.arm_id))
            if r is None:
                status.append(f"- {a.label}: not run")
                continue
            links = " · ".join(artifact(x) for x in _list(r.get("artifacts")))
            err = f": {_text(r.get('error'))}" if _text(r.get("error")) else ""
            status.append(f"- {a.label}: **{r['status']}**{err}" + (f" — {links}" if links else ""))
        out += status
        if mode != "framework":
            continue
        sums = []
        for a in arms:
            r = prof.get((bucket, a.arm_id))
            s = None
            if r and r.get("status") == Status.OK:
                s = _load(run_dir / "profiles" / "framework" / f"{r['trial_id']}.summary.json")
            sums.append((a.label, s))
        if not any(s for _, s in sums):
            continue
        out += ["", ("Phase breakdown, ms per profiled step (share of the step); phases are "
                     f"the recipe's `{ph.PREFIX}*` ranges, `{ph.UNATTRIBUTED}` is the rest of "
                     "the step:"), ""]
        timed = [timed_median_s.get((bucket, a.arm_id)) for a in arms]
        out += phase_table(sums, timed)
        fl = flops_lines(sums, timed, peaks)
        if fl:
            out += ["", *fl]
        base = sums[0][1]
        for a, (label, s) in zip(arms[1:], sums[1:]):
            if base and s:
                out.append("")
                out.append(f"- operator self time, `{label}` vs `{sums[0][0]}` per step: "
                           + _changes(run_dir, base, s))
        for label, s in sums:
            if s and not s.get("phase_check", {}).get("ok", True):
                c = s["phase_check"]
                out.append(f"- {label}: named phases cover {c['covered']:.1%} of the step, "
                           f"outside the {c['tolerance']:.0%} tolerance")
    return out
