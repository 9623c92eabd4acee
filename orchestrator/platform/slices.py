"""The machine's disjoint slices for duet runs (protocol.pairing=duet): the arms of a round run
at the same time, each on its own slice, so that both see the same interference.

A slice is a set of CPU cores (every arm's process and its children pinned there, their
thread pools sized to match) and, optionally, a visible-devices list (``"0"`` against ``"1"``,
or half a node against the other half). Slices must be disjoint and equal: an arm on a larger
slice would be measured faster for it. :func:`placement` rotates the arms over the slices
every round (a Latin square over as many rounds as slices), so a faster core or device
cancels out across rounds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from orchestrator.core.errors import ConfigError
from orchestrator.core.trial_record import Slice  # noqa: F401  (moved to core)


def machine_cpus() -> list[int]:
    """The cores this process may run on (its affinity set), else every core."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _cores(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in cpus)


def _devices(text: str) -> list[str]:
    return [d.strip() for d in str(text).split(",") if d.strip()]


def duet_slices(p: Any, n_arms: int, pinned: Sequence[int] | None = None) -> list[Slice]:
    """The slices of protocol ``p`` for ``n_arms`` arms: [{"cpus": [...], "devices": "0" or
    None}, ...]. Declared ones (``duet_cpus``, ``duet_devices``) are checked, else this
    process's cores (``pinned``: launcher.cpu_affinity) are split into ``n_arms`` contiguous
    slices. ConfigError naming the key and the fix when they are too few, overlap or differ."""
    avail = sorted(pinned) if pinned else machine_cpus()
    if p.duet_cpus:
        slices_cpus = []
        seen: dict[int, int] = {}
        for i, raw in enumerate(p.duet_cpus):
            key = f"protocol.duet_cpus[{i}]"
            try:
                cpus = sorted({int(c) for c in raw})
            except (TypeError, ValueError):
                raise ConfigError(key, f"{raw!r} must be a list of core numbers, e.g. [0, 1]"
                                  ) from None
            if not cpus:
                raise ConfigError(key, "is empty; give each slice at least one core")
            missing = [c for c in cpus if c not in avail]
            if missing:
                raise ConfigError(key, f"core {missing[0]} is not available to this process "
                                  f"(cores {_cores(avail)}); choose among those")
            for c in cpus:
                if c in seen:
                    raise ConfigError(key, f"core {c} is also in protocol.duet_cpus[{seen[c]}]; "
                                      "slices must be disjoint")
                seen[c] = i
            slices_cpus.append(cpus)
        sizes = {len(c) for c in slices_cpus}
        if len(sizes) > 1:
            raise ConfigError("protocol.duet_cpus", f"slices of {sorted(sizes)} cores: a duet "
                              "needs equal slices (an arm on more cores would be measured "
                              "faster for it); give every slice as many cores")
    else:
        per = len(avail) // n_arms if n_arms else 0
        if per < 1:
            raise ConfigError("protocol.pairing", f"duet: {n_arms} arms need {n_arms} slices, "
                              f"and this process has {len(avail)} core(s) ({_cores(avail)}); "
                              "compare fewer arms, turn off the A/A control "
                              "(protocol.aa_arm=false), or use protocol.pairing=process")
        slices_cpus = [avail[i * per:(i + 1) * per] for i in range(n_arms)]
    devices: list[str | None] = [None] * len(slices_cpus)
    if p.duet_devices:
        if len(p.duet_devices) != len(slices_cpus):
            if p.duet_cpus:
                raise ConfigError("protocol.duet_devices", f"has {len(p.duet_devices)} slices "
                                  f"and protocol.duet_cpus {len(slices_cpus)}; give both the "
                                  "same number")
            per = len(avail) // len(p.duet_devices)
            if per < 1:
                raise ConfigError("protocol.duet_devices", f"{len(p.duet_devices)} slices, but "
                                  f"this process has {len(avail)} core(s) to share among them")
            slices_cpus = [avail[i * per:(i + 1) * per] for i in range(len(p.duet_devices))]
        seen_dev: dict[str, int] = {}
        for i, text in enumerate(p.duet_devices):
            key = f"protocol.duet_devices[{i}]"
            devs = _devices(text)
            if not devs:
                raise ConfigError(key, "is empty; give each slice its devices, e.g. \"0\" or "
                                  "\"0,1\"")
            for d in devs:
                if d in seen_dev:
                    raise ConfigError(key, f"device {d} is also in protocol.duet_devices"
                                      f"[{seen_dev[d]}]; slices must be disjoint")
                seen_dev[d] = i
        counts = {len(_devices(t)) for t in p.duet_devices}
        if len(counts) > 1:
            raise ConfigError("protocol.duet_devices", f"slices of {sorted(counts)} devices: a "
                              "duet needs equal slices; give every slice as many devices")
        devices = [",".join(_devices(t)) for t in p.duet_devices]
    if len(slices_cpus) < n_arms:
        raise ConfigError("protocol.duet_cpus" if p.duet_cpus else "protocol.duet_devices",
                          f"{len(slices_cpus)} slices for {n_arms} arms (the A/A control "
                          "counts as one); give one slice per arm, or turn off the A/A control "
                          "(protocol.aa_arm=false)")
    return [{"cpus": c, "devices": d} for c, d in zip(slices_cpus, devices)]


def placement(n_arms: int, n_slices: int, round_: int) -> list[int]:
    """The slice of each arm in round ``round_``: arm i on slice (i + round) mod n_slices, a
    Latin square over n_slices rounds (every arm on every slice equally often)."""
    return [(i + round_) % n_slices for i in range(n_arms)]


def slice_env(sl: Slice) -> dict[str, str]:
    """The environment of a process on slice ``sl``: thread pools sized to its cores, its
    devices visible (CUDA and MUSA alike)."""
    n = str(len(sl["cpus"]))
    env = {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}
    if sl.get("devices"):
        env["CUDA_VISIBLE_DEVICES"] = env["MUSA_VISIBLE_DEVICES"] = str(sl["devices"])
    return env
