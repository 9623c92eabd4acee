"""What the machine was doing while bench/gpu_check.sh ran: a sample every ``--every-s``
seconds into a CSV, until it is stopped (SIGTERM or SIGINT), its parent exits, or ``--max-s``.

On an NVIDIA GPU each sample is one ``nvidia-smi --query-gpu`` of the clocks (SM, memory),
the performance state, temperature, power draw and limit, utilisation, memory used and the
active clock-event (throttle) reasons, those of them this driver's nvidia-smi knows
(``--help-query-gpu``); the facts that do not change (name, driver, VBIOS, the clocks' maxima,
the application clocks) go once into ``--static``. On a CPU (the dry run) each sample is the
load average, the cores' clocks (``/proc/cpuinfo``) and the memory available, labelled as the
CPU's. Every row names the part of the check that was running (the first line of
``--part-file``, which gpu_check.sh rewrites as each part starts).

    python bench/gpu_run/machine_sampler.py --device cuda --out samples.csv \
        --static static.json --part-file current_part --every-s 2
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# what is asked of nvidia-smi every sample, those of them its --help-query-gpu lists
GPU_FIELDS = ("pstate", "clocks.sm", "clocks.mem", "temperature.gpu", "temperature.memory",
              "power.draw", "power.limit", "utilization.gpu", "memory.used",
              "clocks_event_reasons.active", "clocks_throttle_reasons.active")
STATIC_FIELDS = ("name", "driver_version", "vbios_version", "pci.bus_id", "memory.total",
                 "clocks.max.sm", "clocks.max.mem", "clocks.applications.graphics",
                 "clocks.applications.memory", "power.default_limit", "power.max_limit",
                 "persistence_mode", "compute_mode", "ecc.mode.current")
SMI_TIMEOUT_S = 10.0

_stop = False


def _on_signal(signum: int, frame: Any) -> None:
    global _stop
    _stop = True


def known_fields(help_text: str, wanted: tuple[str, ...]) -> list[str]:
    """The fields of ``wanted`` this nvidia-smi lists (its ``--help-query-gpu`` text quotes
    each as ``"name"``); the clock-event reasons under one name only (the newer first)."""
    have = [f for f in wanted if f'"{f}"' in help_text]
    if "clocks_event_reasons.active" in have and "clocks_throttle_reasons.active" in have:
        have.remove("clocks_throttle_reasons.active")
    return have


def smi(fields: list[str]) -> list[str] | None:
    """One query of ``fields`` of GPU 0 (None when it fails)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                              "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]


def cpu_sample() -> dict[str, Any]:
    """The CPU's load, clocks and memory now (the dry run's stand-in for the GPU's)."""
    row: dict[str, Any] = {}
    try:
        row["load1"] = float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        row["load1"] = ""
    mhz = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("cpu mhz"):
                mhz.append(float(line.split(":")[1]))
    except (OSError, ValueError, IndexError):
        pass
    row["cpu_mhz_min"] = min(mhz) if mhz else ""
    row["cpu_mhz_mean"] = round(sum(mhz) / len(mhz), 1) if mhz else ""
    row["cpu_mhz_max"] = max(mhz) if mhz else ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                row["mem_available_mib"] = int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    row.setdefault("mem_available_mib", "")
    return row


def cpu_static() -> dict[str, Any]:
    facts: dict[str, Any] = {"kind": "cpu", "cores": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["name"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gov = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    facts["governor"] = gov.read_text().strip() if gov.exists() else "not exposed"
    return facts


def part_now(part_file: Path | None) -> str:
    if part_file is None:
        return ""
    try:
        return part_file.read_text(encoding="utf-8").splitlines()[0].strip()
    except (OSError, IndexError):
        return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--static", type=Path, required=True)
    ap.add_argument("--part-file", type=Path, default=None)
    ap.add_argument("--every-s", type=float, default=2.0)
    ap.add_argument("--max-s", type=float, default=600.0)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    parent = os.getppid()
    t0 = time.monotonic()
    gpu = args.device == "cuda"
    static: dict[str, Any]
    fields: list[str] = []
    if gpu:
        if shutil.which("nvidia-smi") is None:
            static = {"kind": "cuda", "error": "nvidia-smi is not on the PATH: no samples"}
        else:
            try:
                help_text = subprocess.run(["nvidia-smi", "--help-query-gpu"], capture_output=True,
                                           text=True, timeout=SMI_TIMEOUT_S, check=False).stdout
            except (OSError, subprocess.SubprocessError) as exc:
                help_text = ""
                static = {"kind": "cuda", "error": f"nvidia-smi --help-query-gpu: {exc}"}
            fields = known_fields(help_text, GPU_FIELDS)
            have = known_fields(help_text, STATIC_FIELDS)
            values = smi(have) if have else None
            static = {"kind": "cuda", "source": "nvidia-smi --query-gpu (GPU 0)",
                      **(dict(zip(have, values)) if values else
                         {"error": "nvidia-smi answered no static query"}),
                      "sampled_fields": fields}
    else:
        static = {**cpu_static(), "note": "the CPU's figures (a dry run): no GPU here"}
    static["every_s"] = args.every_s
    args.static.write_text(json.dumps(static, indent=1), encoding="utf-8")
    columns = ["t_s", "part"] + (fields if gpu else
                                 ["load1", "cpu_mhz_min", "cpu_mhz_mean", "cpu_mhz_max",
                                  "mem_available_mib"])
    with args.out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        fh.flush()
        while not _stop and time.monotonic() - t0 < args.max_s and os.getppid() == parent:
            t = round(time.monotonic() - t0, 2)
            part = part_now(args.part_file)
            if gpu:
                values = smi(fields) if fields else None
                if values is not None:
                    w.writerow([t, part, *values])
            else:
                row = cpu_sample()
                w.writerow([t, part] + [row[c] for c in columns[2:]])
            fh.flush()
            end = time.monotonic() + args.every_s
            while not _stop and time.monotonic() < end:
                time.sleep(min(0.2, max(end - time.monotonic(), 0.0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
