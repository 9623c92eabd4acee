"""The fake MUSA stack of tests/helpers: where it lives and a fixture that installs the fake
torch_musa (tests/helpers/fake_musa) for one test and takes back all it registered."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HELPERS = Path(__file__).resolve().parent
FAKE = HELPERS / "fake_musa"  # torch_musa, with the dist-info declaring its autoload entry point
FAKE_MATE = HELPERS / "fake_mate"  # MATE's flash_attn (mate-flash-attention 0.1.3)
FAKE_BIN = HELPERS / "fake_musa_bin"  # musa_toolkits_version, musa_runtime_version, mudnn_version
FAKE_PYMTML = HELPERS / "fake_pymtml"  # pymtml with MtLink and topology queries


def undo_fake_musa() -> None:
    from orchestrator.platform import device as devmod

    tm = sys.modules.get("torch_musa")
    if tm is not None and hasattr(tm, "_undo"):
        tm._undo()
    for name in [m for m in sys.modules if m == "torch_musa" or m.startswith("torch_musa.")]:
        del sys.modules[name]
    devmod.musa_import_error = None
    devmod.autoload_error = None


def fake_musa_installer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """For a test module's ``fake_musa`` fixture: yields ``install(mode)``, which puts the fake
    torch_musa first on sys.path (imported when the device seam asks for it) in FAKE_MUSA_MODE
    ``mode``; afterwards everything it registered in torch is taken back."""

    def install(mode: str) -> None:
        monkeypatch.setenv("FAKE_MUSA_MODE", mode)
        monkeypatch.syspath_prepend(str(FAKE))

    yield install
    undo_fake_musa()
