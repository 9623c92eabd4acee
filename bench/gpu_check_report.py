"""The report of bench/gpu_check.sh, from what its parts left in the output directory.

    python bench/gpu_check_report.py OUT DEVICE ELAPSED_S

Writes ``OUT/report.md`` (also printed), ``OUT/figures.json`` (every figure the report gives,
for a reader who wants numbers, not prose) and ``OUT/decisions.md`` (every campaign's
decisions.md, one after another). It reads ``steps.tsv`` (one line per part: name, status,
seconds, log, cap, limit, processes left behind), ``machine.json``, ``machine_static.json``
and ``machine_samples.csv`` (bench/gpu_run/machine_sampler.py), ``environment.json``, the
peak_matmul and simulate logs, ``noise_model.json``, ``kernels.json`` and, per campaign, its
trials (trial.json, steps.csv), ``decisions.jsonl``, ``utilization.json`` and ``plan.json``.
A part that failed or hit its limit is reported with the tail of its log; a figure that is
missing says where to look. On the CPU (the dry run) every figure is the CPU's, and the
report says so at the top.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

# run as a script (python bench/gpu_check_report.py): the repository root is not on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CAMPAIGNS = ("noise", "fa2_tiling", "client", "process")
TAIL = 6
POWER = 0.8  # the minimum detectable effect: the smallest planted effect decided right this often
# nvidia-smi's clock-event (throttle) reason bits
REASONS = {0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap",
           0x8: "HwSlowdown", 0x10: "SyncBoost", 0x20: "SwThermalSlowdown",
           0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown", 0x100: "DisplayClockSetting"}
FLOPS_NOTE = ("attention TFLOP/s = 7 x micro_batch x seq_len^2 x d_model / median call time: "
              "forward and backward, the causal half of the score square (forward 2 matmuls, "
              "backward 2.5x the forward), the FA2 paper's convention")


# ----------------------------------------------------------------------------- reading

def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _tail(out: Path, log: str) -> list[str]:
    return [f"    | {line}" for line in _read_text(out / log).splitlines()[-TAIL:]]


def _trials(run_dir: Path) -> list[dict[str, Any]]:
    return [t for t in (_read_json(p) for p in sorted(run_dir.glob("trials/*/trial.json")))
            if isinstance(t, dict)]


def _steps_csv(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return []


def _float(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# ----------------------------------------------------------------------------- pure figures

def robust_sd(xs: list[float]) -> float | None:
    """1.4826 x the median absolute deviation (None for fewer than 2 values)."""
    if len(xs) < 2:
        return None
    med = statistics.median(xs)
    return 1.4826 * statistics.median([abs(x - med) for x in xs])


def _pct(x: Any, digits: int = 2) -> str:
    return "—" if x is None else f"{float(x) * 100:.{digits}f}%"


def _ms(x: Any) -> str:
    return "—" if x is None else f"{float(x) * 1e3:.3f} ms"


def parts(out: Path) -> list[dict[str, Any]]:
    """steps.tsv's rows: name, status, seconds, log, cap_s, limit_s, left_behind."""
    rows = []
    for line in _read_text(out / "steps.tsv").splitlines():
        f = (line.split("\t") + [""] * 7)[:7]
        rows.append({"name": f[0], "status": f[1], "seconds": _float(f[2]), "log": f[3],
                     "cap_s": _float(f[4]), "limit_s": _float(f[5]),
                     "left_behind": int(f[6]) if f[6].strip().isdigit() else None})
    return rows


def reasons(mask: str) -> list[str]:
    """The names of the clock-event reason bits set in nvidia-smi's hex mask."""
    try:
        bits = int(mask, 16)
    except (TypeError, ValueError):
        return []
    return [name for bit, name in REASONS.items() if bits & bit]


def sample_summary(rows: list[dict[str, str]]) -> dict[str, Any]:
    """Per part and over the run: min, median, max of every numeric column of the samples;
    the clock-event reasons seen (GPU)."""
    numeric: dict[str, dict[str, list[float]]] = {}
    seen: dict[str, set[str]] = {}
    for r in rows:
        part = r.get("part") or "?"
        for k, v in r.items():
            if k in ("t_s", "part"):
                continue
            if "reasons" in k:
                for name in reasons(v):
                    seen.setdefault(part, set()).add(name)
                    seen.setdefault("all", set()).add(name)
                continue
            x = _float(v)
            if x is not None:
                numeric.setdefault(part, {}).setdefault(k, []).append(x)
                numeric.setdefault("all", {}).setdefault(k, []).append(x)
    out: dict[str, Any] = {}
    for part, cols in numeric.items():
        out[part] = {k: {"min": min(v), "median": statistics.median(v), "max": max(v),
                         "n": len(v)} for k, v in cols.items()}
        if part in seen:
            out[part]["clock_event_reasons"] = sorted(seen[part])
    return out


