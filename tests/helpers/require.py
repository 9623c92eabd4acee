"""Optional test dependencies: a missing one skips its test with the reason, except under CI
(``ORCH_REQUIRE_TEST_DEPS=1``, set by .ci/run), where it fails: CI never passes by skipping.
scripts/setup.sh installs the Python ones (the dev extra), scripts/install_test_deps.sh
Debian's chromium."""

from __future__ import annotations

import importlib
import os
import shutil
from typing import Any

REQUIRE_VAR = "ORCH_REQUIRE_TEST_DEPS"


def _missing(reason: str) -> None:
    import pytest

    if os.environ.get(REQUIRE_VAR) == "1":
        pytest.fail(f"{REQUIRE_VAR}=1 but {reason}")
    pytest.skip(reason)


def need_module(name: str, install: str = "bash scripts/setup.sh (the dev extra)") -> Any:
    """The imported module; skips (fails under CI) when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        _missing(f"{name} cannot be imported ({exc}); install it with {install}")


def need_files(pattern: str, install: str) -> list[str]:
    """The paths matching the glob ``pattern``; skips (fails under CI) when there are none."""
    import glob

    found = sorted(glob.glob(pattern))
    if not found:
        _missing(f"nothing matches {pattern}; {install} makes it")
    return found


def need_chromium() -> str:
    """The headless browser's path; skips (fails under CI) when there is none."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        _missing("chromium is not installed; scripts/install_test_deps.sh installs Debian's "
                 "chromium (as root)")
    return str(browser)
