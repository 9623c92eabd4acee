"""Dataclass trees <-> plain JSON-able data (core: no omegaconf, no project schemas).

The campaign writes specs and ``config.json`` as plain data (:func:`to_dict`); a worker process
rebuilds the dataclasses it needs from them (:func:`from_dict`) without importing omegaconf.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from orchestrator.core.errors import ConfigError


def to_dict(obj: Any) -> Any:
    """A dataclass tree as plain JSON-able data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def from_dict(cls: type, data: Any, key: str = "") -> Any:
    """Rebuild a dataclass tree from :func:`to_dict` output (used in trial processes, which
    must not pay for importing omegaconf). Unknown keys raise ConfigError."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    extra = set(data) - names
    if extra:
        raise ConfigError(f"{key}{sorted(extra)[0]}", f"unknown key; valid keys: {sorted(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{key}{f.name}")
    return cls(**kwargs)


def _convert(tp: Any, value: Any, key: str) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(args[0], value, key) if len(args) == 1 else value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key + ".")
    if origin is list:
        (arg,) = typing.get_args(tp) or (Any,)
        return [_convert(arg, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        kv = typing.get_args(tp)
        return {k: _convert(kv[1] if kv else Any, v, f"{key}.{k}") for k, v in value.items()}
    return value
