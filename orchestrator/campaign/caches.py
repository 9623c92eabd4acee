"""The arms' compile caches (``protocol.compile_cache=arm``) at a campaign's start and end.

With ``protocol.arm_cache_store`` on (the default) each arm's folder lives in the user's compile
store (orchestrator.platform.compile_stats.store_dir), named by the arm's identity
(orchestrator.spec.jobs.arm_identity): a later campaign that runs the same arm (the same
baseline in the next sweep, a resume, a re-run) starts it warm, and its first trial's record
says ``reuses`` instead of ``fills``. No arm ever shares another's folder. The campaign notes
its arms' use beside their folders when it starts and ends, and at its end removes the least
recently used folders of other campaigns while the store is over ``protocol.arm_cache_max_gb``.
With the store off, the folders are the run directory's scratch and go with the campaign's end.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from orchestrator.platform import compile_stats
from orchestrator.spec.config import Config
from orchestrator.spec.jobs import arm_identity
from orchestrator.spec.sweep import ResolvedArm, varies_compilation

log = logging.getLogger("orchestrator.campaign.run")


def stored(cfg: Config, arms: list[ResolvedArm]) -> bool:
    """Whether this campaign's arms keep their caches in the user's store."""
    mode = compile_stats.resolve_mode(str(cfg.protocol.compile_cache), varies_compilation(arms))
    return mode == "arm" and bool(cfg.protocol.arm_cache_store)


def note_arms(cfg: Config, arms: list[ResolvedArm]) -> set[str]:
    """Note each arm's use of its folder in the store (at the campaign's start and end); the
    folders' keys. Nothing to do with the store off."""
    if not stored(cfg, arms):
        return set()
    store = compile_stats.store_dir()
    keys = set()
    for arm in arms:
        key = compile_stats.arm_key(arm_identity(cfg, arm))
        compile_stats.note_use(store, key, {"arm_id": arm.arm_id, "label": arm.label,
                                            "baseline": arm.is_baseline})
        keys.add(key)
    return keys


def finish(cfg: Config, run_dir: Path, arms: list[ResolvedArm]) -> None:
    """At the campaign's end: the run directory's scratch caches go; the store's folders of
    this campaign's arms are noted as used, and other campaigns' least recently used ones go
    while the store is over its cap."""
    caches = run_dir / compile_stats.CACHES_DIR
    if caches.is_dir():
        shutil.rmtree(caches, ignore_errors=True)
        log.info("removed the arms' compile caches (%s/)", compile_stats.CACHES_DIR)
    keys = note_arms(cfg, arms)
    if not keys:
        return
    cap = int(cfg.protocol.arm_cache_max_gb * 1e9)
    gone = compile_stats.evict(compile_stats.store_dir(), cap, keys)
    if gone:
        log.info("compile store over %g GB (protocol.arm_cache_max_gb): removed %d least "
                 "recently used arm folder(s) of earlier campaigns", cfg.protocol.arm_cache_max_gb,
                 len(gone))