def noise_figures(trials: list[dict[str, Any]], steps: dict[str, list[dict[str, str]]]
                  ) -> dict[str, Any]:
    """The noise part's figures from its ok timed trials (one process each) and their
    steps.csv: the in-process step-to-step spread (per process, the robust SD of its measured
    steps' log times; the median over processes), the per-process offsets (each process's log
    median less the median over all) and their robust SD, and device events against the host
    clock (which timed the steps, the device time over the host's launch time, the device's
    per-step time against the step time)."""
    ok = [t for t in trials if t.get("status") == "ok" and t.get("kind", "timed") == "timed"]
    within, medians, device_ratio = [], {}, []
    timed_by: dict[str, int] = {}
    agreement = []
    for t in ok:
        rows = [r for r in steps.get(str(t.get("trial_id")), []) if r.get("phase") == "measured"]
        xs = [math.log(v) for v in (_float(r.get("step_time_s")) for r in rows) if v and v > 0]
        if len(xs) >= 2:
            sd = robust_sd(xs)
            if sd is not None:
                within.append(sd)
        if xs:
            medians[str(t.get("trial_id"))] = statistics.median(xs)
        dev = [(_float(r.get("device_time_s")), _float(r.get("step_time_s"))) for r in rows]
        device_ratio += [d / s for d, s in dev if d and s]
        word = str(t.get("timed_by") or "not recorded")
        timed_by[word] = timed_by.get(word, 0) + 1
        if _float(t.get("device_host_agreement")) is not None:
            agreement.append(float(t["device_host_agreement"]))
    grand = statistics.median(medians.values()) if medians else None
    offsets = {k: v - grand for k, v in medians.items()} if grand is not None else {}
    return {
        "processes": len(ok),
        "arms": sorted({str(t.get("arm_label")) for t in ok}),
        "step_time_median_s": math.exp(grand) if grand is not None else None,
        "step_sd_log_median": statistics.median(within) if within else None,
        "process_offsets_log": offsets,
        "process_sd_log": robust_sd(list(offsets.values())),
        "process_offset_range_log": ([min(offsets.values()), max(offsets.values())]
                                     if offsets else None),
        "timed_by": timed_by,
        "device_host_agreement_median": statistics.median(agreement) if agreement else None,
        "device_over_step_median": statistics.median(device_ratio) if device_ratio else None,
        "steps_with_device_time": len(device_ratio),
    }


_ROW = re.compile(r"^\|\s*(A/A|[0-9.]+x)\s*\|")


def simulation_tables(text: str) -> list[dict[str, Any]]:
    """bench/simulate_rule.py's output: per table its title and rows (planted speedup, the
    verdict counts, correct share, wrong direction, false decisions, trials per campaign), and
    the minimum detectable effect: the smallest planted effect decided the right way in at
    least POWER of the campaigns in both directions (None: none of those planted)."""
    tables: list[dict[str, Any]] = []
    for line in text.splitlines():
        if line.rstrip().endswith("):") and "campaigns per cell" in line:
            tables.append({"title": line.rstrip().rstrip(":"), "rows": []})
            continue
        m = _ROW.match(line)
        if not (m and tables):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 13:
            continue
        planted = 1.0 if cells[0] == "A/A" else float(cells[0].rstrip("x"))
        n = int(cells[1])
        tables[-1]["rows"].append({
            "planted": planted, "n": n, "retain": int(cells[2]), "reject": int(cells[3]),
            "equivalent": int(cells[4]), "inconclusive": int(cells[5]), "invalid": int(cells[6]),
            "correct": float(cells[7].rstrip("%")) / 100, "wrong_direction": int(cells[8]),
            "false_decision": int(cells[9]), "false_equivalent": int(cells[10]),
            "trials_per_campaign": float(cells[11])})
    for t in tables:
        t["mde"] = mde(t["rows"])
    return tables


