"""Step lines from any trainer's log (pure).

Built-in formats, tried in order on each line:

- JSON lines: ``{"step": 10, "step_time_ms": 123.4, "loss": 4.2, "tokens": 8192}``
- ``iter 10: loss 4.2, time 123.45ms`` (nanoGPT)
- ``step 10 ... time 123.4ms`` / ``step: 10 | loss: 4.2 | step_time: 0.123s`` (free text)
- key=value: ``step=10 loss=4.2 step_time_s=0.123 tokens=8192``

A custom regex with named groups (``step``, one of ``step_time_s`` / ``step_time_ms`` /
``time``, and optionally ``loss``, ``tokens``, ``samples``) replaces them. Times come out in
seconds; a bare ``time`` is taken in ms when followed by ``ms``, in seconds when followed by
``s``, and is otherwise refused rather than guessed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"

# step number, then (anywhere later on the line) a time with its unit
_FREE = re.compile(
    rf"\b(?:step|iter(?:ation)?)\b\s*[:=#]?\s*(?P<step>\d+)\b"
    rf"(?=.*?\b(?:step[_ ]?time|time|dt)\b\s*[:=]?\s*(?P<time>{_NUM})\s*(?P<unit>ms|s)\b)",
    re.IGNORECASE,
)
_LOSS = re.compile(rf"\bloss\b\s*[:=]?\s*(?P<loss>{_NUM})", re.IGNORECASE)
_TOKENS = re.compile(r"\btokens?\b\s*[:=]?\s*(?P<tokens>\d+)\b", re.IGNORECASE)
_SAMPLES = re.compile(r"\bsamples?\b\s*[:=]?\s*(?P<samples>\d+)\b", re.IGNORECASE)
_KV = re.compile(rf"(?P<key>[A-Za-z_][A-Za-z0-9_/.]*)\s*=\s*(?P<val>{_NUM})(?P<unit>ms|s)?\b")

_TIME_KEYS_S = ("step_time_s", "time_s", "step_time", "dt_s", "elapsed_s")
_TIME_KEYS_MS = ("step_time_ms", "time_ms", "dt_ms", "elapsed_ms", "iter_time_ms")


class LogParseError(ValueError):
    """Nothing usable in the log, or a custom pattern that cannot yield step times."""


@dataclass(frozen=True)
class StepRecord:
    step: int
    step_time_s: float
    loss: float | None = None
    tokens: int | None = None
    samples: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _from_mapping(d: dict[str, Any]) -> StepRecord | None:
    step = d.get("step", d.get("iter", d.get("iteration")))
    t = None
    for k in _TIME_KEYS_S:
        if k in d:
            t = float(d[k])
            break
    else:
        for k in _TIME_KEYS_MS:
            if k in d:
                t = float(d[k]) / 1e3
                break
    if step is None or t is None:
        return None
    loss = d.get("loss")
    tokens = d.get("tokens", d.get("tokens_per_step"))
    samples = d.get("samples", d.get("samples_per_step"))
    return StepRecord(
        int(step), t, None if loss is None else float(loss),
        None if tokens is None else int(tokens), None if samples is None else int(samples),
    )


def _time_s(value: str, unit: str | None, key: str) -> float | None:
    v = float(value)
    if unit == "ms" or key.endswith("_ms"):
        return v / 1e3
    if unit == "s" or key.endswith("_s"):
        return v
    return None


def parse_line(line: str, pattern: re.Pattern[str] | None = None) -> StepRecord | None:
    line = line.strip()
    if not line:
        return None
    if pattern is not None:
        m = pattern.search(line)
        return _from_groups(m.groupdict()) if m else None
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            return _from_mapping(obj)
    kv = {m["key"]: (m["val"], m["unit"]) for m in _KV.finditer(line)}
    if "step" in kv or "iter" in kv:
        d: dict[str, Any] = {}
        for key, (val, unit) in kv.items():
            if key in _TIME_KEYS_S + _TIME_KEYS_MS or key in ("time", "dt"):
                t = _time_s(val, unit, key)
                if t is not None:
                    d["step_time_s"] = t
            else:
                d[key] = val
        rec = _from_mapping(d)
        if rec is not None:
            return rec
    m = _FREE.search(line)
    if m is None:
        return None
    t = float(m["time"]) / (1e3 if m["unit"].lower() == "ms" else 1.0)
    loss = _LOSS.search(line)
    tokens = _TOKENS.search(line)
    samples = _SAMPLES.search(line)
    return StepRecord(
        int(m["step"]), t,
        float(loss["loss"]) if loss else None,
        int(tokens["tokens"]) if tokens else None,
        int(samples["samples"]) if samples else None,
    )


def _from_groups(g: dict[str, str | None]) -> StepRecord | None:
    if g.get("step") is None:
        return None
    if g.get("step_time_s") is not None:
        t = float(g["step_time_s"])  # type: ignore[arg-type]
    elif g.get("step_time_ms") is not None:
        t = float(g["step_time_ms"]) / 1e3  # type: ignore[arg-type]
    elif g.get("time") is not None:
        unit = (g.get("unit") or "").lower()
        if unit not in ("ms", "s"):
            return None
        t = float(g["time"]) / (1e3 if unit == "ms" else 1.0)  # type: ignore[arg-type]
    else:
        return None
    return StepRecord(
        int(g["step"]),  # type: ignore[arg-type]
        t,
        float(g["loss"]) if g.get("loss") else None,
        int(g["tokens"]) if g.get("tokens") else None,
        int(g["samples"]) if g.get("samples") else None,
    )


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Check a user regex: it needs a ``step`` group and a time group."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise LogParseError(f"invalid regex: {exc}") from None
    groups = set(rx.groupindex)
    if "step" not in groups:
        raise LogParseError("the pattern needs a named group (?P<step>...)")
    if not groups & {"step_time_s", "step_time_ms", "time"}:
        raise LogParseError(
            "the pattern needs a time group: (?P<step_time_s>...), (?P<step_time_ms>...), "
            "or (?P<time>...) with (?P<unit>ms|s)"
        )
    if "time" in groups and "unit" not in groups:
        raise LogParseError("a (?P<time>...) group needs a (?P<unit>ms|s) group beside it")
    return rx


def parse_steps(lines: Iterable[str], pattern: str | None = None) -> list[StepRecord]:
    """Every step record in the log, in order. Raises LogParseError when none is found."""
    rx = compile_pattern(pattern) if pattern else None
    out = [r for r in (parse_line(line, rx) for line in lines) if r is not None]
    if not out:
        how = "the given --pattern" if pattern else "any built-in step format"
        raise LogParseError(
            f"no step lines matched {how}; expected e.g. 'step 10 ... time 123.4ms', "
            "'iter 10: loss 4.2, time 123.45ms', key=value or JSON lines, or pass a regex "
            "with named groups (step, step_time_ms|step_time_s|time+unit)"
        )
    return out
