"""Promote, confirm and verify (campaign layer): the ledger's steps that read run directories
and run campaigns.

- :func:`check_promotable`: a campaign's variant may become the next version only when it was
  retained (final, every planned trial recorded), its correctness gate passed, the campaign ran
  against the ledger's latest version, and in the ledger's environment. Each refusal is one
  ConfigError naming the problem and the fix (exit 2).
- :func:`confirm`: a fresh campaign with only that variant against the latest version (the
  composed configuration measured against its parent, not a product of earlier speedups). The
  new version file is written after it finished and agreed, atomically; a change that does not
  repeat is recorded under ``experimental/``.
- :func:`verify`: the latest version against v0, end to end; the cumulative speedup with its
  interval is recorded under ``verify/``.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from orchestrator.campaign.render import SpeedupInterval
from orchestrator.campaign.run import run_campaign
from orchestrator.campaign.validate import validate
from orchestrator.core import records
from orchestrator.core.convert import from_dict
from orchestrator.core.errors import ConfigError
from orchestrator.core.trial_record import Fingerprint
from orchestrator.core.records import (
    Decision,
    PlanDoc,
    RecordError,
    RunDirectory,
    VerdictKind,
)
from orchestrator.platform.environment import compare
from orchestrator.report.load import Campaign, load_campaign
from orchestrator.spec.config import Config, SweepConfig
from orchestrator.spec.ledger import (
    LEDGER_SCHEMA,
    LINEAGE_FILE,
    BucketThroughput,
    Justification,
    Ledger,
    LedgerRecord,
    LineageDoc,
    MixtureThroughput,
    StepSpeedup,
    Throughput,
    Version,
    VersionDoc,
    apply_baseline,
    display_path,
    fmt_speedup,
    objective,
    utc_now,
)
from orchestrator.spec.sweep import REVISION
from recipes.registry import workload_from_dict

log = logging.getLogger(__name__)

# a campaign runner: (config, run_dir) -> None; the CLI passes one that sets up logging
Runner = Callable[[Config, Path], Any]


def _default_runner(cfg: Config, run_dir: Path) -> Any:
    return run_campaign(cfg, run_dir)


# --------------------------------------------------------------------------- reading a campaign


@dataclass
class Evidence:
    """What a promotion reads from one campaign's run directory: the campaign as every report
    reads it (orchestrator.report.load), and what only a promotion needs beside it."""

    campaign: Campaign
    fingerprint: Fingerprint | None
    lineage: LineageDoc | None
    missing_trials: list[str] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return self.campaign.run_dir

    @property
    def config(self) -> dict[str, Any]:
        return self.campaign.config

    @property
    def plan(self) -> PlanDoc:
        return self.campaign.plan

    @property
    def decisions(self) -> list[Decision]:
        return self.campaign.decisions

    @property
    def correctness(self) -> dict[str, Any] | None:
        return self.campaign.correctness

    @property
    def workload(self) -> str:
        return str((self.config.get("workload") or {}).get("name"))

    @property
    def against(self) -> str | None:
        return self.config.get("baseline")

    def arm(self, arm_id: str) -> Mapping[str, Any]:
        return self.plan.arm(arm_id)

    def throughput(self, arm_id: str) -> Throughput:
        """Tokens/s and median step time per bucket, and the mixture's tokens/s (total work /
        total time at the buckets' weights), of one arm (results.csv, plan.json)."""
        buckets: dict[str, BucketThroughput] = {}
        for r in self.campaign.results.to_dict("records"):
            if r.get("arm_id") == arm_id and r.get("tokens_per_s") == r.get("tokens_per_s") \
                    and r.get("tokens_per_s"):  # (NaN: not given)
                buckets[str(r["bucket"])] = {
                    "tokens_per_s": float(r["tokens_per_s"]),
                    "step_time_median_s": float(r["step_time_median_s"])}
        work = time = 0.0
        for b in self.plan.buckets:
            got = buckets.get(b["name"])
            if got is None:
                continue
            w = float(b.get("weight", 1.0))
            work += w * b["seq_len"] * b["micro_batch"]
            time += w * got["step_time_median_s"]
        mixture: MixtureThroughput | None = {"tokens_per_s": work / time} if time > 0 else None
        return {"buckets": buckets, "mixture": mixture, "run_dir": display_path(self.run_dir)}


