"""``python -m orchestrator.report PATH``: summaries per campaign and the decision log.

PATH is a run directory or a tree of them (such as ``outputs/``). Per campaign it writes
``summary.md``, ``summary.html`` and ``plots/*.png`` (re-rendered only when the campaign's files
changed, or with ``--force``); at PATH it writes ``decision_log.md`` and ``decision_log.csv``
(plus ``results_all.csv``, and Parquet with ``--parquet``). Nothing is read from anywhere but
the run directories.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import logging
import sys
from pathlib import Path

from orchestrator.report.export import (
    ExportError,
    export_mlflow,
    log_frame,
    results_frame,
    write_tables,
)
from orchestrator.core.records import DECISION_LOG, RecordError
from orchestrator.report.load import SchemaMismatch, load_campaigns
from orchestrator.report.log import build_log, render_log
from orchestrator.core.results import VERDICTS
from orchestrator.report.summary import render_summary
from orchestrator.cli.tools._cli import quiet_broken_pipe

log = logging.getLogger("orchestrator.report")



def _date(text: str) -> str:
    try:
        dt.datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date; use YYYY-MM-DD") from None
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="orchestrator-report",
        description="Render campaign summaries and the cross-campaign decision log.",
    )
    p.add_argument("path", type=Path, help="a run directory or a tree of them (e.g. outputs/)")
    p.add_argument("--workload", help="only decisions on this workload")
    p.add_argument("--variable", help="only decisions on this variable (or sweep name)")
    p.add_argument("--verdict", choices=VERDICTS, help="only decisions with this verdict")
    p.add_argument("--since", type=_date, help="only decisions on or after YYYY-MM-DD (UTC)")
    p.add_argument("--until", type=_date, help="only decisions on or before YYYY-MM-DD (UTC)")
    p.add_argument("--no-plots", action="store_true", help="skip plots (faster on big trees)")
    p.add_argument("--no-summaries", action="store_true",
                   help="write only the decision log, not per-campaign summaries")
    p.add_argument("--force", action="store_true", help="re-render summaries even if up to date")
    p.add_argument("--parquet", action="store_true", help="also write Parquet (needs pyarrow)")
    p.add_argument("--mlflow", metavar="URI", nargs="?", const="default",
                   help="export to MLflow (default: a SQLite store mlflow.db beside the "
                        "decision log)")
    p.add_argument("--strict", action="store_true",
                   help="exit 2 when a campaign is skipped (incompatible schema, unreadable)")
    return p


def _default_mlflow_uri(out_dir: Path) -> str:
    """A SQLite store beside the decision log (MLflow's file store is in maintenance mode)."""
    try:
        import sqlalchemy  # noqa: F401
    except ImportError:
        raise ExportError(
            "--mlflow without a URI uses a SQLite store, which needs sqlalchemy: "
            "pip install 'throughput-orchestrator[report]', or pass --mlflow URI"
        ) from None
    return f"sqlite:///{(out_dir / 'mlflow.db').resolve()}"


def main(argv: list[str] | None = None) -> int:
    return quiet_broken_pipe(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root: Path = args.path
    if not root.exists():
        print(f"error: path: {root} does not exist; pass a run directory or outputs/", file=sys.stderr)
        return 2
    # many small, long-lived objects: the cyclic GC's full passes would grow with the tree
    # (quadratic overall); nothing here builds reference cycles worth collecting
    gc.disable()
    try:
        return _run(args, root)
    finally:
        gc.enable()


def _run(args: argparse.Namespace, root: Path) -> int:
    campaigns, skipped = load_campaigns(root)
    for s in skipped:
        log.warning("%s", s)
    if skipped and args.strict:
        print(f"error: {len(skipped)} campaign(s) skipped; first: {skipped[0]}", file=sys.stderr)
        return 2
    if not campaigns:
        print(f"error: path: no campaign run directories under {root} (need plan.json and "
              "decisions.jsonl)", file=sys.stderr)
        return 2
    out_dir = root if root.is_dir() else root.parent
    written = 0
    if not args.no_summaries:
        for c in campaigns:
            try:
                written += render_summary(c, with_plots=not args.no_plots, force=args.force)
            except RecordError as exc:  # a trial.json of another schema or unreadable:
                # never mixed in
                why = "incompatible schema" if isinstance(exc, SchemaMismatch) else "unreadable"
                log.warning("summary not rendered (%s): %s", why, exc)
                if args.strict:
                    print(f"error: {c.run_dir}: {exc}", file=sys.stderr)
                    return 2
    rows = build_log(campaigns, base=out_dir, workload=args.workload, variable=args.variable,
                     verdict=args.verdict, since=args.since, until=args.until)
    (out_dir / DECISION_LOG).write_text(render_log(rows), encoding="utf-8")
    try:
        write_tables({"decision_log": log_frame(rows),
                      "results_all": results_frame(campaigns, out_dir)}, out_dir, args.parquet)
        if args.mlflow:
            uri = _default_mlflow_uri(out_dir) if args.mlflow == "default" else args.mlflow
            n = export_mlflow(campaigns, uri, base=out_dir)
            log.info("mlflow: %d run(s) exported to %s", n, uri)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log.info("%d campaign(s), %d decision(s), %d summary(ies) rendered; log: %s",
             len(campaigns), len(rows), written, out_dir / DECISION_LOG)
    return 0
