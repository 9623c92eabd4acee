"""Muon with tensor-parallel Newton-Schulz (tp_mode duplicated / distributed / auto).

Modules: ``newton_schulz`` (the iteration, single device and over a process group), ``cost``
(the pure per-mode cost model and the auto resolver), ``calibrate`` (a profile measured on the
actual group), ``topology`` (fabric domains from each rank's identity), ``optimizer`` (Muon with
AdamW for non-matrix parameters), ``model`` and ``recipe`` (the ``muon_tp`` workload).
Nothing here is imported by ``orchestrator.spec.config``; torch is imported by the submodules only.
"""
