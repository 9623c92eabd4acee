"""A trial's attempts: before a re-run the earlier attempt's record and steps move aside
(``attempt<N>.json``, ``attempt<N>.steps.csv``) and its summary joins the trial's
``earlier_attempts``; a contamination re-run that was off too gives its place back to the
first attempt. Nothing measured is lost.
"""

from __future__ import annotations

from pathlib import Path
from orchestrator.campaign.load import interference_of
from orchestrator.core.results import atomic_write_json, read_json
from orchestrator.core.trial_record import AttemptSummary, TrialRecordDict
from orchestrator.launch.base import INFRA_STATUS



def keep_attempt(tdir: Path, contaminated: str | None = None) -> list[AttemptSummary]:
    """Before a re-run: the earlier attempt's record and steps move aside
    (``attempt<N>.json`` and ``attempt<N>.steps.csv``, never read as a trial); returns the
    summaries of every earlier attempt, each with why (``contaminated``: the contamination
    check's reason, for a trial re-run because its median stood out)."""
    rec = read_json(tdir / "trial.json")
    prior = list(rec.get("earlier_attempts") or [])
    attempt = len(prior) + 1  # numbered over every pass and look: none is overwritten
    (tdir / "trial.json").replace(tdir / f"attempt{attempt}.json")
    if (tdir / "steps.csv").exists():  # nothing measured is lost
        (tdir / "steps.csv").replace(tdir / f"attempt{attempt}.steps.csv")
    cores = interference_of(rec).get("others_cores")
    reason = ("contamination" if contaminated else
              "infra" if rec.get("status") == INFRA_STATUS else
              "interference" if cores is not None else str(rec.get("status")))
    why = (contaminated or
           (rec.get("infra_reason") if rec.get("status") == INFRA_STATUS else
            f"interference: other processes took {cores:.2f} cores" if cores is not None else
            rec.get("status")))
    return prior + [{"status": rec.get("status"), "raw_status": rec.get("raw_status"),
                     "infra_reason": rec.get("infra_reason"), "error": rec.get("error"),
                     "others_cores": cores, "reason": reason, "why": why,
                     "step_time_median_s": rec.get("step_time_median_s")}]


def first_attempt_stands(tdir: Path, why: str) -> None:
    """Swap a contamination re-run with the attempt it replaced: that attempt is the trial
    again, the re-run sits in its numbered place (attempt<N>.json, .steps.csv) and its summary
    says why."""
    rerun = read_json(tdir / "trial.json")
    earlier = list(rerun.get("earlier_attempts") or [])
    k = max((i for i, a in enumerate(earlier) if a.get("reason") == "contamination"),
            default=None)
    if k is None or not (tdir / f"attempt{k + 1}.json").exists():
        return
    first = read_json(tdir / f"attempt{k + 1}.json")
    for a, b in ((f"attempt{k + 1}.json", "trial.json"),
                 (f"attempt{k + 1}.steps.csv", "steps.csv")):
        if (tdir / a).exists() or (tdir / b).exists():
            tmp = tdir / f"{b}.swap"
            if (tdir / b).exists():
                (tdir / b).replace(tmp)
            if (tdir / a).exists():
                (tdir / a).replace(tdir / b)
            if tmp.exists():
                tmp.replace(tdir / a)
    summary = {**earlier[k], "status": rerun.get("status"), "raw_status": rerun.get("raw_status"),
               "error": rerun.get("error"), "step_time_median_s": rerun.get("step_time_median_s"),
               "why": f"re-run as {earlier[k].get('why')}; the re-run was off too ({why}), so "
                      "the first attempt stands"}
    first = {**first, "earlier_attempts": earlier[:k] + [summary] + earlier[k + 1:]}
    atomic_write_json(tdir / "trial.json", first)
    atomic_write_json(tdir / f"attempt{k + 1}.json", {**rerun, "earlier_attempts": earlier[:k]})


def with_attempts(tdir: Path, record: TrialRecordDict,
                   earlier: list[AttemptSummary]) -> TrialRecordDict:
    record = {**record, "earlier_attempts": earlier}
    atomic_write_json(tdir / "trial.json", record)
    return record