def mde(rows: list[dict[str, Any]]) -> float | None:
    """The smallest |effect| (a fraction: 0.05 = 5 %) whose faster and slower plants were both
    decided the right way in at least POWER of the campaigns; None when none was."""
    by: dict[float, list[float]] = {}
    for r in rows:
        if r["planted"] == 1.0:
            continue
        # 1.05x and 0.952x (1 / 1.05, printed to three places) are one effect size, 5 %
        size = round(max(r["planted"], 1 / r["planted"]) - 1, 2)
        by.setdefault(size, []).append(r["correct"])
    for size in sorted(by):
        if len(by[size]) == 2 and min(by[size]) >= POWER:
            return size
    return None


# ----------------------------------------------------------------------------- sections

def header(out: Path, device: str, elapsed_s: float, rows: list[dict[str, Any]],
           env: Any) -> list[str]:
    failed = [r for r in rows if r["status"] != "ok"]
    sel = (env or {}).get("selected_device") if isinstance(env, dict) else None
    name = (sel or {}).get("name") or ("the CPU" if device == "cpu" else "GPU not identified")
    lines = [f"# gpu_check: {'all parts ok' if not failed else f'{len(failed)} part(s) not ok'}",
             ""]
    if device == "cpu":
        lines += [("**A dry run on the CPU: every figure below is the CPU's (tiny sizes, "
                  "in-process trials), not a GPU's. It shows that every part runs and every "
                  "section is written.**"), ""]
    lines += [(f"device={device} ({name}); {elapsed_s:.0f} s from the start to the report; "
              f"output: {out}"), "",
              "| part | cap s | limit s | status | s | left behind | log |",
              "|---|---:|---:|---|---:|---:|---|"]
    for r in rows:
        lb = "—" if r["left_behind"] is None else str(r["left_behind"])
        lines.append(f"| {r['name']} | {r['cap_s'] or 0:g} | {r['limit_s'] or 0:g} | "
                     f"{r['status']} | {r['seconds'] or 0:g} | {lb} | {r['log']} |")
    caps = sum(r["cap_s"] or 0 for r in rows)
    lines += ["", (f"Caps of the parts listed: {caps:g} s (the plan: bench/gpu_check.sh's header). "
              "A part stopped at its limit says `timeout`; 'left behind' counts the processes "
              "it left running, ended by bench/gpu_run/reap.py.")]
    for r in failed:
        if r["log"].startswith("logs/"):
            lines += ["", f"{r['name']} ({r['status']}), last lines of {r['log']}:",
                      *_tail(out, r["log"])]
    return lines


def machine(out: Path) -> list[str]:
    """What the check found on the machine and what it installed."""
    m = _read_json(out / "machine.json")
    if not isinstance(m, dict):
        return ["- no machine.json (see logs/imports.log)"]
    pk = m.get("packages") or {}
    own = [f"{d} {v['version']}" for d, v in sorted(pk.items()) if v.get("from") == "machine"]
    wheel = [f"{d} {v['version']}" for d, v in sorted(pk.items()) if v.get("from") == "wheel"]
    return [f"- python: {m.get('python')} ({m.get('python_version')}), {m.get('platform')}",
            (f"- torch {m.get('torch')} (CUDA build: {m.get('torch_cuda')}); device kinds: "
            f"{', '.join(m.get('device_kinds') or [])}; triton: "
            f"{(m.get('optional') or {}).get('triton')}"),
            f"- the machine's own: {', '.join(own) or 'none'}",
            (f"- installed from the carried wheels ({m.get('wheels')}): "
            f"{', '.join(wheel) or 'nothing (the machine had everything)'}"),
            f"- package registry: {m.get('registry')}"]


