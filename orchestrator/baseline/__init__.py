"""Versioned baselines per workload: a ledger of plain files (``baselines/<workload>/vN.json``),
the campaigns that justify each version, and the command that promotes, verifies and shows
them (``python -m orchestrator.baseline``). See docs/baselines.md."""
