"""Errors that reach the user as one line and exit code 2."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad input: names the dotted key and how to fix it. The CLI prints it and exits 2."""

    exit_code = 2

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


class BackendUnavailable(Exception):
    """The requested backend (kernel, package, device) is missing here: the trial is recorded
    with status ``unavailable`` and this reason, and the campaign goes on."""
