"""The autopilot: profile the current baseline, advise, run the top sweep, promote a confirmed
retain, repeat, within a budget (campaigns and wall time).

Every step is recorded in ``AUTO_DIR/autopilot.json`` before it starts and when it ends, and
``AUTO_DIR/decisions.md`` is rewritten from it after each step. A step that ended is never run
again: a killed autopilot, started again on the same directory, replays the recorded results
and resumes the step it was in (a campaign or a profile finishes in its own run directory,
keeping its final trials). Each iteration's run directories lie under ``AUTO_DIR``
(``it1-profile``, ``it1-advice.md``, ``it1-<sweep>``, ``it1-confirm``, ...).

The sweep's baseline arm must be the current version: when the sweep file declares another
baseline value, the autopilot moves it to the version's value and the declared baseline
becomes one of the values (a value equal to the version's is dropped).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from orchestrator.analysis.direction import DirectionCheckDict
from orchestrator.analysis.rank import Advice, AdviceDict, rank, render, top_candidate
from orchestrator.campaign.advise.load import load_sweeps, read_profile, sets_env
from orchestrator.campaign.advise.profile import profile_baseline
from orchestrator.campaign.promote import confirm, read_campaign
from orchestrator.campaign.validate import validate
from orchestrator.core.errors import ConfigError
from orchestrator.core.records import VerdictKind, Word
from orchestrator.core.results import SCHEMA_VERSION, atomic_write_json, read_json
from orchestrator.spec.config import Config
from orchestrator.spec.ledger import (
    Ledger,
    Version,
    apply_baseline,
    display_path,
    fmt_speedup,
    objective,
    utc_now,
)
from orchestrator.spec.sweep import expand_arms

log = logging.getLogger(__name__)

STATE = "autopilot.json"
LOG = "decisions.md"

# (overrides, need_sweep) -> a validated Config (orchestrator.cli.main.compose)
Compose = Callable[[list[str], bool], Config]
# (config, run_dir) -> runs one campaign
Runner = Callable[[Config, Path], Any]


class SettingsDict(TypedDict):
    """autopilot.json's ``settings``: :class:`Settings` as plain data."""

    workload: str
    overrides: list[str]
    sweeps_dirs: list[str]
    baselines_dir: str
    max_campaigns: int
    budget_s: float
    min_effect: float | None
    only: list[str]


class CampaignVerdict(TypedDict):
    """One variant's verdict in a campaign step's ``verdicts`` (autopilot.json)."""

    label: str
    verdict: str
    headline: str
    direction: DirectionCheckDict | None


class StepResult(TypedDict, total=False):
    """A step's ``result`` in autopilot.json; which keys a step has depends on its kind
    (profile, advise, campaign, promote, confirm); {} while it runs."""

    summary: str
    run_dir: str | None
    path: str  # profile, campaign: where it ran
    reused: bool  # profile: an earlier profile of the same version serves
    top: str | None  # advise: the sweep to run next
    file: str  # advise: the advice's markdown
    ranking: list[AdviceDict]
    sweep: str  # campaign
    rebased: str
    verdicts: list[CampaignVerdict]
    retained: str
    flagged: str
    promoted: str | None  # promote, confirm: the version written


class StepKind(Word):
    """An autopilot step's kind (autopilot.json ``steps[].kind``): written as the plain word,
    and a step read back from the file compares equal to its member."""

    profile = "profile"
    advise = "advise"
    campaign = "campaign"
    promote = "promote"
    confirm = "confirm"


class _StepRecordBase(TypedDict):
    key: str
    kind: str  # a StepKind's word (read back from the file: the plain string)
    against: str
    status: str
    started_at: str
    elapsed_s: float
    resumed: int
    result: StepResult


class StepRecord(_StepRecordBase, total=False):
    """One entry of autopilot.json's ``steps``."""

    finished_at: str


class Stopped(TypedDict):
    """autopilot.json's ``stopped``: why the loop ended."""

    reason: str
    at: str
    iteration: int


