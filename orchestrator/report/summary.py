"""summary.md and a self-contained summary.html of one campaign, from one document model.

A document is a list of blocks; :func:`to_markdown` and :func:`to_html` render the same
blocks, so the two never drift apart. The HTML inlines its images (base64), one file to share.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.analysis.decisions_md import group_warnings
from orchestrator.core import records
from orchestrator.core.records import Decision, PlanDoc, RunDirectory
from orchestrator.report import plots
from orchestrator.report.load import Campaign, load_steps
from orchestrator.spec.ledger import LINEAGE_FILE, fmt_speedup, lineage_path


@dataclass
class Block:
    kind: str  # h1 | h2 | p | table | img | ul | details (collapsible list in HTML)
    text: str = ""
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    items: list[str] = field(default_factory=list)
    path: str = ""  # img: relative to the campaign directory


def _num(x: Any, fmt: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return format(x, fmt)


def verdict_table(decisions: Sequence[Decision]) -> Block:
    rows = []
    for d in decisions:
        sp = d.get("speedups") or {}
        head = sp.get("mixture") or next((v for v in sp.values() if v), None)
        ratio = f"{head['speedup']:.3f}x [{head['low']:.3f}, {head['high']:.3f}]" if head else "—"
        rows.append([d.label, d.verdict.value, ratio, d.headline or "; ".join(d.reasons[:1])])
    return Block("table", headers=["variant", "verdict", "speedup [CI]", "in one line"], rows=rows)


def verdict_details(decisions: Sequence[Decision]) -> list[Block]:
    """Per variant: its reasons, then its warnings (grouped), each list collapsible in HTML."""
    out = []
    for d in decisions:
        label = f"{d.label}: {d.verdict}"
        out.append(Block("details", f"{label}: reasons", items=list(d.reasons)))
        warns = group_warnings(list(d.warnings))
        if warns:
            out.append(Block("details", f"{label}: warnings ({len(warns)})", items=warns))
    return out


def results_table(results: pd.DataFrame) -> Block:
    rows = []
    for r in results.to_dict("records"):
        sp = r.get("speedup")
        ratio = (f"{sp:.3f}x [{r['speedup_low']:.3f}, {r['speedup_high']:.3f}]"
                 if sp is not None and not (isinstance(sp, float) and math.isnan(sp)) else "—")
        med = r.get("step_time_median_s")
        mem = r.get("peak_mem_bytes")
        rows.append([
            str(r.get("bucket")), str(r.get("arm_label")),
            _num(None if med is None else med * 1e3, ".2f"),
            _num(r.get("tokens_per_s"), ",.0f"), ratio, f"{r.get('ok')}/{r.get('trials')}",
            _num(None if mem is None else mem / 2**20, ".0f"),
        ])
    return Block("table", headers=["bucket", "arm", "median step (ms)", "tokens/s",
                                   "speedup [CI]", "ok trials", "peak mem (MiB)"], rows=rows)


def trials_line(run_dir: Path, plan: PlanDoc) -> str:
    """The plan's trials and how many ran: a trial re-run after a harness failure or under
    interference ran more than once (its earlier attempts lie beside it, attempt<N>.json)."""
    ids = plan.trial_ids()
    rd = RunDirectory(run_dir)
    done = sum(1 for t in ids if (rd.trial_dir(t) / records.TRIAL).is_file())
    again = sum(len(list(rd.trial_dir(t).glob("attempt*.json"))) for t in ids)
    if not again and done == len(ids):
        return f"trials planned: {len(ids)}, all run once"
    return (f"trials planned: {len(ids)}; runs: {done + again}"
            + (f" ({again} re-run(s) after a harness failure or under interference; see "
               "decisions.md, Trials re-run)" if again else "")
            + (f"; {len(ids) - done} not run" if done < len(ids) else ""))


def build_document(c: Campaign, *, with_plots: bool = True) -> list[Block]:
    sweep = c.sweep
    protocol = c.config.get("protocol") or {}
    buckets = [b["name"] for b in c.plan.buckets]
    arms = list(c.plan.arms)
    doc = [
        Block("h1", f"Summary: {sweep.get('name', '?')} on {c.workload}"),
        Block("p", f"Hypothesis: {str(sweep.get('hypothesis', '')).strip()}"),
        Block("ul", items=[
            f"variable: {sweep.get('variable')}",
            "arms: " + ", ".join(a["label"] + (" (baseline)" if a.get("is_baseline") else "")
                                 for a in arms),
            f"buckets: {', '.join(buckets)}",
            trials_line(c.run_dir, c.plan),
            f"source commit: {c.source.get('commit', 'unknown')}",
        ]),
        Block("h2", "Verdicts"),
        verdict_table(c.decisions),
        *verdict_details(c.decisions),
    ]
    floors = next((d.get("noise_floor") for d in c.decisions if d.get("noise_floor")), None)
    if isinstance(floors, dict):
        doc.append(Block("p", "A/A control (the baseline against itself), |A/A speedup - 1|: "
                         + ", ".join(f"{k} {v:.1%}" for k, v in floors.items() if v is not None)
                         + " (a calibration check, not a threshold)"))
    doc += lineage_blocks(c.run_dir, with_plots)
    if not c.results.empty:
        doc += [Block("h2", "Per bucket and arm"), results_table(c.results)]
    if with_plots:
        doc += plot_blocks(c, buckets, arms, protocol)
    doc += [Block("p", "Full evidence: decisions.md, results.csv, trials/<trial_id>/ "
                       "(trial.json, steps.csv).")]
    return doc


def lineage_blocks(run_dir: Path, with_plots: bool) -> list[Block]:
    """A campaign run against a baseline version (lineage.json): the path v0 -> ... -> vN,
    each step's measured speedup and the measured cumulative one, and the lineage plot."""
    path = run_dir / LINEAGE_FILE
    if not path.is_file():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    rows = []
    for v in doc.get("versions", []):
        ch = v.get("change")
        step = v.get("step_speedup")
        rows.append([v["version"], f"+{ch['label']}" if ch else "—",
                     fmt_speedup(step) + (f" ({step['scope']})" if step else ""),
                     str((step or {}).get("run_dir") or "—"),
                     fmt_speedup(v.get("cumulative"))])
    cum = (doc.get("cumulative") or {}).get("speedup")
    out = [Block("h2", "Baseline lineage"),
           Block("p", f"Ran against {doc.get('version')}: {lineage_path(doc)}"),
           Block("table", headers=["version", "change", "step speedup over parent [CI]",
                                   "measured in", "cumulative against v0 [CI] (verify)"],
                 rows=rows),
           Block("p", f"Cumulative against v0, measured end to end: {fmt_speedup(cum)}"
                      f" ({cum.get('scope')})" if cum else
                      "Cumulative against v0: not measured yet (python -m orchestrator.baseline "
                      "verify); the steps are not multiplied.")]
    if with_plots:
        pdir = run_dir / "plots"
        pdir.mkdir(exist_ok=True)
        made = plots.lineage(doc, pdir / "lineage.png")
        if made is not None:
            out.append(Block("img", "Baseline lineage", path=str(made.relative_to(run_dir))))
    return out


