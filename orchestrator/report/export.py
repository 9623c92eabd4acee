"""Exports: the decision log and per-arm results as CSV and Parquet, and an MLflow export.

Parquet needs pyarrow and MLflow needs mlflow (the ``report`` extra); each raises a one-line
ExportError naming the missing package when it is absent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from orchestrator.core import records
from orchestrator.core.records import Decision
from orchestrator.report.load import Campaign
from orchestrator.report.log import LogRow

log = logging.getLogger(__name__)

CAMPAIGN_TAG = "orchestrator.run_dir"  # the run dir relative to the report root (shown)
KEY_TAG = "orchestrator.decision_key"  # what a re-export is recognised by


def campaign_key(c: Campaign) -> str:
    """Identity of a campaign's decisions, independent of where its run dir lies: a hash of
    its plan and decisions (each decision carries its time). Multirun folders are all named
    like ``0_fa2``, so the folder name cannot tell two campaigns apart; a moved or copied run
    dir is still the same campaign."""
    import hashlib

    h = hashlib.sha256()
    for name in (records.PLAN, records.DECISIONS):
        try:
            h.update((c.run_dir / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()[:20]


class ExportError(RuntimeError):
    pass


def log_frame(rows: Sequence[LogRow]) -> pd.DataFrame:
    return pd.DataFrame([r.to_dict() for r in rows])


def results_frame(campaigns: Sequence[Campaign], base: Path) -> pd.DataFrame:
    frames = []
    for c in campaigns:
        if c.results.empty:
            continue
        df = c.results.copy()
        df.insert(0, "run_dir", str(c.run_dir.relative_to(base)) if c.run_dir != base else ".")
        df.insert(1, "workload", c.workload)
        df.insert(2, "sweep", c.sweep.get("name"))
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def write_tables(frames: dict[str, pd.DataFrame], out_dir: Path, parquet: bool) -> list[Path]:
    written = []
    for name, df in frames.items():
        path = out_dir / f"{name}.csv"
        df.to_csv(path, index=False)
        written.append(path)
        if parquet:
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise ExportError(
                    "--parquet needs pyarrow: pip install 'throughput-orchestrator[report]'"
                ) from None
            ppath = out_dir / f"{name}.parquet"
            df.to_parquet(ppath, index=False)
            written.append(ppath)
    return written


def _metrics(c: Campaign, d: Decision) -> dict[str, float]:
    out: dict[str, float] = {}
    for scope, e in (d.get("speedups") or {}).items():
        if e:
            for k in ("speedup", "low", "high"):
                out[f"{scope}.{'speedup' if k == 'speedup' else 'speedup_' + k}"] = float(e[k])
    if not c.results.empty:
        sel = c.results[c.results["arm_id"] == d.arm_id]
        for r in sel.to_dict("records"):
            for k in ("step_time_median_s", "tokens_per_s", "peak_mem_bytes"):
                v = r.get(k)
                if v is not None and v == v:
                    out[f"{r['bucket']}.{k}"] = float(v)
    return out


def export_mlflow(campaigns: Sequence[Campaign], tracking_uri: str,
                  experiment: str = "throughput-orchestrator", base: Path | None = None) -> int:
    """One MLflow run per decided variant: params, metrics, verdict and the run directory as
    artifacts. Decisions already exported (same campaign, by :func:`campaign_key`, and
    variant) are skipped. ``base``: the report root the run dirs are shown relative to."""
    try:
        import mlflow
    except ImportError:
        raise ExportError(
            "--mlflow needs mlflow: pip install 'throughput-orchestrator[report]'"
        ) from None
    mlflow.set_tracking_uri(tracking_uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp:
        exp_id = exp.experiment_id
    else:
        # a SQLite store keeps its artifacts beside the database, never in the current directory
        location = None
        if tracking_uri.startswith("sqlite:///"):
            location = (Path(tracking_uri[len("sqlite:///"):]).parent / "mlartifacts").resolve().as_uri()
        exp_id = mlflow.create_experiment(experiment, artifact_location=location)
    client = mlflow.MlflowClient()
    made = 0
    for c in campaigns:
        arms = c.plan.arms
        baseline = next((a["label"] for a in arms if a.get("is_baseline")), "?")
        shown = c.run_dir.name
        if base is not None:
            try:
                shown = c.run_dir.resolve().relative_to(Path(base).resolve()).as_posix() or "."
            except ValueError:
                pass
        ckey = campaign_key(c)
        for d in c.decisions:
            key = f"{ckey}/{d.arm_id}"
            found = client.search_runs(
                [exp_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=1
            )
            if found:
                continue
            with mlflow.start_run(experiment_id=exp_id, run_name=f"{c.sweep.get('name')}:{d.label}"):
                mlflow.set_tags({KEY_TAG: key, CAMPAIGN_TAG: f"{shown}/{d.arm_id}",
                                 "verdict": d.verdict.value,
                                 "reasons": "; ".join(d.reasons)[:5000]})
                mlflow.log_params({
                    "workload": c.workload, "sweep": c.sweep.get("name"),
                    "variable": d.get("variable"), "baseline": baseline,
                    "variant": d.label,
                    "buckets": ",".join(b["name"] for b in c.plan.buckets),
                })
                metrics = _metrics(c, d)
                if metrics:
                    mlflow.log_metrics(metrics)
                for name in (records.DECISIONS_MD, records.SUMMARY_MD, records.SUMMARY_HTML,
                             records.RESULTS, records.DECISIONS, records.PLAN, records.CONFIG):
                    if (c.run_dir / name).exists():
                        mlflow.log_artifact(str(c.run_dir / name))
                if (c.run_dir / "plots").is_dir():
                    mlflow.log_artifacts(str(c.run_dir / "plots"), artifact_path="plots")
                if (c.run_dir / records.TRIALS).is_dir():
                    mlflow.log_artifacts(str(c.run_dir / records.TRIALS),
                                         artifact_path=records.TRIALS)
            made += 1
    return made
