"""Spec: the config schemas, the sweep and its arms, the plan, the worker jobs, the baseline
ledger. Imports platform and core."""