def read_campaign(run_dir: Path) -> Evidence:
    """A finished campaign's evidence; ConfigError when ``run_dir`` is not one."""
    rd = RunDirectory(run_dir)
    if not (run_dir / records.PLAN).is_file() or not (run_dir / records.CONFIG).is_file():
        raise ConfigError("RUN_DIR", f"{run_dir} is not a campaign run directory (no "
                          f"{records.PLAN} or {records.CONFIG}); pass the directory a campaign "
                          "printed at its end")
    if not (run_dir / records.DECISIONS).is_file():
        raise ConfigError("RUN_DIR", f"{run_dir} has no {records.DECISIONS} (the campaign did "
                          "not finish); finish it with resume=RUN_DIR, then promote")
    try:
        campaign = load_campaign(run_dir)
    except RecordError as exc:
        raise ConfigError("RUN_DIR", f"{exc}") from None
    done = rd.final_trial_ids()
    missing = [t for t in campaign.plan.trial_ids() if t not in done]
    env = rd.optional_json(records.ENVIRONMENT) or {}
    fp = env.get("fingerprint") if isinstance(env.get("fingerprint"), dict) else None
    return Evidence(campaign, fp, rd.optional_json(LINEAGE_FILE), missing)


def pinned(ev: Evidence, arm: Mapping[str, Any]) -> dict[str, Any]:
    """The arm's overrides as a version records them: a code revision (source.revision) as
    the commit its trials ran (code.json), never a name such as HEAD that moves on."""
    out = dict(arm["overrides"])
    if REVISION in out:
        code = (RunDirectory(ev.run_dir).optional_json(records.CODE) or {}).get(
            "arms", {}).get(arm["arm_id"], {})
        if code.get("commit"):
            out[REVISION] = code["commit"]
    return out


# --------------------------------------------------------------------------- the checks


def pick_variant(ev: Evidence, label: str | None) -> Decision:
    labels = [d.label for d in ev.decisions]
    if label is not None:
        for d in ev.decisions:
            if d.label == label:
                return d
        raise ConfigError("--variant", f"{label!r} is not a variant of {ev.run_dir.name}; "
                          f"choose one of: {', '.join(labels)}")
    retained = [d for d in ev.decisions if d.verdict is VerdictKind.RETAIN]
    if len(ev.decisions) == 1:
        return ev.decisions[0]
    if len(retained) == 1:
        return retained[0]
    raise ConfigError("--variant", f"{ev.run_dir.name} has {len(ev.decisions)} variants "
                      f"({len(retained)} retained); name one with --variant LABEL, one of: "
                      f"{', '.join(labels)}")


def gate_status(ev: Evidence, arm_id: str) -> str:
    """pass | not_applicable (a recipe without a model to compare, e.g. a numpy load: the gate
    ran and said so); ConfigError when the gate failed or is missing."""
    mode = ((ev.config.get("protocol") or {}).get("correctness") or {}).get("mode")
    doc = ev.correctness
    if mode == "off" or doc is None or doc.get("mode") == "off":
        raise ConfigError("correctness", f"{ev.run_dir.name} has no correctness gate "
                          f"(protocol.correctness.mode={mode}, correctness.json "
                          f"{'missing' if doc is None else 'off'}); a change is promoted only "
                          "when it computes the same: re-run the sweep with "
                          "protocol.correctness.mode=once")
    if doc.get("mode") == "not_applicable":
        return "not_applicable"
    g = (doc.get("arms") or {}).get(arm_id)
    if g is None:
        raise ConfigError("correctness", f"correctness.json of {ev.run_dir.name} has no gate "
                          f"record for {arm_id}; finish the campaign with resume=RUN_DIR")
    if g.get("status") != "pass":
        why = "; ".join(g.get("reasons") or [])[:200] or g.get("status")
        raise ConfigError("correctness", f"the correctness gate says {g.get('status')} for this "
                          f"variant ({why}); a change must compute the same to be promoted: "
                          "fix the variant and run a new campaign")
    return "pass"