class AutopilotState(TypedDict):
    """autopilot.json: the settings, every step, why it stopped."""

    schema_version: int
    kind: str
    settings: SettingsDict
    started_at: str
    invocations: int
    steps: list[StepRecord]
    stopped: Stopped | None


@dataclass
class Settings:
    workload: str
    overrides: list[str] = field(default_factory=list)  # protocol=..., launcher=..., device=...
    sweeps_dirs: list[str] = field(default_factory=list)
    baselines_dir: str = "baselines"
    max_campaigns: int = 3  # sweep campaigns (confirmations are not counted)
    budget_s: float = 3600.0  # wall time of the steps, summed over invocations
    min_effect: float | None = None  # None: the protocol's
    only: list[str] = field(default_factory=list)  # consider only these sweeps ([] = all)

    def identity(self) -> dict[str, str | list[str]]:
        """What a resumed autopilot must share with the one it resumes (budgets may change)."""
        return {"workload": self.workload, "overrides": self.overrides,
                "sweeps_dirs": self.sweeps_dirs, "baselines_dir": self.baselines_dir,
                "only": self.only}


class Stop(Exception):
    """The loop ends: its reason."""


def rebase(cfg: Config, version: Version) -> str | None:
    """Move the sweep's baseline arm to ``version``'s values (see the module docstring);
    returns what changed, or None. A value equal to the version's is dropped."""
    sweep = cfg.sweep
    assert sweep is not None
    paths = dict(sweep.knob) if sweep.knob else {"": sweep.variable}
    if any(p not in version.overrides for p in paths.values()):
        return None  # an env.* switch or a key the version does not set
    have = ({f: version.overrides[p] for f, p in paths.items()} if sweep.knob
            else version.overrides[sweep.variable])
    if have == sweep.baseline:
        return None
    arms = expand_arms(cfg)
    kept = [(a.value, a.label) for a in arms if a.value != have]
    sweep.baseline = have
    sweep.baseline_label = version.id
    sweep.values = [v for v, _ in kept]
    sweep.labels = [str(label) for _, label in kept]
    return (f"baseline arm moved to {version.id}'s value {have!r}; the sweep's declared baseline "
            f"{arms[0].label!r} is a variant")