def samples_section(out: Path, device: str) -> tuple[list[str], dict[str, Any]]:
    static = _read_json(out / "machine_static.json") or {}
    rows = _steps_csv(out / "machine_samples.csv")
    summary = sample_summary(rows)
    lines = []
    if device == "cpu":
        lines.append("- the CPU's samples (a dry run: no GPU, no nvidia-smi): load, core "
                     "clocks, memory available")
    facts = {k: v for k, v in static.items() if k not in ("sampled_fields",)}
    lines.append("- facts: " + ("; ".join(f"{k} {v}" for k, v in facts.items()) or
                                "none (see logs/sampler.log)"))
    if not rows:
        lines.append("- no samples (see logs/sampler.log)")
        return lines, {"static": static, "samples": 0}
    t_end = _float(rows[-1].get("t_s")) or 0.0
    lines.append(f"- {len(rows)} samples over {t_end:.0f} s, every {static.get('every_s')} s "
                 "(machine_samples.csv; each row names the part running)")
    keys = ([k for k in ("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw",
                         "utilization.gpu", "memory.used") if k in rows[0]]
            if device != "cpu" else ["load1", "cpu_mhz_mean", "mem_available_mib"])
    if not keys:
        lines.append("- none of the expected figures among the samples (see machine_samples.csv)")
        return lines, {"static": static, "samples": len(rows), "per_part": summary}
    order = ["all"] + [p for p in dict.fromkeys(r.get("part") or "?" for r in rows)]
    lines += ["", "| part | " + " | ".join(f"{k} median [min, max]" for k in keys)
              + " | clock-event reasons |", "|---|" + "---|" * (len(keys) + 1)]
    for part in order:
        s = summary.get(part)
        if not s:
            continue
        cells = []
        for k in keys:
            f = s.get(k)
            cells.append("—" if not f else f"{f['median']:.4g} [{f['min']:.4g}, {f['max']:.4g}]")
        lines.append(f"| {part} | " + " | ".join(cells) + " | "
                     + (", ".join(s.get("clock_event_reasons", [])) or "—") + " |")
    return lines, {"static": static, "samples": len(rows), "per_part": summary}


def environment(out: Path) -> list[str]:
    report = _read_json(out / "environment.json")
    if not isinstance(report, dict):
        return ["- no environment.json (see logs/env_report.log)"]
    from orchestrator.cli.tools.env_report import summary_lines

    lines = [f"- {line}" for line in summary_lines(report, 0.0)[:-1]]
    usable = (report.get("attention") or {}).get("sdpa_usable") or {}
    if usable:
        lines.append("- sdpa kernels usable: " + "; ".join(
            f"{k}: {', '.join(v) or 'none'}" for k, v in sorted(usable.items())))
    return lines


def peak_matmul(out: Path) -> tuple[list[str], dict[str, Any]]:
    text = _read_text(out / "logs" / "peak_matmul.log")
    keep = [ln for ln in text.splitlines() if ln.startswith(("device:", "fp32:", "bf16:"))]
    peaks = {}
    for ln in keep:
        m = re.match(r"^(fp32|bf16): measured ([0-9.eE+-]+) TFLOP/s", ln)
        if m:
            peaks[m.group(1)] = float(m.group(2))
    return ([f"- {ln}" for ln in keep] or ["- no peak_matmul figures (see logs/peak_matmul.log)"],
            {"measured_tflops": peaks})


def decisions(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in _read_text(run_dir / "decisions.jsonl").splitlines()
            if raw.strip()]


def budget_stop(run_dir: Path) -> str | None:
    plan = _read_json(run_dir / "plan.json") or {}
    for entry in ((plan.get("cost") or {}).get("log") or []):
        if isinstance(entry, dict) and entry.get("budget_stop"):
            return str(entry["budget_stop"])
    return None


