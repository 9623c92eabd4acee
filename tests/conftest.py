from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The sanitizer's private store (placeholder maps, vendor reports moved out of run
    directories) goes under the test session's temporary directory, not the user's cache;
    trial and campaign subprocesses inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHESTRATOR_PRIVATE_DIR", str(tmp_path_factory.mktemp("private store")))
        yield


@pytest.fixture(autouse=True)
def _calibration_store(tmp_path_factory: pytest.TempPathFactory,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own calibration store (orchestrator.campaign.calibration): a campaign's
    A/A arm runs unless the test itself filed a record first."""
    monkeypatch.setenv("ORCH_CALIBRATION_DIR", str(tmp_path_factory.mktemp("calibration")))


@pytest.fixture(autouse=True)
def _compile_store(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own compile store (orchestrator.platform.compile_stats.store_dir): an arm's
    caches start empty unless the test itself ran the arm before."""
    monkeypatch.setenv("ORCH_COMPILE_CACHE_DIR", str(tmp_path_factory.mktemp("compile store")))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    # odd characters on purpose: spaces, unicode and shell metacharacters must not break paths
    d = tmp_path / "run dir ü $x"
    d.mkdir()
    return d


@pytest.fixture
def compose() -> Any:
    from orchestrator.cli.main import compose as _compose

    return _compose


TINY = ["workload=gpt_test", "protocol=quick", "launcher=inline"]


@pytest.fixture
def mark() -> Iterator[str]:
    """A unique ``sleep`` argument for the escape tests (tests/helpers/escapes.py); whatever
    still carries it at the end is killed."""
    from tests.helpers.escapes import left

    m = f"612.{random.randrange(10**8):08d}"
    yield m
    for pid in left(m):
        os.kill(pid, signal.SIGKILL)
