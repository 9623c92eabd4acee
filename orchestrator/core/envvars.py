"""Process environment variables set for a scope (an inline trial, a probe, a compile cache)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def env_overrides(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the scope, then restore each variable as it was
    (removed again when it was unset)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