def campaign_lines(run_dir: Path, trials: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """A campaign's trials, verdicts with their intervals, the A/A check, the rounds, a
    budget's stop, the clocks that timed it, MFU and what each arm ran."""
    fig: dict[str, Any] = {}
    statuses: dict[str, int] = {}
    for t in trials:
        statuses[str(t.get("status", "?"))] = statuses.get(str(t.get("status", "?")), 0) + 1
    timed = [t for t in trials if t.get("kind", "timed") == "timed"]
    procs = {t.get("paired_process") or t.get("trial_id") for t in timed if t.get("status") == "ok"}
    rounds = sorted({int(t["round"]) for t in timed if isinstance(t.get("round"), int)})
    fig.update(trials=statuses, processes=len(procs), rounds=len(rounds))
    lines = ["- trials: " + (", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
                             or "none written")
             + f"; {len(procs)} timed process(es), {len(rounds)} round(s)"]
    bad = [t for t in trials if t.get("status") != "ok"]
    if bad:
        err = str(bad[0].get("error") or "").splitlines()
        lines.append(f"- first non-ok trial: `{bad[0].get('arm_label')}` {bad[0].get('status')}"
                     + (f": {err[0][:200]}" if err else ""))
    clocks: dict[str, int] = {}
    for t in timed:
        if t.get("status") == "ok":
            w = str(t.get("timed_by") or "not recorded")
            clocks[w] = clocks.get(w, 0) + 1
    if clocks:
        agree = [float(t["device_host_agreement"]) for t in timed
                 if _float(t.get("device_host_agreement")) is not None]
        lines.append("- timed by: " + ", ".join(f"{w} ({n})" for w, n in clocks.items())
                     + (f"; device time / host launch time, median {statistics.median(agree):.3f}"
                        if agree else ""))
        fig["timed_by"] = clocks
    stop = budget_stop(run_dir)
    if stop:
        lines.append(f"- stopped by its node-hour budget: {stop}")
        fig["budget_stop"] = stop
    ds = decisions(run_dir)
    if not ds:
        lines.append("- no decisions.jsonl: the campaign did not finish (see its log)")
        fig["verdicts"] = {}
        return lines, fig
    fig["verdicts"] = {}
    for d in ds:
        sp = {k: v for k, v in (d.get("speedups") or {}).items() if v}
        shown = "; ".join(f"{b} x{v['speedup']:.3f} [{v['low']:.3f}, {v['high']:.3f}]"
                          for b, v in sp.items())
        lines.append(f"- `{d.get('label')}`: **{d.get('verdict')}**"
                     + (f" ({shown})" if shown else "") + f" — {d.get('headline', '')}")
        fig["verdicts"][str(d.get("label"))] = {
            "verdict": d.get("verdict"), "headline": d.get("headline"), "speedups": sp,
            "reasons": d.get("reasons"), "rounds_to_resolve": d.get("rounds_to_resolve")}
    aa = next((d.get("aa_control") for d in ds if d.get("aa_control")), None)
    if aa:
        fig["aa_control"] = aa
        scopes = []
        for scope, n in aa.items():
            if isinstance(n, dict):
                iv: dict[str, Any] = n["aa"] if isinstance(n.get("aa"), dict) else {}
                scopes.append(f"{scope}: noise floor {_pct(n.get('noise_floor'))}"
                              + (f", A/A x{iv['speedup']:.3f} [{iv['low']:.3f}, {iv['high']:.3f}]"
                                 if {"speedup", "low", "high"} <= set(iv) else "")
                              + (f" over {n['paired_rounds']} paired round(s)"
                                 if n.get("paired_rounds") else ""))
        lines.append("- A/A control: " + ("; ".join(scopes) or json.dumps(aa)[:300]))
    util = _read_json(run_dir / "utilization.json")
    if isinstance(util, dict) and util.get("peaks"):
        peaks = util["peaks"]
        for p in peaks:
            figure = "none" if p.get("peak_tflops") is None else f"{p['peak_tflops']:.4g} TFLOP/s"
            lines.append(f"- peak `{p['label']}`: {figure} {p.get('dtype')} ({p.get('kind')}, "
                         f"{p.get('hardware')})" + (f" — {p['note']}" if p.get("note") else ""))
        fig["utilization"] = util.get("rows", [])
        for r in util.get("rows", []):
            mfu = ", ".join(f"MFU {_pct((r.get('mfu') or {}).get(p['label']))} vs `{p['label']}`"
                            for p in peaks)
            lines.append(f"  - {r['bucket']} `{r['label']}`: median step "
                         f"{_ms(r.get('step_time_s'))}; {mfu}")
    what = ran(timed)
    if what:
        lines += ["- what each arm ran (trial.json `executes`):", *what]
    return lines, fig


def ran(trials: list[dict[str, Any]]) -> list[str]:
    by: dict[str, list[str]] = {}
    for t in trials:
        if t.get("status") == "ok" and t.get("executes"):
            seen = by.setdefault(str(t.get("arm_label")), [])
            for items in t["executes"].values():
                seen += [str(i) for i in items if str(i) not in seen]
    return [f"  - `{arm}`: {', '.join(items)}" for arm, items in by.items()]


def noise_section(out: Path, device: str) -> tuple[list[str], dict[str, Any]]:
    run_dir = out / "noise"
    trials = _trials(run_dir)
    steps = {str(t.get("trial_id")): _steps_csv(run_dir / "trials" / str(t.get("trial_id"))
                                                 / "steps.csv") for t in trials}
    nf = noise_figures(trials, steps)
    who = "The CPU's" if device == "cpu" else "This GPU's"
    lines = [(f"{who} own noise: gpt_compute +sweep=gpu_noise, three arms that run "
             "the same step (the variant differs in a tile size sdpa never reads, plus the A/A "
             "arm), one arm per fresh process."), "",
             (f"- processes: {nf['processes']} ok (arms {', '.join(nf['arms']) or '—'}); median "
             f"step {_ms(nf['step_time_median_s'])}"),
             (f"- in-process step-to-step spread: {_pct(nf['step_sd_log_median'])} (per process "
             "the robust SD of its measured steps' log times; the median over processes)"),
             f"- between-process spread: {_pct(nf['process_sd_log'])} (robust SD of the "
             "per-process offsets: each process's log median less the median over all)"
             + (f"; offsets from {_pct(nf['process_offset_range_log'][0])} to "
                f"{_pct(nf['process_offset_range_log'][1])}"
                if nf["process_offset_range_log"] else ""),
             "- which clock timed the steps: "
             + (", ".join(f"{w} ({n} processes)" for w, n in nf["timed_by"].items()) or "—")
             + (f"; device time over host launch time, median "
                f"{nf['device_host_agreement_median']:.3f}"
                if nf["device_host_agreement_median"] is not None else
                "; no device events (no device_host_agreement)")
             + (f"; device time per step over the step time, median "
                f"{nf['device_over_step_median']:.4f} over {nf['steps_with_device_time']} steps"
                if nf["device_over_step_median"] is not None else "")]
    camp, cfig = campaign_lines(run_dir, trials)
    lines += ["", "The campaign:", *camp]
    model = _read_json(out / "noise_model.json")
    lines += ["", "The noise model (noise_model.json, bench/noise_model.py):"]
    if isinstance(model, dict):
        keep = ("step_s", "step_sd_log", "process_sd_log", "slow_ratio", "mean_fast_s",
                "mean_slow_s", "outlier_trial_p", "fixed_s", "steps")
        lines.append("- " + ", ".join(f"{k} {model[k]:.4g}" if isinstance(model.get(k), float)
                                      else f"{k} {model.get(k)}" for k in keep))
    else:
        lines.append("- none fitted (see logs/noise_fit.log)")
    sims = simulation_tables(_read_text(out / "logs" / "simulate.log"))
    lines += ["", "The verdict rule on that model (bench/simulate_rule.py, simulate.md):"]
    if not sims:
        lines.append("- no simulation (see logs/simulate.log)")
    for t in sims:
        aa = next((r for r in t["rows"] if r["planted"] == 1.0), None)
        cells = ", ".join(f"{r['planted']:.3f}x {r['correct']:.0%}" for r in t["rows"]
                          if r["planted"] != 1.0)
        lines.append(f"- {t['title']}: A/A false decisions "
                     + (f"{aa['false_decision']}/{aa['n']}, equivalent {aa['equivalent']}/{aa['n']}"
                        if aa else "—")
                     + f"; decided right: {cells}; wrong direction "
                     f"{sum(r['wrong_direction'] for r in t['rows'])}; minimum detectable "
                     f"effect ({POWER:.0%} right, both directions): "
                     + ("beyond the largest planted" if t["mde"] is None else _pct(t["mde"], 0)))
    return lines, {**nf, "campaign": cfig, "noise_model": model, "simulation": sims}


def trainer_section(out: Path, name: str) -> tuple[list[str], dict[str, Any]]:
    run_dir = out / name
    lines, fig = campaign_lines(run_dir, _trials(run_dir))
    v = next(iter((fig.get("verdicts") or {}).values()), None)  # the planted slowdown's
    if v is None:
        lines.append("- **not decided**: the campaign gave no verdict (see its log)")
    elif v["verdict"] in ("reject", "retain") and "failed" in str(v.get("headline")):
        lines.append(f"- **not decided on timing**: {v['verdict']} because trials failed "
                     f"({v.get('headline')}); see the first non-ok trial above")
    elif v["verdict"] in ("reject", "retain"):
        lines.append(f"- **decided**: {v['verdict']} (the planted slowdown is real: reject is "
                     "right)")
    else:
        why = "; ".join([r for r in (v.get("reasons") or [])
                         if not str(r).startswith("WARNING")][:2])
        lines.append(f"- **not decided** ({v['verdict']}): {why[:400]}")
    return lines, fig


def kernels_section(out: Path, peaks: dict[str, float]) -> tuple[list[str], dict[str, Any]]:
    k = _read_json(out / "kernels.json")
    if not isinstance(k, dict):
        return ["- no kernels.json (see logs/kernels.log)"], {}
    dtype = str(k.get("dtype"))
    peak = peaks.get(dtype if dtype in peaks else "fp32")
    lines = [f"- {k['device']['kind']} `{k['device']['name']}`, d_model {k['d_model']}, "
             f"{k['n_head']} heads, {dtype}; against the measured {dtype} matmul peak "
             + (f"{peak:.4g} TFLOP/s" if peak else "(none measured)"), "",
             "| shape | kernel | runs | ms per call | TFLOP/s | of the peak | calls | stopped by |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for r in k.get("results", []):
        shape = f"{r.get('micro_batch')}x{r.get('seq_len')}"
        if r.get("status") != "ok":
            lines.append(f"| {shape} | {r['arm']} | {r.get('runs', '—')} | {r['status']}: "
                         f"{str(r.get('error'))[:120]} | | | | |")
            continue
        share = r["tflops"] / peak if peak and r.get("tflops") else None
        r["peak_share"] = share
        lines.append(f"| {shape} | {r['arm']} | {r['runs']} | {r['call_time_median_s'] * 1e3:.3f} "
                     f"| {r['tflops']:.4g} | {_pct(share, 1)} | {r['calls']} | "
                     f"{r['call_stopped_by']} ({r['call_clock']}) |")
    return lines, {**k, "peak_tflops": peak}


def decisions_bundle(out: Path) -> str:
    parts = ["# Every campaign's decisions.md (bench/gpu_check.sh)", ""]
    for name in CAMPAIGNS:
        text = _read_text(out / name / "decisions.md")
        parts += ["", "---", "", f"# {name}: {name}/decisions.md", "",
                  text.strip() or "(none: the campaign did not finish; see its log)"]
    return "\n".join(parts) + "\n"


def report(out: Path, device: str, elapsed_s: float) -> tuple[list[str], dict[str, Any]]:
    rows = parts(out)
    env = _read_json(out / "environment.json")
    fig: dict[str, Any] = {"device": device, "elapsed_s": elapsed_s, "parts": rows,
                           "figures_are": "the CPU's (dry run)" if device == "cpu" else "the GPU's"}
    lines = header(out, device, elapsed_s, rows, env)
    lines += ["", "## The machine, as this check found it", *machine(out)]
    s_lines, fig["machine_samples"] = samples_section(out, device)
    lines += ["", "## The machine over the run (clocks, temperature, power)", *s_lines]
    lines += ["", "## Environment", *environment(out)]
    p_lines, fig["peak_matmul"] = peak_matmul(out)
    lines += ["", "## Matmul peak (bench/peak_matmul.py)", *p_lines]
    n_lines, fig["noise"] = noise_section(out, device)
    lines += ["", "## The device's own noise (noise, noise_fit, simulate)", "", *n_lines]
    t_lines, fig["fa2_tiling"] = campaign_lines(out / "fa2_tiling", _trials(out / "fa2_tiling"))
    lines += ["", ("## A campaign that decides: the FA2 kernel's tiles, by steps, with the A/A "
              "arm (fa2_tiling)"), *t_lines]
    lines += ["", ("## Your trainer on the device (recipes/examples/gpu_trainer.py, "
              "+sweep=planted_gpu: 7 % more matmul work, some 5 % of a step)")]
    for name, title in (("client", "by steps through orchestrator.client, with the A/A arm"),
                        ("process", "one arm per process, step times from its log")):
        c_lines, fig[name] = trainer_section(out, name)
        lines += ["", f"### {title} ({name})", *c_lines]
    k_lines, fig["kernels"] = kernels_section(out, fig["peak_matmul"]["measured_tflops"])
    lines += ["", "## The attention op alone, the do_bench way (kernels)", *k_lines]
    lines += ["", FLOPS_NOTE + ".",
              "", ("MFU = useful FLOPs / (median step time x the named peak). Details: "
              "decisions.md (every campaign's), figures.json, <part>/decisions.md, "
              "machine_samples.csv, logs/.")]
    return lines, fig


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: gpu_check_report.py OUT DEVICE ELAPSED_S", file=sys.stderr)
        return 2
    out, device, elapsed = Path(argv[0]), argv[1], float(argv[2])
    lines, fig = report(out, device, elapsed)
    text = "\n".join(lines) + "\n"
    _atomic(out / "figures.json", json.dumps(fig, indent=1, default=str))
    _atomic(out / "decisions.md", decisions_bundle(out))
    _atomic(out / "report.md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
