"""Workloads the orchestrator can time, each registered by name (:mod:`recipes.registry`).

A recipe builds a trainer (:mod:`recipes.base`) for one bucket on one device; the orchestrator
owns warm-up, timing and synchronisation, recipes never time themselves. Each recipe's workload
schema lives beside it (``recipes/<recipe>/config.py``). One's own recipe is named by import
path (``workload.recipe=my_pkg.module:build``); see :mod:`recipes.base`.
"""
