"""Did a commit make training slower? The regression check and the bisection.

:func:`revision_sweep` builds the sweep of one comparison (``source.revision``: the base
revision as the baseline arm, the head as the one variant); :func:`judge` reads the head's
verdict back from a finished campaign and turns it into one of four outcomes, each with its
exit code (``python -m orchestrator.check``):

- ``regression`` (1): the head is slower beyond the margin: its speedup interval lies wholly
  below 1 / (1 + margin), or the head failed (a crash, a failed gate) where the base ran;
- ``ok`` (0): no regression: retain or equivalent, or an interval whose lower end is at least
  1 / (1 + margin) (non-inferior within the margin);
- ``inconclusive`` (3): neither can be said from the trials (more rounds, a quieter machine or
  a wider margin would decide it);
- ``invalid`` (4): the comparison could not be made (the base failed, a frozen path changed,
  trials ran in differing environments ...).

:class:`Bisection` walks the first-parent history from a good to a bad revision
(``python -m orchestrator.bisect``): the bad end is first confirmed slower than the good end,
then each step compares the midpoint with the good end, a campaign each. An inconclusive step
is repeated (a fresh campaign, up to ``retries`` times), never guessed; each comparison runs at
the confidence that keeps the whole bisection's error rate at the protocol's (Bonferroni over
the most comparisons it can take). Every step is recorded in ``DIR/bisect.json`` before it
starts and when it ends, and ``DIR/decisions.md`` is rewritten after each: a killed bisection
started again on the same directory replays what ended and resumes the campaign it was in.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from orchestrator.core import records
from orchestrator.core.errors import ConfigError
from orchestrator.core.records import Decision, RecordError, VerdictKind
from orchestrator.core.results import SCHEMA_VERSION, atomic_write_json, read_json
from orchestrator.platform import git
from orchestrator.spec.config import Config, SweepConfig
from orchestrator.spec.ledger import display_path, fmt_speedup, objective, utc_now
from orchestrator.spec.sweep import REVISION

log = logging.getLogger(__name__)

EXIT = {"ok": 0, "regression": 1, "inconclusive": 3, "invalid": 4}
STATE = "bisect.json"
LOG = "decisions.md"

# (base revision, head revision, run directory, confidence) -> a validated Config
Compose = Callable[[str, str, Path, float], Config]
# (config, run_dir) -> runs one campaign
Runner = Callable[[Config, Path], Any]


def _short(rev: str) -> str:
    """A full commit id as its first 12 digits (an arm's label); any other name as it is."""
    return rev[:12] if len(rev) == 40 and all(c in "0123456789abcdef" for c in rev) else rev


def revision_sweep(base: str, head: str, name: str = "check") -> SweepConfig:
    """One comparison of two code revisions: ``base`` the baseline arm, ``head`` the variant."""
    return SweepConfig(name=name, hypothesis=f"{_short(head)} trains no slower than "
                       f"{_short(base)}", variable=REVISION, baseline=base, values=[head],
                       baseline_label=f"base {_short(base)}", labels=[f"head {_short(head)}"])


class JudgementDict(TypedDict):
    """A :class:`Judgement` as plain data: a bisect.json step's ``judgement``."""

    outcome: str
    line: str
    verdict: VerdictKind | None
    speedup: Mapping[str, float] | None
    exit_code: int


class BisectResult(TypedDict, total=False):
    """What a bisection found: :meth:`Bisection.run`'s result, bisect.json's ``result``."""

    outcome: str  # found | no_regression | inconclusive | invalid
    culprit: str | None
    subject: str
    last_good: str
    evidence: str
    run_dir: str
    line: str
    at: str  # where it stopped
    range: list[str]  # the commits between which the first slower one lies
    tested: list[str]


@dataclass
class Judgement:
    outcome: str  # ok | regression | inconclusive | invalid
    line: str  # one line: what was found, with the interval
    verdict: VerdictKind | None = None
    speedup: Mapping[str, float] | None = None  # the head's interval at the objective's scope

    @property
    def exit_code(self) -> int:
        return EXIT[self.outcome]

    def to_dict(self) -> JudgementDict:
        return {"outcome": self.outcome, "line": self.line, "verdict": self.verdict,
                "speedup": self.speedup, "exit_code": self.exit_code}


def head_decision(run_dir: Path) -> Decision:
    """The head arm's verdict from a finished comparison (decisions.jsonl)."""
    path = run_dir / records.DECISIONS
    if not path.is_file():
        raise ConfigError("--dir", f"{display_path(run_dir)} has no {records.DECISIONS}: the "
                          "campaign did not finish; run the same command again to resume it")
    try:
        rows = records.read_decisions(path)
    except RecordError as exc:
        raise ConfigError("--dir", str(exc)) from None
    heads = [r for r in rows if r.label.startswith("head ")] or rows
    if not heads:
        raise ConfigError("--dir", f"{display_path(run_dir)}/{records.DECISIONS} holds no "
                          "verdict")
    return heads[0]


def judge(d: Decision, margin: float) -> Judgement:
    """One of the four outcomes (module docstring) from the head's verdict ``d``."""
    verdict = d.verdict
    obj = objective(d.get("speedups"))
    sp = obj[1] if obj else None
    floor = 1 / (1 + margin)
    where = f" at {obj[0]}" if obj else ""
    shown = f"{fmt_speedup(sp)}{where}" if sp else "no interval"
    band = f"the {margin:.0%} margin (speedup {floor:.3f})"
    why = "; ".join(d.reasons[:2])
    if verdict is VerdictKind.INVALID:
        return Judgement("invalid", f"invalid: the comparison could not be made: {why}",
                         verdict, sp)
    if sp is None or not all(math.isfinite(float(sp.get(k, math.nan)))
                             for k in ("speedup", "low", "high")):
        if verdict is VerdictKind.REJECT:  # failed without timing: the head's failure
            return Judgement("regression", f"regression: the head fails where the base runs: "
                             f"{d.headline or why}", verdict, sp)
        return Judgement("inconclusive", f"inconclusive: no speedup interval ({why})",
                         verdict, sp)
    lo, hi, s = float(sp["low"]), float(sp["high"]), float(sp["speedup"])
    slower = (1 / s - 1) if s > 0 else math.inf
    if hi < floor:
        return Judgement("regression", f"regression: head is {slower:.1%} slower, {shown}, "
                         f"beyond {band}", verdict, sp)
    if verdict is VerdictKind.REJECT and "gate" in why.lower():
        return Judgement("regression", f"regression: the head fails a gate: {why}", verdict, sp)
    if verdict in (VerdictKind.RETAIN, VerdictKind.EQUIVALENT) or lo >= floor:
        what = {VerdictKind.RETAIN: "faster", VerdictKind.EQUIVALENT: "equivalent"}.get(
            verdict, "non-inferior")
        return Judgement("ok", f"no regression ({what}): {shown}, within {band}", verdict, sp)
    return Judgement("inconclusive", f"inconclusive: {shown} straddles {band}: more rounds "
                     "(protocol.max_rounds), a quieter machine or a wider --margin would "
                     "decide it", verdict, sp)


# --------------------------------------------------------------------------- bisection


def comparisons_at_most(candidates: int, retries: int) -> int:
    """The most campaigns a bisection over ``candidates`` commits can run: confirming the bad
    end, then ceil(log2) halvings, each repeated up to ``retries`` times."""
    halvings = math.ceil(math.log2(candidates)) if candidates > 1 else 0
    return (1 + halvings) * (1 + retries)


class Bisection:
    """The first commit after ``good`` on bad's first-parent history that is slower than
    ``good`` beyond the margin (module docstring)."""

    def __init__(self, root: Path, repo: Path, good: str, bad: str, margin: float,
                 confidence: float, retries: int, compose: Compose, runner: Runner) -> None:
        self.root, self.repo = root, repo
        self.margin, self.retries = margin, retries
        self.compose, self.runner = compose, runner
        root.mkdir(parents=True, exist_ok=True)
        ends = []
        for flag, rev in (("--good", good), ("--bad", bad)):
            try:
                ends.append(git.resolve(repo, rev))
            except git.GitError as exc:
                raise ConfigError(flag, f"{exc} ({repo})") from None
        g, b = ends
        try:
            commits = git.first_parent_path(repo, g, b)
        except git.GitError as exc:
            raise ConfigError("--good", f"{good} must be an ancestor of {bad} on its "
                              f"first-parent history ({exc})") from None
        path = root / STATE
        identity = {"good": g, "bad": b, "margin": margin}
        if path.is_file():
            self.state = read_json(path)
            old = {k: self.state.get(k) for k in identity}
            if old != identity:
                diff = ", ".join(k for k in identity if old[k] != identity[k])
                raise ConfigError("--dir", f"{display_path(root)} holds a bisection of other "
                                  f"revisions ({diff}); resume it with the same arguments or "
                                  "choose another --dir")
            self.state["invocations"] = int(self.state.get("invocations", 1)) + 1
            self.state["result"] = None
        else:
            at_most = comparisons_at_most(len(commits), retries)
            self.state = {
                "schema_version": SCHEMA_VERSION, "kind": "bisect", **identity,
                "good_name": good, "bad_name": bad, "repo": display_path(repo),
                "commits": commits, "subjects": {c: git.subject(repo, c) for c in commits},
                "confidence": confidence, "comparisons_at_most": at_most,
                "step_confidence": 1 - (1 - confidence) / at_most,
                "retries": retries, "started_at": utc_now(), "invocations": 1,
                "steps": [], "result": None}
        self._save()

    # ----------------------------------------------------------------- state and log

    def _save(self) -> None:
        atomic_write_json(self.root / STATE, self.state)
        (self.root / LOG).write_text("\n".join(log_lines(self.state)) + "\n", encoding="utf-8")

    def _compare(self, index: int, attempt: int) -> Judgement:
        commit = self.state["commits"][index]
        key = f"{commit[:12]}-try{attempt}"
        rec = next((s for s in self.state["steps"] if s["key"] == key), None)
        if rec is not None and rec["status"] == "done":
            return Judgement(**{k: rec["judgement"][k] for k in ("outcome", "line", "verdict",
                                                                 "speedup")})
        run_dir = self.root / f"{len(self.state['steps']) + 1 if rec is None else rec['n']:02d}-{key}"
        if rec is None:
            rec = {"key": key, "n": len(self.state["steps"]) + 1, "commit": commit,
                   "index": index, "attempt": attempt, "status": "started",
                   "started_at": utc_now(), "run_dir": display_path(run_dir), "resumed": 0}
            self.state["steps"].append(rec)
        else:
            rec["resumed"] += 1
            log.info("bisect: resuming the comparison of %s", commit[:12])
        self._save()
        cfg = self.compose(self.state["good"], commit, run_dir, self.state["step_confidence"])
        self.runner(cfg, run_dir)
        j = judge(head_decision(run_dir), self.margin)
        rec.update(status="done", finished_at=utc_now(), judgement=j.to_dict())
        self._save()
        log.info("bisect: %s %s: %s", commit[:12], self.state["subjects"].get(commit, ""), j.line)
        return j

    def _decide(self, index: int) -> str:
        """ok | regression for the commit at ``index``; an inconclusive comparison is repeated
        up to ``retries`` times; raises _Stop when it stays undecided or is invalid."""
        for attempt in range(1, self.retries + 2):
            j = self._compare(index, attempt)
            if j.outcome in ("ok", "regression"):
                return j.outcome
            if j.outcome == "invalid":
                raise _Stop("invalid", index, j.line)
        raise _Stop("inconclusive", index, f"still inconclusive after {self.retries + 1} "
                    f"comparison(s): {j.line}")

    def run(self) -> BisectResult:
        commits = self.state["commits"]
        lo, hi = -1, len(commits) - 1  # good at lo (-1: the good end), bad at hi
        try:
            if self._decide(hi) == "ok":
                raise _Stop("no_regression", hi, f"the bad end {commits[hi][:12]} is not slower "
                            f"than the good end beyond the {self.margin:.0%} margin")
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._decide(mid) == "regression":
                    hi = mid
                else:
                    lo = mid
            culprit = commits[hi]
            step = next(s for s in reversed(self.state["steps"])
                        if s["commit"] == culprit and s["status"] == "done")
            result: BisectResult = {"outcome": "found", "culprit": culprit,
                      "subject": self.state["subjects"].get(culprit, ""),
                      "last_good": self.state["good"] if lo < 0 else commits[lo],
                      "evidence": step["judgement"]["line"], "run_dir": step["run_dir"],
                      "line": f"first slower commit: {culprit[:12]} "
                              f"{self.state['subjects'].get(culprit, '')!r}: "
                              f"{step['judgement']['line']}"}
        except _Stop as stop:
            left = self.state["good"] if lo < 0 else commits[lo]
            result = {"outcome": stop.outcome, "culprit": None, "at": commits[stop.index],
                      "range": [left, commits[hi]],
                      "line": (f"{stop.message}" if stop.outcome == "no_regression" else
                               f"stopped at {commits[stop.index][:12]}: {stop.message}; the "
                               f"first slower commit lies after {left[:12]} up to "
                               f"{commits[hi][:12]}")}
        result["tested"] = [s["commit"] for s in self.state["steps"] if s["status"] == "done"]
        self.state["result"] = {**result, "at_time": utc_now()}
        self._save()
        return result


class _Stop(Exception):
    def __init__(self, outcome: str, index: int, message: str) -> None:
        super().__init__(message)
        self.outcome, self.index, self.message = outcome, index, message


BISECT_EXIT = {"found": 0, "no_regression": 5, "inconclusive": 3, "invalid": 4}


def log_lines(state: dict[str, Any]) -> list[str]:
    """The bisection's decision log (DIR/decisions.md)."""
    subj = state.get("subjects") or {}
    margin = float(state.get("margin", 0))
    out = [f"# Bisection: {state.get('good_name')} (good) .. {state.get('bad_name')} (bad)", "",
           (f"- repository: `{state.get('repo')}`; {len(state.get('commits') or [])} "
            "commit(s) after the good end on the bad end's first-parent history"),
           (f"- a commit is bad when it is slower than the good end "
            f"({str(state.get('good'))[:12]}) beyond the {margin:.0%} margin (its speedup "
            "interval wholly below 1 / (1 + margin))"),
           (f"- each comparison at confidence {float(state.get('step_confidence', 0)):.4f}: "
            f"the whole bisection's error rate stays within "
            f"{1 - float(state.get('confidence', 0)):.0%} over its at most "
            f"{state.get('comparisons_at_most')} comparisons (Bonferroni); an inconclusive "
            f"comparison is repeated up to {state.get('retries')} time(s), never guessed"), "",
           "| # | commit | subject | try | outcome | evidence | run directory |",
           "|---|---|---|---|---|---|---|"]
    for s in state.get("steps") or []:
        j = s.get("judgement") or {}
        subject = str(subj.get(s["commit"], "")).replace("|", "\\|")
        out.append(f"| {s['n']} | `{s['commit'][:12]}` | {subject} | "
                   f"{s['attempt']} | {j.get('outcome', s['status'])} | "
                   f"{j.get('line', '(running)')} | `{s['run_dir']}` |")
    res = state.get("result")
    if res:
        out += ["", f"**Result: {res['line']}**"]
        if res.get("culprit"):
            out.append(f"- last good commit: `{str(res.get('last_good'))[:12]}`; evidence: "
                       f"`{res.get('run_dir')}/decisions.md`")
    return out

