from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    # odd characters on purpose: spaces, unicode and shell metacharacters must not break paths
    d = tmp_path / "run dir ü $x"
    d.mkdir()
    return d


@pytest.fixture
def compose() -> Any:
    from orchestrator.cli import compose as _compose

    return _compose


TINY = ["workload=gpt_test", "protocol=quick", "launcher=inline"]
