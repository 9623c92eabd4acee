"""The compact report of bench/gpu_check.sh, from what its steps left in the output directory.

    python bench/gpu_check_report.py OUT DEVICE WORKLOAD ELAPSED_S > OUT/report.md

Reads ``steps.tsv`` (one line per step: name, status, seconds, log), ``machine.json`` (what
the check found and installed), ``environment.json``, the peak_matmul log and, per campaign,
``decisions.jsonl`` (verdicts, speedups), ``utilization.json`` (absolute step times and MFU
per bucket x arm against every peak, each peak with its kind and figure), the timed trials'
``executes`` (which kernel ran) and the attention microbenchmark trials (the op alone, forward
and backward: its achieved TFLOP/s). A step that failed or ran out of time is reported with the
tail of its log.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

# run as a script (python bench/gpu_check_report.py): the repository root is not on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CAMPAIGNS = ("fa2_tiling", "fa2", "compile")
MICROBENCH = ("fa2_tiling", "fa2")  # campaigns whose attention microbenchmark is reported
TAIL = 6
FLOPS_NOTE = ("attention TFLOP/s = 7 x micro_batch x seq_len^2 x d_model / median call time: "
              "forward and backward, the causal half of the score square (forward 2 matmuls, "
              "backward 2.5x the forward), the FA2 paper's convention")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _tail(out: Path, log: str) -> list[str]:
    try:
        lines = (out / log).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [f"    | {line}" for line in lines[-TAIL:]]


def _pct(x: Any) -> str:
    return "—" if x is None else f"{float(x) * 100:.2f}%"


def steps(out: Path) -> list[tuple[str, str, str, str]]:
    rows = []
    for line in (out / "steps.tsv").read_text(encoding="utf-8").splitlines():
        name, status, seconds, log = (line.split("\t") + ["", "", ""])[:4]
        rows.append((name, status, seconds, log))
    return rows


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


def machine(out: Path) -> list[str]:
    """What the check found on the machine and what it installed (bench/gpu_check.sh)."""
    m = _read_json(out / "machine.json")
    if not isinstance(m, dict):
        return ["- no machine.json (see logs/imports.log)"]
    pk = m.get("packages") or {}
    own = [f"{d} {v['version']}" for d, v in sorted(pk.items()) if v.get("from") == "machine"]
    wheel = [f"{d} {v['version']}" for d, v in sorted(pk.items()) if v.get("from") == "wheel"]
    return [f"- python: {m.get('python')} ({m.get('python_version')}), {m.get('platform')}",
            f"- torch {m.get('torch')} (CUDA build: {m.get('torch_cuda')}); device kinds: "
            f"{', '.join(m.get('device_kinds') or [])}; triton: "
            f"{(m.get('optional') or {}).get('triton')}",
            f"- the machine's own: {', '.join(own) or 'none'}",
            f"- installed from the carried wheels ({m.get('wheels')}): "
            f"{', '.join(wheel) or 'nothing (the machine had everything)'}",
            f"- package registry: {m.get('registry')}",
            "- assumed: the repository root and the wheels' folder on PYTHONPATH serve this "
            "python; device timing is host time around a device synchronisation "
            "(device-event timing through orchestrator.platform.device is not used here yet)"]


def _trials(run_dir: Path) -> list[dict[str, Any]]:
    return [t for t in (_read_json(p) for p in sorted(run_dir.glob("trials/*/trial.json")))
            if isinstance(t, dict)]


def ran(run_dir: Path) -> list[str]:
    """Each arm's description of what its timed steps ran (trial.json ``executes``)."""
    by: dict[str, list[str]] = {}
    for t in _trials(run_dir):
        if t.get("kind", "timed") == "timed" and t.get("status") == "ok" and t.get("executes"):
            seen = by.setdefault(str(t.get("arm_label")), [])
            for items in t["executes"].values():
                seen += [str(i) for i in items if str(i) not in seen]
    return [f"  - `{arm}`: {', '.join(items)}" for arm, items in by.items()]


def attention_alone(out: Path, name: str) -> list[str]:
    """The attention op alone per arm and bucket (sweep.microbench: attention): median call
    time over the rounds and the achieved TFLOP/s (:data:`FLOPS_NOTE`)."""
    run_dir = out / name
    cfg = _read_json(run_dir / "config.json")
    model = ((cfg or {}).get("workload") or {}).get("model") or {}
    d_model = model.get("d_model")
    calls: dict[tuple[str, str], list[float]] = {}
    shape: dict[str, tuple[int, int]] = {}
    bad: dict[str, str] = {}
    for t in _trials(run_dir):
        if t.get("kind") != "microbench":
            continue
        key = (str(t.get("bucket")), str(t.get("arm_label")))
        if t.get("status") == "ok" and t.get("call_time_median_s"):
            calls.setdefault(key, []).append(float(t["call_time_median_s"]))
            shape[key[0]] = (int(t["micro_batch"]), int(t["seq_len"]))
        else:
            err = (str(t.get("error") or "").splitlines() or [""])[0]
            bad[key[1]] = f"{t.get('status')}: {err[:200]}"
    if not calls and not bad:
        return [f"- +sweep={name}: no microbenchmark trials"]
    lines = [f"- +sweep={name}:"]
    for (bucket, arm), secs in sorted(calls.items()):
        med = statistics.median(secs)
        b, t = shape[bucket]
        tflops = (7 * b * t * t * d_model / med / 1e12) if d_model else None
        lines.append(f"  - {bucket} `{arm}`: {med * 1e3:.3f} ms per call (median of "
                     f"{len(secs)} trial(s)), " + ("—" if tflops is None else
                                                   f"{tflops:.4g} TFLOP/s"))
    lines += [f"  - `{arm}`: {why}" for arm, why in sorted(bad.items())]
    return lines