def plot_blocks(c: Campaign, buckets: list[str], arms: Sequence[Mapping[str, Any]],
                protocol: dict[str, Any]) -> list[Block]:
    pdir = c.run_dir / "plots"
    pdir.mkdir(exist_ok=True)
    steps = load_steps(c.run_dir)
    min_effect = protocol.get("min_effect")
    # per bucket and the mixture (a single number in older decisions.jsonl)
    noise = next((d.get("noise_floor") for d in c.decisions if d.get("noise_floor")), None)
    aa = next((d.get("aa_control") for d in c.decisions if d.get("aa_control")), None)
    made = [
        ("Step time distributions", plots.step_distributions(steps, arms, pdir / "step_times.png")),
        ("Speedup with intervals", plots.forest(
            c.decisions, buckets, pdir / "speedup_forest.png",
            threshold=None if min_effect is None else 1 + float(min_effect),
            noise_floor=noise,
            aa={k: v.get("aa") for k, v in aa.items()} if isinstance(aa, dict) else None,
            ni_margin=protocol.get("ni_margin", 0.05))),
        ("Step time over the run", plots.timeline(steps, arms, pdir / "timeline.png")),
        ("Peak memory", plots.memory(c.results, pdir / "memory.png")),
        ("Phase breakdown", plots.phase_breakdown(c.run_dir, pdir / "phases.png")),
    ]
    out = [Block("h2", "Plots")]
    for title, path in made:
        if path is not None:
            out.append(Block("img", title, path=str(path.relative_to(c.run_dir))))
    return out if len(out) > 1 else []


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Sequence[Block]) -> str:
    out: list[str] = []
    for b in doc:
        if b.kind == "h1":
            out += [f"# {b.text}", ""]
        elif b.kind == "h2":
            out += [f"## {b.text}", ""]
        elif b.kind == "p":
            out += [b.text, ""]
        elif b.kind == "ul":
            out += [f"- {i}" for i in b.items] + [""]
        elif b.kind == "table":
            out.append("| " + " | ".join(b.headers) + " |")
            out.append("|" + "---|" * len(b.headers))
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif b.kind == "img":
            out += [f"### {b.text}", "", f"![{b.text}]({b.path})", ""]
        elif b.kind == "details":
            out += [f"**{b.text}**", ""] + [f"- {i}" for i in b.items] + [""]
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;
padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}img{max-width:100%}
.retain{color:#1b7a3a;font-weight:bold}.reject{color:#b22;font-weight:bold}
.inconclusive{color:#666;font-weight:bold}.invalid{color:#8a5a00;font-weight:bold}
.equivalent{color:#2a5db0;font-weight:bold}details{margin:.3em 0}summary{cursor:pointer}"""


def to_html(doc: Sequence[Block], base: Path) -> str:
    e = html.escape
    title = next((b.text for b in doc if b.kind == "h1"), "Summary")
    out = ["<!doctype html>", "<html><head><meta charset='utf-8'>",
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>"]
    for b in doc:
        if b.kind in ("h1", "h2"):
            out.append(f"<{b.kind}>{e(b.text)}</{b.kind}>")
        elif b.kind == "p":
            out.append(f"<p>{e(b.text)}</p>")
        elif b.kind == "ul":
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>")
        elif b.kind == "table":
            head = "".join(f"<th>{e(h)}</th>" for h in b.headers)
            body = []
            for row in b.rows:
                cells = []
                for h, c in zip(b.headers, row):
                    cls = f" class='{e(c)}'" if h == "verdict" else ""
                    cells.append(f"<td{cls}>{e(c)}</td>")
                body.append("<tr>" + "".join(cells) + "</tr>")
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
        elif b.kind == "details":
            out.append(f"<details><summary>{e(b.text)}</summary><ul>"
                       + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul></details>")
        elif b.kind == "img":
            data = base64.b64encode((base / b.path).read_bytes()).decode("ascii")
            out.append(f"<h3>{e(b.text)}</h3><img alt='{e(b.text)}' "
                       f"src='data:image/png;base64,{data}'>")
    out.append("</body></html>")
    return "\n".join(out)


def render_summary(c: Campaign, *, with_plots: bool, force: bool) -> bool:
    """Write summary.md/html unless they are newer than the campaign's files. True if written."""
    md_path, html_path = c.run_dir / "summary.md", c.run_dir / "summary.html"
    if not force and md_path.exists() and html_path.exists():
        if md_path.stat().st_mtime >= c.input_mtime():
            return False
    doc = build_document(c, with_plots=with_plots)
    md_path.write_text(to_markdown(doc), encoding="utf-8")
    html_path.write_text(to_html(doc, c.run_dir), encoding="utf-8")
    return True
