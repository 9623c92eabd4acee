"""The cross-campaign decision log (pure): one row per hypothesis and variant.

The latest decision per variable comes first; a decision on the same workload, variable and
value that a later campaign decided again is kept and marked ``superseded`` (a later
``invalid`` campaign supersedes no verdict: it said nothing about the variant).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.core.records import Decision, VerdictKind
from orchestrator.report.load import Campaign


@dataclass
class LogRow:
    decided_at: float
    date: str
    workload: str
    sweep: str
    variable: str
    baseline: str
    values: str
    buckets: str
    variant: str
    verdict: str
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    speedup_scope: str  # mixture, the single bucket, or "" when no interval exists
    correctness: str  # pass | fail | error | not run
    source_commit: str
    run_dir: str
    reasons: str
    superseded: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _correctness(decision: Decision, campaign: Campaign) -> str:
    for reason in decision.reasons:
        if reason.startswith("correctness gate failed"):
            return "fail"
        if reason.startswith("correctness gate could not"):
            return "error"
        if reason.startswith("correctness gate passed"):
            return "pass"
    return "not run" if campaign.correctness is None else "see correctness.json"


def _headline(decision: Decision, buckets: Sequence[str]) -> tuple[Any, Any, Any, str]:
    speedups = decision.get("speedups") or {}
    scope = "mixture" if "mixture" in speedups else (buckets[0] if len(buckets) == 1 else "")
    e = speedups.get(scope) if scope else None
    if not e:
        return None, None, None, ""
    return e["speedup"], e["low"], e["high"], scope


def campaign_rows(campaign: Campaign, base: Path | None = None) -> list[LogRow]:
    arms = campaign.plan.arms
    baseline = next((a["label"] for a in arms if a.get("is_baseline")), "?")
    values = ", ".join(a["label"] for a in arms if not a.get("is_baseline"))
    buckets = [b["name"] for b in campaign.plan.buckets]
    run_dir = campaign.run_dir
    shown = os.path.relpath(run_dir, base) if base else str(run_dir)
    rows = []
    for d in campaign.decisions:
        sp, lo, hi, scope = _headline(d, buckets)
        when = d.decided_at
        rows.append(
            LogRow(
                decided_at=when,
                date=dt.datetime.fromtimestamp(when, dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                workload=str(d.get("workload", campaign.workload)),
                sweep=str(d.get("sweep", campaign.sweep.get("name", "?"))),
                variable=str(d.get("variable", campaign.sweep.get("variable", "?"))),
                baseline=baseline,
                values=values,
                buckets=", ".join(buckets),
                variant=d.label or d.arm_id,
                verdict=d.verdict.value,
                speedup=sp,
                speedup_low=lo,
                speedup_high=hi,
                speedup_scope=scope,
                correctness=_correctness(d, campaign),
                source_commit=campaign.source.get("commit", "unknown")[:12],
                run_dir=shown,
                reasons="; ".join(d.reasons),
            )
        )
    return rows


def _day(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=dt.timezone.utc).timestamp()


def mark_superseded(rows: Sequence[LogRow]) -> None:
    """A decision is superseded by a later one on the same workload, variable and variant,
    except that an ``invalid`` one (the campaign said nothing about the variant: trials
    failed, a gate could not run) supersedes only earlier invalid ones, never a verdict."""
    latest: dict[tuple[str, str, str], float] = {}  # the latest verdict that says something
    latest_any: dict[tuple[str, str, str], float] = {}
    for r in rows:
        key = (r.workload, r.variable, r.variant)
        latest_any[key] = max(latest_any.get(key, 0.0), r.decided_at)
        if r.verdict != VerdictKind.INVALID:
            latest[key] = max(latest.get(key, 0.0), r.decided_at)
    for r in rows:
        key = (r.workload, r.variable, r.variant)
        later = latest_any[key] if r.verdict == VerdictKind.INVALID else latest.get(key, 0.0)
        r.superseded = r.decided_at < later


def build_log(
    campaigns: Iterable[Campaign],
    *,
    base: Path | None = None,
    workload: str | None = None,
    variable: str | None = None,
    verdict: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> list[LogRow]:
    """Rows filtered and ordered; ``since``/``until`` are YYYY-MM-DD (UTC), until inclusive."""
    rows = [r for c in campaigns for r in campaign_rows(c, base)]
    mark_superseded(rows)
    lo, hi = _day(since), _day(until)
    keep = [
        r for r in rows
        if (workload is None or r.workload == workload)
        and (variable is None or r.variable == variable or r.sweep == variable)
        and (verdict is None or r.verdict == verdict)
        and (lo is None or r.decided_at >= lo)
        and (hi is None or r.decided_at < hi + 86400)
    ]
    group_latest: dict[tuple[str, str], float] = {}
    for r in keep:
        g = (r.workload, r.variable)
        group_latest[g] = max(group_latest.get(g, 0.0), r.decided_at)
    keep.sort(key=lambda r: (-group_latest[(r.workload, r.variable)], r.workload, r.variable,
                             r.superseded, -r.decided_at, r.variant))
    return keep


def _ratio(r: LogRow) -> str:
    if r.speedup is None:
        return "—"
    return f"{r.speedup:.3f}x [{r.speedup_low:.3f}, {r.speedup_high:.3f}] ({r.speedup_scope})"


def render_log(rows: Sequence[LogRow], title: str = "Decision log") -> str:
    out = [
        f"# {title}",
        "",
        f"{len(rows)} decision(s); latest decision per variable first; superseded decisions "
        "are kept and marked. Speedup = baseline step time / variant step time.",
        "",
        "| date (UTC) | workload | variable | baseline → variant | buckets | verdict | speedup [CI] "
        "| correctness | commit | run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = f"~~{r.verdict}~~ (superseded)" if r.superseded else f"**{r.verdict}**"
        out.append(
            f"| {r.date} | {r.workload} | `{r.variable}` | {r.baseline} → {r.variant} | {r.buckets} "
            f"| {verdict} | {_ratio(r)} | {r.correctness} | {r.source_commit} "
            f"| [{r.run_dir}]({r.run_dir}/summary.md) |"
        )
    return "\n".join(out) + "\n"
