"""The correctness gate: a variant is kept only if it computes the same model, within the
precision's tolerance, and keeps checkpoints compatible.

- :mod:`.probe`: the probe process (``python -m orchestrator.worker.probe SPEC.json``);
- :mod:`.compare`: per-tensor characterisation (pure);
- :mod:`.gate`: noise floor, checks and the gate per variant (pure over probe records);
- :mod:`.runner`: runs the probes once per campaign, writes ``correctness.json``, and hands the
  gates to :func:`orchestrator.analysis.decide.decide` and a section to ``decisions.md``.

Nothing is imported here, so the probe process starts without pandas or the campaign code.
"""
