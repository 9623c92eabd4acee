"""System and kernel layers: the vendor tools, wrapped around a short, bounded run.

- system: ``msys`` (Moore Perf System) or ``nsys`` traces the runtime and the OS around a run of
  ``profile.system_steps`` steps after the warm-up; the report goes to ``profiles/system/``.
- compute: ``mcu`` (Moore Perf Compute) or ``ncu`` collects per-kernel counters, only for kernels
  matching ``profile.kernel_filter`` and only ``profile.launch_count`` of them. These tools
  replay and serialise kernels, so the run's duration says nothing about throughput; an
  unfiltered end-to-end capture is refused.

Neither layer is required: when no tool is on PATH, or the device has no kernels to capture
(CPU), the profiled trial is recorded as ``unavailable`` with the reason. The wrapped command is
``python -m orchestrator.worker.trial inner.json`` with the ``bounded`` layer: the recipe's steps with
no torch.profiler, so the vendor tool sees only the workload. ``mcu``'s launch filter flags are
taken to mirror ``ncu``'s; check them against the installed Moore Perf Compute.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.core.trial_record import TrialBase, TrialRecordDict
from orchestrator.platform import device as devmod
from orchestrator.core.errors import BackendUnavailable
from orchestrator.platform.children import run_child
from orchestrator.core.results import trial_record, Status
from orchestrator.worker.bootstrap import start_worker

# per layer and device kind: the tools to try, in order
TOOLS: dict[str, dict[str, tuple[str, ...]]] = {
    "system": {"musa": ("msys",), "cuda": ("nsys",), "cpu": ("nsys", "msys")},
    "compute": {"musa": ("mcu",), "cuda": ("ncu",), "cpu": ()},
}
REPORT_SUFFIX = {"msys": ".msys-rep", "nsys": ".nsys-rep", "mcu": ".mcu-rep", "ncu": ".ncu-rep"}
REFUSAL = (
    "refusing an unfiltered kernel capture: mcu/ncu replay and serialise every kernel, so an "
    "end-to-end capture takes hours and its duration is not throughput; set "
    "profile.kernel_filter (a kernel-name regex) and profile.launch_count"
)


def find_tool(layer: str, kind: str, which: Callable[[str], str | None] = shutil.which
              ) -> tuple[str, str]:
    """(tool name, path) for the layer on this device kind, or BackendUnavailable saying why."""
    names = TOOLS[layer].get(kind, ())
    if not names:
        raise BackendUnavailable(
            f"{layer} layer: no kernel-level tool applies to a {kind} device (mcu/ncu profile "
            "MUSA/CUDA kernels)"
        )
    for name in names:
        path = which(name)
        if path:
            return name, path
    raise BackendUnavailable(
        f"{layer} layer: {' or '.join(names)} not found on PATH; install the vendor profiler "
        "(Moore Perf Tools for MUSA, Nsight for CUDA) to capture this layer"
    )


def system_command(tool: str, path: str, out_base: Path, kind: str, inner: list[str]) -> list[str]:
    if tool == "msys":
        trace = "musa,osrt" if kind == "musa" else "osrt"
        return [path, "profile", f"--trace={trace}", "-o", str(out_base), *inner]
    trace = "cuda,osrt" if kind == "cuda" else "osrt"
    return [path, "profile", f"--trace={trace}", "--sample=none", "--force-overwrite=true",
            "-o", str(out_base), *inner]


def kernel_command(tool: str, path: str, out_base: Path, kernel_filter: str, launch_skip: int,
                   launch_count: int, inner: list[str]) -> list[str]:
    if not (kernel_filter or "").strip():
        raise ValueError(REFUSAL)
    if tool == "ncu":
        return [path, "--kernel-name", f"regex:{kernel_filter}", "--launch-skip",
                str(launch_skip), "--launch-count", str(launch_count), "-f", "-o", str(out_base),
                *inner]
    return [path, "-k", kernel_filter, "--launch-skip", str(launch_skip), "--launch-count",
            str(launch_count), "-o", str(out_base), *inner]


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").rstrip().splitlines()[-lines:])
    except OSError:
        return ""


def run_tool_layer(spec: Any, base: TrialBase) -> TrialRecordDict:
    p = spec.profile
    layer = p["layer"]
    if layer == "compute" and not (p.get("kernel_filter") or "").strip():
        raise ValueError(REFUSAL)
    dev = devmod.resolve(spec.device)
    tool, path = find_tool(layer, dev.kind)
    tdir = Path(spec.trial_dir)
    out_dir = Path(p["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    steps = int(p["system_steps"]) if layer == "system" else 1
    inner = dataclasses.replace(
        spec, trial_dir=str(tdir / "inner"), measured_steps=steps,
        profile={**p, "layer": "bounded"},
    )
    (tdir / "inner").mkdir(parents=True, exist_ok=True)
    inner_path = tdir / "inner" / "spec.json"
    inner_path.write_text(inner.to_json(), encoding="utf-8")
    inner_cmd = [sys.executable, "-m", "orchestrator.worker.trial", str(inner_path)]
    out_base = out_dir / spec.trial_id
    if layer == "system":
        cmd = system_command(tool, path, out_base, dev.kind, inner_cmd)
    else:
        cmd = kernel_command(tool, path, out_base, p["kernel_filter"], int(p["launch_skip"]),
                             int(p["launch_count"]), inner_cmd)
    (tdir / "tool_command.json").write_text(json.dumps([Path(cmd[0]).name, *cmd[1:]]))
    t0 = time.time()
    with open(tdir / "tool_stdout.log", "wb") as so, open(tdir / "tool_stderr.log", "wb") as se:
        # None on time-out: the tool and the run it wraps are killed as one process group (so
        # they are when the launcher stops this trial with SIGTERM)
        rc = run_child(cmd, stdout=so, stderr=se, timeout_s=float(p["tool_timeout_s"]),
                       stop_on_sigterm=True)
    reports = sorted(x for x in out_dir.glob(f"{spec.trial_id}*") if x.is_file())
    common = dict(base, tool=tool, tool_wall_s=time.time() - t0,
                  device={"kind": dev.kind, "name": dev.name, "count": dev.count},
                  artifacts=[str(Path("profiles", layer, r.name)) for r in reports])
    if rc is None:
        return trial_record(**common, status="timeout",
                            error=f"{tool} exceeded profile.tool_timeout_s={p['tool_timeout_s']}")
    if rc != 0 or not reports:
        what = f"{tool} exited with code {rc}" if rc else f"{tool} wrote no report"
        return trial_record(**common, status="failed", error=what,
                            stderr_tail=_tail(tdir / "tool_stderr.log"))
    return trial_record(**common, status=Status.OK, expected_report_suffix=REPORT_SUFFIX[tool])


def run_bounded(spec: Any, base: TrialBase) -> TrialRecordDict:
    """The run a vendor tool wraps: warm-up plus a few steps, nothing else in the process."""
    worker = start_worker(spec.workload, spec.device)
    dev = worker.device
    if dev is None:
        raise BackendUnavailable(f"recipe {worker.workload.recipe!r} runs an external command: "
                                 "there is no trainer in this process for the tool to wrap")
    trainer = worker.trainer(spec.bucket)
    batches = trainer.batches()
    for _ in range(spec.warmup_steps + spec.measured_steps):
        trainer.train_step(next(batches))
    devmod.synchronize(dev)
    return trial_record(**base, status=Status.OK, steps_run=spec.warmup_steps + spec.measured_steps,
                        device={"kind": dev.kind, "name": dev.name, "count": dev.count})
