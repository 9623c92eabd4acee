"""From a profile of the baseline to a ranked list of sweeps (pure: dicts in, dataclasses and
lines out; no torch, no pandas, no files).

Each sweep declares the evidence it addresses (``sweep.evidence``, names in
:data:`orchestrator.spec.config.EVIDENCE_KINDS`). The evidence is a share ``f`` of the profiled
step per bucket; a lever that removed that time entirely would make the bucket ``1 / (1 - f)``
faster (Amdahl's law), and the mixture (total work over total time at the buckets' weights,
as the campaign decides) ``T / (T - sum_b w_b f_b t_b)`` with ``T = sum_b w_b t_b`` and
``t_b`` the bucket's profiled step. These are upper bounds, not predictions: a sweep is ranked
by its mixture bound, and one whose bound stays under ``1 + min_effect`` cannot show an effect
the protocol would call one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict, cast

from orchestrator.spec.config import EVIDENCE_KINDS

# status, best first: the order of the ranked list
CANDIDATE = "candidate"
BELOW_MIN_EFFECT = "below_min_effect"
TRIED = "tried"
NOT_APPLICABLE = "not_applicable"
NO_EVIDENCE = "no_evidence"
UNDECLARED = "undeclared"
ORDER = (CANDIDATE, BELOW_MIN_EFFECT, TRIED, NOT_APPLICABLE, NO_EVIDENCE, UNDECLARED)

# how each kind of evidence reads in a sentence ("attention is 41% of step time at s512")
NOUN = {
    "input_bound": "producing the batch",
    "host_gaps": "the device waiting for the host",
    "attention_share": "attention",
    "optimizer_share": "the optimizer step",
    "allocator_churn": "device allocator calls",
}
assert set(NOUN) == set(EVIDENCE_KINDS)


@dataclass(frozen=True)
class BucketProfile:
    """The baseline's framework summary of one bucket (``profiles/framework/*.summary.json``)."""

    name: str
    weight: float
    summary: Mapping[str, Any]

    @property
    def step_s(self) -> float:
        return float(self.summary.get("trace_step_s") or 0.0)


@dataclass(frozen=True)
class SweepInfo:
    """A sweep as advise sees it: what it declares and what it sets."""

    name: str
    evidence: tuple[str, ...] = ()
    source: str = "shipped"  # shipped (conf/sweep) | user (a --sweeps directory)
    workload_kind: str | None = None
    paths: tuple[str, ...] = ()  # the knob's dotted paths (workload.* or env.*)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # applied to every arm
    microbench: str | None = None


@dataclass(frozen=True)
class Figure:
    """One kind of evidence in one profile: its share of the step per bucket, or why absent."""

    kind: str
    shares: Mapping[str, float]  # bucket -> share of the profiled step (0..1)
    absent: str | None = None  # why the profile cannot show it


class AdviceDict(TypedDict):
    """An :class:`Advice` as plain data (advice.json ``advice``, the autopilot's ranking)."""

    rank: int
    sweep: str
    status: str
    line: str
    evidence: list[str]
    bound_mixture: float | None
    bound_buckets: dict[str, float]
    shares: dict[str, float]
    source: str


@dataclass
class Advice:
    rank: int
    sweep: str
    status: str
    line: str  # one sentence that cites the profile's figures
    evidence: list[str]
    bound_mixture: float | None = None  # the Amdahl bound on the mixture (None: no evidence)
    bound_buckets: dict[str, float] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)  # bucket -> summed evidence share
    source: str = "shipped"

    def to_dict(self) -> AdviceDict:
        return cast("AdviceDict", asdict(self))


# --------------------------------------------------------------------------- evidence