class Autopilot:
    def __init__(self, root: Path, settings: Settings, compose: Compose, runner: Runner,
                 profiler: Callable[[Config, Path], Any] = profile_baseline) -> None:
        self.root = root
        self.settings = settings
        self.compose = compose
        self.runner = runner
        self.profiler = profiler
        self.ledger = Ledger(Path(settings.baselines_dir), settings.workload)
        root.mkdir(parents=True, exist_ok=True)
        path = root / STATE
        if path.is_file():
            self.state: AutopilotState = read_json(path)
            old = self.state.get("settings", {})
            mine = settings.identity()
            if {k: old.get(k) for k in mine} != mine:
                diff = ", ".join(k for k in mine if old.get(k) != mine[k])
                raise ConfigError("--dir", f"{display_path(root)} holds an autopilot started with "
                                  f"other settings ({diff}); resume it with the same arguments "
                                  "or choose another --dir")
            self.state["settings"] = cast(SettingsDict, dataclasses.asdict(settings))
            self.state["stopped"] = None
            self.state["invocations"] = int(self.state.get("invocations", 1)) + 1
        else:
            self.state = {"schema_version": SCHEMA_VERSION, "kind": "autopilot",
                          "settings": cast(SettingsDict, dataclasses.asdict(settings)),
                          "started_at": utc_now(),
                          "invocations": 1, "steps": [], "stopped": None}
        self._save()

    # ----------------------------------------------------------------- state and log

    def _save(self) -> None:
        atomic_write_json(self.root / STATE, self.state)
        (self.root / LOG).write_text("\n".join(log_lines(self.state)) + "\n", encoding="utf-8")

    def _rec(self, key: str) -> StepRecord | None:
        return next((s for s in self.state["steps"] if s["key"] == key), None)

    def done(self, key: str) -> StepResult | None:
        rec = self._rec(key)
        return rec["result"] if rec and rec["status"] == "done" else None

    def spent_s(self) -> float:
        return sum(float(s.get("elapsed_s") or 0.0) for s in self.state["steps"])

    def campaigns(self) -> int:
        return sum(1 for s in self.state["steps"] if s["kind"] == StepKind.campaign
                   and s["status"] == "done" and s["result"].get("run_dir"))

    def check_budget(self, kind: StepKind) -> None:
        s = self.settings
        if self.spent_s() >= s.budget_s:
            raise Stop(f"wall-time budget spent: {self.spent_s():.0f} s of {s.budget_s:.0f} s")
        if kind == StepKind.campaign and self.campaigns() >= s.max_campaigns:
            raise Stop(f"campaign budget spent: {self.campaigns()} of {s.max_campaigns}")

    def step(self, key: str, kind: StepKind, against: str, fn: Callable[[], StepResult],
             budgeted: bool = True) -> StepResult:
        """Run ``fn`` once as step ``key``; a step recorded as done returns its result."""
        got = self.done(key)
        if got is not None:
            return got
        rec = self._rec(key)
        if budgeted:
            self.check_budget(kind)
        if rec is None:
            rec = {"key": key, "kind": kind, "against": against, "status": "started",
                   "started_at": utc_now(), "elapsed_s": 0.0, "resumed": 0, "result": {}}
            self.state["steps"].append(rec)
        else:  # killed while in this step: run it again where it stopped
            rec["resumed"] += 1
            log.info("autopilot: resuming %s (%s)", key, kind)
        self._save()
        t0 = time.monotonic()
        try:
            result = fn()
        finally:
            rec["elapsed_s"] = float(rec["elapsed_s"]) + time.monotonic() - t0
            self._save()
        # (mypy's TypedDict.update takes no keywords; these are StepRecord's keys)
        rec.update(status="done", finished_at=utc_now(), result=result)  # type: ignore[call-arg]
        self._save()
        log.info("autopilot: %s: %s", key, result.get("summary", ""))
        return result

    # ----------------------------------------------------------------- the loop

    def run(self) -> str:
        """Iterate until a budget is spent or no sweep is worth a campaign; the reason."""
        it = 1
        try:
            while True:
                self.iteration(it)
                it += 1
        except Stop as stop:
            reason = str(stop)
        self.state["stopped"] = {"reason": reason, "at": utc_now(), "iteration": it}
        self._save()
        log.info("autopilot stopped: %s", reason)
        return reason

    def _base(self) -> list[str]:
        paths = [f"file://{Path(d).resolve()}" for d in self.settings.sweeps_dirs]
        search = [f"hydra.searchpath=[{','.join(paths)}]"] if paths else []
        return [f"workload={self.settings.workload}", *self.settings.overrides, *search]

    def _against(self, cfg: Config, version: Version, run_dir: Path) -> Config:
        cfg.baseline, cfg.baselines_dir = version.id, self.settings.baselines_dir
        cfg.resume, cfg.run_dir = None, str(run_dir)
        apply_baseline(cfg)
        validate(cfg)
        return cfg

    def iteration(self, it: int) -> None:
        k = f"it{it}"
        latest = self.ledger.latest()
        assert latest is not None, "the autopilot creates v0 before it starts"
        version = latest
        if self.done(f"{k}/profile") is None:  # an earlier profile of this version serves
            prev = next((s["result"] for s in reversed(self.state["steps"])
                         if s["kind"] == StepKind.profile and s["status"] == "done"
                         and s["against"] == version.id), None)
            if prev is not None:
                self.step(f"{k}/profile", StepKind.profile, version.id, lambda: {
                    **prev, "reused": True,
                    "summary": f"{version.id} unchanged: the profile of {prev['run_dir']} "
                               "serves"}, budgeted=False)
        prof = self.step(f"{k}/profile", StepKind.profile, version.id,
                         lambda: self._profile(version, self.root / f"{k}-profile"))
        adv = self.step(f"{k}/advise", StepKind.advise, version.id,
                        lambda: self._advise(version, Path(prof["path"]), k), budgeted=False)
        if adv["top"] is None:
            raise Stop(adv["summary"])
        camp = self.step(f"{k}/campaign", StepKind.campaign, version.id,
                         lambda: self._campaign(cast(str, adv["top"]), version,
                                                self.root / f"{k}-{adv['top']}"))
        label = camp.get("retained")
        if not label:
            return
        if camp.get("flagged"):
            self.step(f"{k}/promote", StepKind.promote, version.id, lambda: {
                "promoted": None, "summary": f"not promoted: {camp['flagged']}"}, budgeted=False)
            return
        self.step(f"{k}/confirm", StepKind.confirm, version.id,
                  lambda: self._confirm(Path(camp["path"]), label, version,
                                        self.root / f"{k}-confirm"))

    # ----------------------------------------------------------------- the steps

    def _profile(self, version: Version, out: Path) -> StepResult:
        cfg = self._against(self.compose(self._base(), False), version, out)
        self.profiler(cfg, out)
        p = read_profile(out)
        steps = ", ".join(f"{b.name} {b.step_s * 1e3:.1f} ms" for b in p.buckets)
        return {"run_dir": display_path(out), "path": str(out),
                "summary": f"profiled {version.id}: {steps} per profiled step"
                           + (f"; failed: {'; '.join(p.failed)}" if p.failed else "")}

    def tried(self, version: Version) -> dict[str, str]:
        return {s["result"]["sweep"]: s["result"]["summary"] for s in self.state["steps"]
                if s["kind"] == StepKind.campaign and s["status"] == "done"
                and s["against"] == version.id}

    def _advise(self, version: Version, prof_dir: Path, k: str) -> StepResult:
        p = read_profile(prof_dir)
        sweeps = load_sweeps([Path(d) for d in self.settings.sweeps_dirs])
        excluded = {s.name: "sets an environment switch (env.*), which the baseline ledger does "
                    "not record, so the autopilot cannot promote it" for s in sweeps if sets_env(s)}
        if self.settings.only:
            excluded.update({s.name: "is not among --only" for s in sweeps
                             if s.name not in self.settings.only})
        min_effect = p.min_effect if self.settings.min_effect is None else self.settings.min_effect
        advice = rank(sweeps, p.buckets, p.workload, min_effect, self.tried(version), excluded)
        head = (f"Advice for {version.id} of {self.settings.workload} from "
                f"{display_path(prof_dir)} (min_effect {min_effect:g}):")
        lines = render(advice, [head, ""])
        (self.root / f"{k}-advice.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        top = top_candidate(advice)
        return {"top": top.sweep if top else None, "file": f"{k}-advice.md",
                "ranking": [a.to_dict() for a in advice[:5]],
                "summary": (f"top: +sweep={top.sweep}: {top.line}" if top else
                            "no sweep left to run whose bound reaches min_effect: "
                            + _why_none(advice))}

    def _campaign(self, name: str, version: Version, out: Path) -> StepResult:
        res: StepResult = {"sweep": name, "run_dir": None, "path": str(out)}
        try:
            cfg = self.compose([*self._base(), f"+sweep={name}"], True)
            moved = rebase(cfg, version)
            cfg = self._against(cfg, version, out)
        except ConfigError as exc:  # a sweep that cannot run against this version
            return {**res, "summary": f"+sweep={name} refused: {exc}"}
        if moved:
            res["rebased"] = moved
        self.runner(cfg, out)
        ev = read_campaign(out)
        verdicts: list[CampaignVerdict] = [{"label": d.label, "verdict": d.verdict.value, "headline": d.headline,
                     "direction": d.get("direction_check")} for d in ev.decisions]
        retained = sorted((d for d in ev.decisions if d.verdict is VerdictKind.RETAIN
                           and d.final),
                          key=lambda d: -float((objective(d.get("speedups")) or ("", {}))[1]
                                               .get("speedup", 0.0)))
        # (mypy's TypedDict.update takes no keywords; these are StepResult's keys)
        res.update(run_dir=display_path(out), verdicts=verdicts,  # type: ignore[call-arg]
                   summary=f"+sweep={name}: " + "; ".join(
                       f"{v['label']} {v['verdict']}" for v in verdicts))
        if retained:
            best = retained[0]
            res["retained"] = best.label
            chk = best.get("direction_check") or {}
            if chk.get("agrees") is False:
                res["flagged"] = (f"the retain of {best.label!r} disagrees in direction "
                                  f"with its microbenchmark ({chk.get('summary', '')}); promote "
                                  "it by hand with --force if you trust the end-to-end result")
        return res

    def _confirm(self, run_dir: Path, label: str, version: Version,
                 out: Path) -> StepResult:
        latest = self.ledger.latest()
        if latest is not None and latest.id != version.id:  # killed after the version was written
            runs = [j.get("run_dir") for j in latest.data.get("justification", [])]
            if display_path(out) in runs:
                return {"promoted": latest.id, "run_dir": display_path(out),
                        "summary": f"promoted {latest.label()} (confirmed in "
                                   f"{display_path(out)})"}
        try:
            res = confirm(run_dir, Path(self.settings.baselines_dir), label, out,
                          runner=self.runner)
        except ConfigError as exc:
            return {"promoted": None, "summary": f"not promoted: {exc}"}
        if res.promoted is None:
            return {"promoted": None, "run_dir": display_path(out),
                    "summary": f"not promoted: the confirmation did not agree: {res.reason}"}
        v = res.promoted
        return {"promoted": v.id, "run_dir": display_path(out),
                "summary": f"promoted {v.label()}: step {fmt_speedup(v.step)} over {v.parent}"}


def _why_none(advice: Sequence[Advice]) -> str:
    best = next((a for a in advice if a.bound_mixture is not None), None)
    if best is None:
        return "no sweep's evidence is in the profile"
    if best.status == "tried":
        return (f"every sweep above it has run against this baseline; the best, +sweep="
                f"{best.sweep}: {best.line}")
    return f"the best is +sweep={best.sweep} ({best.status.replace('_', ' ')}): {best.line}"


def log_lines(state: AutopilotState) -> list[str]:
    """decisions.md of an autopilot: its settings, every step, why it stopped."""
    s = state["settings"]
    me = "the protocol's" if s["min_effect"] is None else f"{s['min_effect']:g}"
    out = [f"# Autopilot: {s['workload']}", "",
           (f"Budget: at most {s['max_campaigns']} sweep campaign(s) and {s['budget_s']:.0f} s of "
           f"steps; min_effect: {me}; ledger: {display_path(s['baselines_dir'])}; overrides: "
           f"{' '.join(s['overrides']) or 'none'}; started {state['started_at']}, invocation "
           f"{state.get('invocations', 1)}."), "",
           "| step | against | status | what happened | time |", "|---|---|---|---|---:|"]
    for r in state["steps"]:
        res = r.get("result") or {}
        what = str(res.get("summary") or "").replace("|", "\\|")
        if res.get("rebased"):
            what += f" ({res['rebased']})"
        where = res.get("run_dir") or res.get("file")
        if where:
            what += f" — `{where}`"
        status = r["status"] + (f" (resumed {r['resumed']}x)" if r.get("resumed") else "")
        out.append(f"| {r['key']} | {r['against']} | {status} | {what} | "
                   f"{float(r.get('elapsed_s') or 0):.0f} s |")
    stopped = state.get("stopped")
    if stopped:
        out += ["", f"Stopped after {len(state['steps'])} step(s): {stopped['reason']}."]
    return out