def check_promotable(ev: Evidence, ledger: Ledger, label: str | None,
                     force: bool = False) -> tuple[Decision, str]:
    """(the variant's decision, its gate status), or a ConfigError naming what stops it.
    ``force``: promote a retain whose microbenchmark disagrees in direction."""
    d = pick_variant(ev, label)
    name = d.label
    if d.verdict is not VerdictKind.RETAIN:
        raise ConfigError("verdict", f"variant {name!r} was judged {d.verdict}, not "
                          "retain; only a retained change is promoted: try another hypothesis, "
                          "or follow the verdict's advice in decisions.md and re-run")
    chk = d.get("direction_check") or {}
    if chk.get("agrees") is False and not force:
        raise ConfigError("direction", f"the retain of {name!r} disagrees in direction with its "
                          f"microbenchmark ({chk.get('summary')}); see decisions.md's Direction "
                          "check, and pass --force to promote it anyway")
    if not d.final or ev.missing_trials:
        why = (f"{len(ev.missing_trials)} of {len(ev.plan.trials)} planned trials "
               "have no final record (an interrupted campaign)" if ev.missing_trials else
               "it was decided at an early look, before the campaign's last round")
        raise ConfigError("verdict", f"the retain of {name!r} is provisional: {why}; finish the "
                          f"campaign with resume={ev.run_dir.name} (same overrides), then promote")
    gate = gate_status(ev, d.arm_id)
    arm = ev.arm(d.arm_id)
    if arm.get("env"):
        raise ConfigError("--variant", f"{name!r} sets environment switches "
                          f"({', '.join(arm['env'])}), which the ledger does not record yet; "
                          "promote a workload.* change")
    latest = ledger.latest()
    assert latest is not None
    if ev.against is None:
        raise ConfigError("baseline", f"{ev.run_dir.name} ran against no baseline version; "
                          f"re-run the sweep with baseline=latest (now {latest.id}), then promote")
    if ev.against != latest.id or cast(LineageDoc, ev.lineage or {}).get("digest") not in (
            None, latest.digest):
        raise ConfigError("baseline", f"{ev.run_dir.name} was measured against {ev.against}, but "
                          f"the ledger's latest is {latest.id}; re-run the sweep with "
                          "baseline=latest, then promote that campaign")
    check_environment(ev.fingerprint, ledger, ev.run_dir.name)
    return d, gate


def ledger_fingerprint(ledger: Ledger) -> tuple[str, Fingerprint] | None:
    """The environment the ledger was measured in: its latest measured version's."""
    for v in reversed(ledger.versions()):
        if v.fingerprint:
            return v.id, v.fingerprint
    return None


def check_environment(fp: Fingerprint | None, ledger: Ledger, what: str) -> None:
    known = ledger_fingerprint(ledger)
    if known is None:
        return  # v0 is declared, not measured: the first promotion sets the environment
    vid, ref = known
    if fp is None:
        raise ConfigError("environment", f"{what} records no environment fingerprint "
                          "(environment.json); re-run the sweep so that trials report it")
    diff = compare([(vid, ref), (what, fp)])
    if diff:
        raise ConfigError("environment", f"{what} was measured in another environment than "
                          f"{vid} ({'; '.join(x.split(':')[0] for x in diff)} differ); "
                          "measure where the ledger was measured, or start a new ledger "
                          "(baselines_dir=DIR, then init)")


# --------------------------------------------------------------------------- confirm


def config_of(ev: Evidence) -> Config:
    """The campaign's configuration rebuilt from its config.json (plain data, no Hydra)."""
    data = {k: v for k, v in ev.config.items() if k != "schema_version"}
    cfg: Config = from_dict(Config, {**data, "workload": {}})
    cfg.workload = workload_from_dict(data["workload"])
    return cfg


def justification(ev: Evidence, d: Decision, role: str, gate: str) -> Justification:
    return {"role": role, "run_dir": display_path(ev.run_dir), "sweep": ev.plan.get("sweep"),
            "variant": d.label, "verdict": d.verdict.value, "headline": d.headline,
            "speedups": d.get("speedups"), "against": ev.against, "correctness_gate": gate,
            "decided_at": d.decided_at}


@dataclass
class Outcome:
    promoted: Version | None
    confirmation: Path
    record: Path | None = None  # experimental/<...>.json when it did not repeat
    reason: str = ""


def confirm(run_dir: Path, ledger_root: Path, label: str | None, out_dir: Path,
            runner: Runner = _default_runner, force: bool = False) -> Outcome:
    """Check, run the confirmation campaign (only this variant, against the latest version),
    and write the next version only when it agreed; else record the change as experimental."""
    ev = read_campaign(run_dir)
    ledger = Ledger(ledger_root, ev.workload)
    d, gate = check_promotable(ev, ledger, label, force)
    parent = ledger.latest()
    assert parent is not None
    arm = ev.arm(d.arm_id)
    cfg = config_of(ev)
    assert cfg.sweep is not None
    cfg.sweep.values = [arm["value"]]
    cfg.sweep.labels = [str(arm["label"])]
    cfg.baseline, cfg.baselines_dir = parent.id, str(ledger_root)
    cfg.resume, cfg.run_dir = None, str(out_dir)
    apply_baseline(cfg)
    validate(cfg)
    log.info("confirming %r of %s against %s: a fresh campaign in %s", arm["label"],
             run_dir.name, parent.id, out_dir)
    runner(cfg, out_dir)
    again = read_campaign(out_dir)
    d2 = again.decisions[0]
    reason = ""
    gate2 = ""
    try:
        d2, gate2 = check_promotable(again, ledger, str(arm["label"]), force)
    except ConfigError as exc:
        reason = exc.message
    if reason:
        return Outcome(None, out_dir, _experimental(ledger, parent, ev, d, gate, again, d2,
                                                    reason), reason)
    overrides = pinned(ev, arm)
    change = {k: v for k, v in overrides.items() if parent.overrides.get(k) != v}
    data: VersionDoc = {
        "schema_version": LEDGER_SCHEMA, "workload": ev.workload, "version": ledger.next_id(),
        "parent": parent.id, "created_at": utc_now(), "status": "promoted",
        "change": {"label": str(arm["label"]), "sweep": ev.plan.get("sweep"),
                   "variable": (ev.config.get("sweep") or {}).get("variable"),
                   "overrides": change},
        "overrides": {**parent.overrides, **overrides},
        "justification": [justification(ev, d, "discovery", gate),
                          justification(again, d2, "confirmation", gate2)],
        "step_speedup": _step(d2, again, parent.id),
        "throughput": again.throughput(d2.arm_id),
        "parent_throughput": again.throughput(again.plan.arms[0]["arm_id"]),
        "fingerprint": again.fingerprint,
    }
    return Outcome(ledger.write_version(data), out_dir)