def peak_matmul(out: Path) -> list[str]:
    try:
        text = (out / "logs" / "peak_matmul.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ["- no peak_matmul output"]
    keep = [ln for ln in text.splitlines() if ln.startswith(("device:", "fp32:", "bf16:"))]
    return [f"- {ln}" for ln in keep] or ["- no peak_matmul figures (see logs/peak_matmul.log)"]


def campaign(out: Path, name: str) -> list[str]:
    run_dir = out / name
    lines: list[str] = []
    trials = [_read_json(p) for p in sorted(run_dir.glob("trials/*/trial.json"))]
    statuses: dict[str, int] = {}
    for t in trials:
        if isinstance(t, dict):
            statuses[t.get("status", "?")] = statuses.get(t.get("status", "?"), 0) + 1
    lines.append("- trials: " + (", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
                                 or "none written"))
    bad = [t for t in trials if isinstance(t, dict) and t.get("status") != "ok"]
    if bad:
        b = bad[0]
        err = str(b.get("error") or "").splitlines()
        lines.append(f"- first non-ok trial: `{b.get('arm_label')}` {b.get('status')}"
                     + (f": {err[0][:200]}" if err else ""))
    compiled: dict[str, list[float]] = {}
    cache = "?"
    for t in trials:
        if isinstance(t, dict) and t.get("status") == "ok" and t.get("compile_time_s"):
            compiled.setdefault(str(t.get("arm_label")), []).append(float(t["compile_time_s"]))
            cache = str(t.get("compile_cache", "?"))
    for arm, secs in compiled.items():
        lines.append(f"- `{arm}`: compile time {min(secs):.1f}–{max(secs):.1f} s over {len(secs)} "
                     f"trial(s) (in the excluded warm-up; compile_cache={cache})")
    decisions = run_dir / "decisions.jsonl"
    if not decisions.exists():
        lines.append("- no decisions.jsonl: the campaign did not finish")
        return lines
    for raw in decisions.read_text(encoding="utf-8").splitlines():
        d = json.loads(raw)
        sp = {k: v for k, v in (d.get("speedups") or {}).items() if v}
        shown = "; ".join(f"{b} x{v['speedup']:.3f} [{v['low']:.3f}, {v['high']:.3f}]"
                          for b, v in sp.items())
        lines.append(f"- `{d.get('label')}`: **{d.get('verdict')}**" + (f" ({shown})" if shown else ""))
    util = _read_json(run_dir / "utilization.json")
    if not isinstance(util, dict) or not util.get("peaks"):
        lines.append("- MFU: no peak reported (see utilization.json / decisions.md)")
        return lines
    peaks = util["peaks"]
    for p in peaks:
        fig = "none" if p.get("peak_tflops") is None else f"{p['peak_tflops']:.4g} TFLOP/s"
        note = f" — {p['note']}" if p.get("note") else ""
        lines.append(f"- peak `{p['label']}`: {fig} {p.get('dtype')} ({p.get('kind')}, "
                     f"{p.get('hardware')}){note}")
    for r in util.get("rows", []):
        figs = ", ".join(f"MFU {_pct(r['mfu'].get(p['label']))} / HFU {_pct(r['hfu'].get(p['label']))} "
                         f"vs `{p['label']}` ({p.get('kind')})" for p in peaks)
        t = r.get("step_time_s")
        lines.append(f"  - {r['bucket']} `{r['label']}`: median step "
                     + ("—" if t is None else f"{t * 1e3:.2f} ms") + f"; {figs}")
    what = ran(run_dir)
    if what:
        lines += ["- what each arm ran (trial.json `executes`):", *what]
    return lines


def report(out: Path, device: str, workload: str, elapsed_s: float) -> list[str]:
    rows = steps(out)
    failed = [r for r in rows if r[1] != "ok"]
    lines = [f"# gpu_check: {'all steps ok' if not failed else f'{len(failed)} step(s) not ok'}",
             "", (f"device={device}, workload={workload}, protocol=gpu (2 rounds; compile: quick); "
                  f"{elapsed_s:.0f} s in "
                  f"all; output: {out}"), "", "| step | status | s | log |", "|---|---|---:|---|"]
    lines += [f"| {n} | {s} | {sec} | {log} |" for n, s, sec, log in rows]
    for n, s, _, log in failed:
        if log.startswith("logs/"):
            lines += ["", f"{n} ({s}), last lines of {log}:", *_tail(out, log)]
    lines += ["", "## The machine, as this check found it", *machine(out),
              "", "## Environment", *environment(out), "", "## Matmul peak (bench/peak_matmul.py)",
              *peak_matmul(out)]
    for name in CAMPAIGNS:
        lines += ["", f"## +sweep={name}", *campaign(out, name)]
    lines += ["", "## Attention alone (the sweeps' microbenchmark, forward + backward)", ""]
    for name in MICROBENCH:
        lines += attention_alone(out, name)
    lines += ["", FLOPS_NOTE + "."]
    lines += ["", ("MFU = useful FLOPs / (median step time x the named peak); HFU the same with "
                   "executed (counted) FLOPs. Details: <campaign>/decisions.md, utilization.json.")]
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: gpu_check_report.py OUT DEVICE WORKLOAD ELAPSED_S", file=sys.stderr)
        return 2
    out, device, workload, elapsed = Path(argv[0]), argv[1], argv[2], float(argv[3])
    print("\n".join(report(out, device, workload, elapsed)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
