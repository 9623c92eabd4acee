"""Interference: how busy the machine is, measured, never guessed (Linux /proc; stdlib only, so
a trial process can import it without cost).

- Before a campaign, :func:`machine_load` samples the load average against the cores, the CPU
  share other processes take (from /proc/stat less this process tree's own CPU time) over a
  short window, and other processes on the GPUs (``nvidia-smi`` / ``mthreads-gmi``).
- During a trial's measured window, :class:`CpuWindow` records the CPU time other processes
  (and the hypervisor: steal time) took, in cores: (machine busy time - this process's own CPU
  time) / wall time. A single-process trial above ``protocol.interference_cores`` was measured
  under interference: the campaign re-runs it and keeps the first attempt aside.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass
from orchestrator.core.trial_record import CpuWindowFigures  # noqa: F401  (moved to core)

_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# /proc/stat counts in ticks (10 ms at 100 Hz, on every core): over a shorter window one tick
# reads as several cores, so a window must last this many ticks per core to be measured
MIN_TICKS = 20


def _busy_s() -> float | None:
    """Seconds of CPU time the whole machine has been busy (all cores; user, nice, system,
    irq, softirq and steal), or None without /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    v = [int(x) for x in fields[1:]]
    busy = v[0] + v[1] + v[2] + sum(v[5:8])  # user nice system | irq softirq steal
    return busy / _CLK


def _descendants_cpu_s(root: int) -> float:
    """CPU seconds of the live processes below ``root`` (dataloader workers, compile workers,
    a launcher's ranks): from /proc/<pid>/stat, 0 without /proc."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0.0
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                text = fh.read()
        except OSError:  # gone meanwhile
            continue
        rest = text[text.rfind(")") + 2:].split()  # the command name may hold spaces
        if len(rest) < 13:
            continue
        pid = int(name)
        children.setdefault(int(rest[1]), []).append(pid)
        cpu[pid] = (int(rest[11]) + int(rest[12])) / _CLK  # utime stime
    total, todo = 0.0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


def _own_cpu_s() -> float:
    """This process tree's CPU seconds: itself, its reaped children (getrusage) and its live
    descendants (/proc), so a trial's own workers never read as interference."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime + _descendants_cpu_s(os.getpid())


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class CpuWindow:
    """Other processes' CPU time over a window of this process's life (call :meth:`start`,
    then :meth:`stop`)."""

    def __init__(self) -> None:
        self._t0 = self._busy0 = self._own0 = None  # type: float | None

    def start(self) -> None:
        self._busy0, self._own0, self._t0 = _busy_s(), _own_cpu_s(), time.perf_counter()

    def stop(self) -> CpuWindowFigures:
        """{others_cpu_s, others_cores, wall_s}; others_* None where /proc/stat is missing or
        the window is too short for its tick resolution (then ``note`` says so)."""
        busy, own, t = _busy_s(), _own_cpu_s(), time.perf_counter()
        wall = t - (self._t0 or t)
        if busy is None or self._busy0 is None or self._own0 is None or wall <= 0:
            return {"others_cpu_s": None, "others_cores": None, "wall_s": wall}
        n = cores()
        if wall < MIN_TICKS * n / _CLK:
            return {"others_cpu_s": None, "others_cores": None, "wall_s": wall,
                    "note": f"measured window {wall:.3f} s too short for /proc/stat's "
                            f"{1 / _CLK * 1e3:g} ms ticks on {n} cores"}
        others = max(0.0, (busy - self._busy0) - (own - self._own0))
        return {"others_cpu_s": others, "others_cores": min(others / wall, float(n)),
                "wall_s": wall}


@dataclass(frozen=True)
class MachineLoad:
    cores: int
    load_average: float
    others_cores: float | None  # other processes' CPU share over the sample, in cores
    gpu_processes: list[str]  # "pid name" of other processes on the GPUs
    sample_s: float

    def problems(self, busy_cores: float) -> list[str]:
        """What makes the machine unfit for timing, each with the figure."""
        out = []
        if self.others_cores is not None and self.others_cores > busy_cores:
            out.append(f"other processes took {self.others_cores:.2f} of {self.cores} cores "
                       f"over {self.sample_s:g} s")
        if self.others_cores is None and self.load_average > max(busy_cores, 0.5) * self.cores:
            out.append(f"load average {self.load_average:.2f} on {self.cores} cores")
        if self.gpu_processes:
            out.append(f"{len(self.gpu_processes)} other process(es) on the GPUs: "
                       f"{', '.join(self.gpu_processes[:3])}")
        return out


def gpu_processes() -> list[str]:
    """Other processes the vendor's tool lists on the GPUs (none when no tool is installed)."""
    me = os.getpid()
    out: list[str] = []
    for tool, args in (("nvidia-smi", ["--query-compute-apps=pid,process_name",
                                       "--format=csv,noheader"]),
                       ("mthreads-gmi", ["--query-compute-apps=pid,process_name",
                                         "--format=csv,noheader"])):
        if shutil.which(tool) is None:
            continue
        try:
            text = subprocess.run([tool, *args], capture_output=True, text=True, timeout=10,
                                  check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in text.splitlines():
            pid, _, name = line.partition(",")
            if pid.strip().isdigit() and int(pid) != me:
                out.append(f"{pid.strip()} {os.path.basename(name.strip())}")
    return out


def machine_load(sample_s: float = 1.0) -> MachineLoad:
    """Sample how busy the machine is right now (sleeps ``sample_s``)."""
    w = CpuWindow()
    w.start()
    time.sleep(sample_s)
    got = w.stop()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return MachineLoad(cores(), load, got["others_cores"], gpu_processes(), sample_s)


# a fixed pure-Python workload (~20 ms on a 2-core VM): the same instructions on every core
_PROBE_ITERATIONS = 400_000
# cores whose best times differ by more than this are called different in speed
CORE_SPEED_TOLERANCE = 0.10


def _probe() -> float:
    t0 = time.perf_counter()
    x = 0.5
    for _ in range(_PROBE_ITERATIONS):
        x = x * 0.999999 + 1e-6
    return time.perf_counter() - t0


def core_speeds(reps: int = 3) -> dict[int, float] | None:
    """Best seconds of a fixed pure-Python workload on each core this process may use,
    pinning itself to each in turn, the cores interleaved over ``reps`` rounds (affinity
    restored after); None where it cannot pin, or with one core."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        return None
    best: dict[int, float] = {}
    try:
        for _ in range(reps):
            for c in sorted(before):
                os.sched_setaffinity(0, {c})
                dt = _probe()
                best[c] = min(best.get(c, dt), dt)
    finally:
        os.sched_setaffinity(0, before)
    return best


def core_speed_problem(speeds: dict[int, float] | None,
                       tolerance: float = CORE_SPEED_TOLERANCE) -> str:
    """A warning where the cores differ in speed beyond ``tolerance`` ("" otherwise)."""
    if not speeds:
        return ""
    fast = min(speeds, key=lambda c: speeds[c])
    slow = max(speeds, key=lambda c: speeds[c])
    gap = speeds[slow] / speeds[fast] - 1
    if gap <= tolerance:
        return ""
    return (f"cores differ in speed: a fixed host workload took {gap:.0%} longer on core "
            f"{slow} than on core {fast} (on a VM, a busy sibling thread on the host): a trial's "
            f"speed then depends on where the OS puts it; pin trials to one with "
            f"launcher.cpu_affinity=[{fast}]")


__all__ = ["CpuWindow", "MachineLoad", "core_speed_problem", "core_speeds", "cores",
           "gpu_processes", "machine_load"]
