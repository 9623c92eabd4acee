"""Errors that reach the user as one line and exit code 2."""

from __future__ import annotations

import math
from collections.abc import Sequence


class ConfigError(Exception):
    """Bad input: names the dotted key and how to fix it. The CLI prints it and exits 2."""

    exit_code = 2

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM while a campaign runs (``signum`` says which): stopped like Ctrl-C,
    reported in one line, exit code 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


class BackendUnavailable(Exception):
    """The requested backend (kernel, package, device) is missing here: the trial is recorded
    with status ``unavailable`` and this reason, and the campaign goes on."""


def check_choice(key: str, value: object, choices: Sequence[object]) -> None:
    """ConfigError naming ``key`` and the valid choices unless ``value`` is one of them."""
    if value not in choices:
        raise ConfigError(
            key, f"{value!r} is not a valid choice; choose one of: {', '.join(map(str, choices))}"
        )


def check_finite(key: str, value: float | None) -> None:
    """ConfigError naming ``key`` when ``value`` is NaN (every range check passes NaN: each
    comparison with it is false)."""
    if isinstance(value, float) and math.isnan(value):
        raise ConfigError(key, "must be a number, got nan")


def check_positive(key: str, value: float, *, allow_zero: bool = False) -> None:
    """ConfigError naming ``key`` unless ``value`` > 0 (>= 0 with ``allow_zero``); NaN never
    passes."""
    check_finite(key, value)
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(key, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