def _step(d: Decision, ev: Evidence, against: str | None) -> StepSpeedup | None:
    got = objective(d.get("speedups"))
    if got is None:
        return None
    scope, e = got
    return {"scope": scope, **cast(SpeedupInterval, e), "against": against,
            "run_dir": display_path(ev.run_dir)}


def _experimental(ledger: Ledger, parent: Version, ev: Evidence, d: Decision, gate: str,
                  again: Evidence, d2: Decision, reason: str) -> Path:
    label = d.label
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
    return ledger.write_record("experimental", f"{parent.id}+{safe}-{stamp}", {
        "workload": ev.workload, "status": "experimental", "on_top_of": parent.id,
        "at": utc_now(), "change": {"label": label, "overrides": ev.arm(d.arm_id)["overrides"]},
        "why": f"did not repeat: {reason}",
        "justification": [justification(ev, d, "discovery", gate),
                          justification(again, d2, "confirmation", "")]})


# --------------------------------------------------------------------------- verify


def verify_sweep(v0: Version, latest: Version) -> SweepConfig:
    """One compound knob over every key the lineage changed: v0's values against the latest's."""
    paths = sorted(k for k in set(v0.overrides) | set(latest.overrides)
                   if v0.overrides.get(k) != latest.overrides.get(k))
    if not paths:
        raise ConfigError("baseline", f"{latest.id} sets nothing v0 does not; nothing to verify")
    knob = {f"k{i}": p for i, p in enumerate(paths)}
    return SweepConfig(
        name="baseline_verify", variable="lineage", knob=knob,
        hypothesis=f"{latest.label()} is faster than v0 end to end (composition measured, "
                   "not multiplied)",
        baseline={f"k{i}": v0.overrides.get(p) for i, p in enumerate(paths)},
        values=[{f"k{i}": latest.overrides.get(p) for i, p in enumerate(paths)}],
        baseline_label="v0", labels=[latest.id])


def verify(cfg: Config, ledger_root: Path, out_dir: Path,
           runner: Runner = _default_runner) -> tuple[Path, LedgerRecord]:
    """Run the latest version against v0 (``cfg``: the workload and protocol composed by the
    caller) and record the cumulative speedup under ``verify/``."""
    ledger = Ledger(ledger_root, cfg.workload.name)
    latest = ledger.get("latest")
    v0 = ledger.get("v0")
    if latest.id == "v0":
        raise ConfigError("baseline", "the ledger has only v0; promote a change first")
    cfg.baseline, cfg.baselines_dir = "v0", str(ledger_root)
    cfg.sweep = verify_sweep(v0, latest)
    cfg.resume, cfg.run_dir = None, str(out_dir)
    apply_baseline(cfg)
    validate(cfg)
    runner(cfg, out_dir)
    ev = read_campaign(out_dir)
    check_environment(ev.fingerprint, ledger, out_dir.name)
    d = ev.decisions[0]
    got = objective(d.get("speedups"))
    record: LedgerRecord = {"workload": ledger.workload, "version": latest.id, "against": "v0",
              "at": utc_now(), "run_dir": display_path(out_dir), "verdict": d.verdict.value,
              "headline": d.headline,
              "speedup": None if got is None else {"scope": got[0],
                                                   **cast(SpeedupInterval, got[1])},
              "speedups": d.get("speedups"),
              "throughput": ev.throughput(d.arm_id),
              "v0_throughput": ev.throughput(ev.plan.arms[0]["arm_id"]),
              "fingerprint": ev.fingerprint,
              "steps": [{"version": v.id, "step_speedup": v.step}
                        for v in ledger.chain(latest.id)[1:]]}
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = ledger.write_record("verify", f"{latest.id}-{stamp}", record)
    log.info("verify: %s against v0: %s", latest.id, fmt_speedup(record["speedup"]))
    return path, record