def _share(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not math.isnan(x) else None


def _figure_of(kind: str, s: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """(share of the step, None) or (None, why the summary cannot show it) for one bucket."""
    step_s = _share(s.get("trace_step_s"))
    if not step_s:
        return None, "the profile has no profiled step"
    phases = s.get("phases") or {}
    if kind in ("input_bound", "optimizer_share"):
        name = "data" if kind == "input_bound" else "optimizer"
        row = phases.get(name)
        if not isinstance(row, Mapping) or _share(row.get("share")) is None:
            return None, f"the profile has no phase/{name} range (the recipe marks none)"
        return max(0.0, float(row["share"])), None
    if kind == "attention_share":
        row = (s.get("regions") or {}).get("attention")
        if not isinstance(row, Mapping) or _share(row.get("share")) is None:
            return None, ("the profile has no region/attention range (the recipe marks none, "
                          "or the model is compiled)")
        return max(0.0, float(row["share"])), None
    if kind == "host_gaps":
        g = s.get("host_gaps") or {}
        if not g.get("applicable"):
            return None, str(g.get("note") or "host gaps were not measured")
        return max(0.0, float(g.get("idle_us_per_step") or 0.0) / 1e6 / step_s), None
    if kind == "allocator_churn":
        a = s.get("allocator") or {}
        if not a.get("applicable"):
            return None, str(a.get("note") or "allocator calls were not counted (an older "
                                                "profile)")
        return max(0.0, float(a.get("share") or 0.0)), None
    raise KeyError(kind)


def figures(buckets: Sequence[BucketProfile]) -> dict[str, Figure]:
    """Every kind of evidence in this profile. A kind is absent when no bucket shows it."""
    out: dict[str, Figure] = {}
    for kind in EVIDENCE_KINDS:
        shares: dict[str, float] = {}
        why: str | None = None
        for b in buckets:
            f, reason = _figure_of(kind, b.summary)
            if f is None:
                why = why or reason
            else:
                shares[b.name] = min(f, 1.0)
        out[kind] = Figure(kind, shares, None if shares else (why or "no bucket was profiled"))
    return out


# --------------------------------------------------------------------------- bounds


def amdahl(share: float) -> float:
    """The most a step can speed up when a part of it that is ``share`` of it takes no time."""
    return float("inf") if share >= 1.0 else 1.0 / (1.0 - share)


def mixture_bound(shares: Mapping[str, float], buckets: Sequence[BucketProfile]) -> float:
    """``T / (T - sum_b w_b f_b t_b)``, ``T = sum_b w_b t_b`` over the buckets with a share."""
    total = saved = 0.0
    for b in buckets:
        if b.name in shares:
            total += b.weight * b.step_s
            saved += b.weight * b.step_s * shares[b.name]
    if total <= 0:
        return 1.0
    return float("inf") if saved >= total else total / (total - saved)


def _x(v: float) -> str:
    if v == float("inf"):
        return "unbounded"
    return f"{v:.3f}x" if v < 1.1 else f"{v:.2f}x"


def _pct(f: float) -> str:
    return f"{f * 100:.1f}%" if f < 0.1 else f"{f * 100:.0f}%"


# --------------------------------------------------------------------------- applicability


def _get(tree: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = {"workload": tree}
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def not_applicable(sweep: SweepInfo, workload: Mapping[str, Any]) -> str | None:
    """Why ``sweep`` cannot run against this baseline as it stands, else None."""
    kind = workload.get("kind")
    if sweep.workload_kind and kind and sweep.workload_kind != kind:
        return (f"needs a workload of kind {sweep.workload_kind!r}; this baseline "
                f"({workload.get('name')}) is of kind {kind!r}")
    for path in sweep.paths:
        if path.startswith("workload.") and not _get(workload, path)[0]:
            return f"sets {path}, which this workload does not have"
    for path, value in sweep.fixed.items():
        if not path.startswith("workload."):
            continue
        found, have = _get(workload, path)
        if found and have != value:
            return (f"fixes {path}={value} for every arm while the baseline has {have}, so "
                    "it compares settings of another configuration than the profiled one "
                    "(promote that setting first)")
    return None


# --------------------------------------------------------------------------- ranking


def _evidence_line(sweep: SweepInfo, figs: Mapping[str, Figure],
                   buckets: Sequence[BucketProfile]) -> tuple[dict[str, float], str]:
    """(summed share per bucket, the clause citing each declared kind's figures)."""
    summed: dict[str, float] = {}
    parts = []
    for kind in sweep.evidence:
        fig = figs[kind]
        if not fig.shares:
            continue
        order = sorted(fig.shares, key=lambda b: -fig.shares[b])
        top = order[0]
        rest = ", ".join(f"{_pct(fig.shares[b])} at {b}" for b in order[1:])
        parts.append(f"{NOUN[kind]} is {_pct(fig.shares[top])} of step time at {top}"
                     + (f" ({rest})" if rest else ""))
        for b, f in fig.shares.items():
            summed[b] = min(1.0, summed.get(b, 0.0) + f)
    return summed, "; ".join(parts)


def rank(sweeps: Sequence[SweepInfo], buckets: Sequence[BucketProfile],
         workload: Mapping[str, Any], min_effect: float,
         tried: Mapping[str, str] | None = None,
         excluded: Mapping[str, str] | None = None) -> list[Advice]:
    """Every sweep with its status and one line citing the figures, best first.

    ``workload``: the profiled baseline's workload (plain data); ``tried``: sweep name -> what
    came of running it against this baseline already (the autopilot's record); ``excluded``:
    sweep name -> why the caller cannot run it (listed as not applicable)."""
    figs = figures(buckets)
    tried = tried or {}
    excluded = excluded or {}
    out: list[Advice] = []
    for sw in sweeps:
        arg = f"+sweep={sw.name}"
        ev = list(sw.evidence)
        if not ev:
            out.append(Advice(0, sw.name, UNDECLARED, f"{arg} declares no evidence (add "
                              f"`evidence: [...]`, one of {', '.join(EVIDENCE_KINDS)}, to its "
                              "sweep file): it cannot be ranked", ev, source=sw.source))
            continue
        summed, cited = _evidence_line(sw, figs, buckets)
        if not summed:
            why = "; ".join(f"{k}: {figs[k].absent}" for k in ev)
            out.append(Advice(0, sw.name, NO_EVIDENCE, f"{arg} addresses {', '.join(ev)}, which "
                              f"this profile does not show ({why})", ev, source=sw.source))
            continue
        per_bucket = {b: amdahl(f) for b, f in summed.items()}
        mix = mixture_bound(summed, buckets)
        top = max(per_bucket, key=lambda b: per_bucket[b])
        bound = f"at most {_x(per_bucket[top])} at {top}"
        if len(per_bucket) > 1:
            bound += f" and {_x(mix)} on the mixture"
        line = f"{cited}, so {arg} can give {bound}"
        status = CANDIDATE
        reason = not_applicable(sw, workload) or excluded.get(sw.name)
        if sw.name in tried:
            status, line = TRIED, f"{line}; already run against this baseline: {tried[sw.name]}"
        elif reason:
            status, line = NOT_APPLICABLE, f"{line}; not applicable here: it {reason}"
        elif mix < 1.0 + min_effect:
            status = BELOW_MIN_EFFECT
            line += (f": under protocol.min_effect={min_effect:g} (a {min_effect:.0%} effect), "
                     "too small to be worth a campaign")
        out.append(Advice(0, sw.name, status, line, ev, mix, per_bucket,
                          {b: round(f, 6) for b, f in summed.items()}, sw.source))
    key = {s: i for i, s in enumerate(ORDER)}
    out.sort(key=lambda a: (key[a.status], -(a.bound_mixture or 0.0)))
    for i, a in enumerate(out, 1):
        a.rank = i
    return out


def top_candidate(advice: Sequence[Advice]) -> Advice | None:
    """The first candidate, or None when no sweep's bound reaches min_effect."""
    return next((a for a in advice if a.status == CANDIDATE), None)


def render(advice: Sequence[Advice], header: Sequence[str] = ()) -> list[str]:
    """The ranked list as Markdown lines."""
    out = list(header)
    for a in advice:
        tag = "" if a.status == CANDIDATE else f" [{a.status.replace('_', ' ')}]"
        user = " (user sweep)" if a.source == "user" else ""
        out.append(f"{a.rank}. **{a.sweep}**{user}{tag}: {a.line}")
    return out
