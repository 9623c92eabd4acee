"""Profiling in three layers, kept apart from timing.

Profiled trials (``TrialSpec.kind == "profile"``) are planned after the timed trials, recorded
with their own status and never enter timing statistics.

- framework: torch.profiler over steady steps, phase ranges marked by the recipe
  (:mod:`.phases`), a gzipped Chrome trace and a summary (:mod:`.framework`);
- trace analysis: pure functions over pandas DataFrames read from a saved trace
  (:mod:`.trace`, :mod:`.analysis`), with the kernel-name patterns in one place
  (:mod:`.patterns`) and a baseline/variant diff;
- system and kernel layers: msys/nsys and mcu/ncu wrappers that degrade to ``unavailable``
  (:mod:`.tools`).

Importing this package imports neither torch nor pandas: :mod:`.phases` is used by recipes in
every timed trial and must stay cheap.
"""
