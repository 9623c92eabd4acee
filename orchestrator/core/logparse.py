"""Step lines from any trainer's log (pure).

Built-in formats, tried in order on each line:

- JSON lines: ``{"step": 10, "step_time_ms": 123.4, "loss": 4.2, "tokens": 8192}``
- key=value: ``step=10 loss=4.2 step_time_s=0.123 tokens=8192``
- Megatron-LM's ``training_log``: `` iteration       10/     100 | consumed samples: 640 | elapsed
  time per iteration (ms): 123.4 | ... | global batch size:    64 | lm loss: 4.200000E+00 | ...``
  (a line with ``iteration N/ M | consumed samples:`` is read as one, or refused)
- ``iter 10: loss 4.2, time 123.45ms`` (nanoGPT)
- ``step 10 ... time 123.4ms`` / ``step: 10 | loss: 4.2 | step_time: 0.123s`` (free text)
- torchtitan's metrics line: ``step: 10  loss:  4.20000  grad_norm: ...  memory: 30.12GiB(38.05%)
  tps: 12,345  tflops: 300.12  mfu: 30.41%`` (ANSI colours and all): ``step:``, then ``tps:``
  and ``tflops:``, on a line no format above read

ANSI colour codes (SGR, ``ESC[...m``) are left out of a line before the built-in formats read
it (a custom pattern sees the line as printed).

Both trainers print a line every few steps, averaged since their previous line: Megatron's
elapsed time per iteration over the last ``--log-interval`` iterations, torchtitan's tps over
the steps since its last line (``metrics.log_freq``; it logs step 1 and every multiple). Such
a line is a block of ``steps`` steps (:attr:`StepRecord.steps`, ``interval`` set): the
difference between its step number and the previous line's; for the first line, the steps
since 0, or with ``log_interval`` given, that interval (1 for a first line off the interval:
both trainers also log their first step). Consumers weigh a record as its ``steps`` steps. Two
known overlaps are left to the warm-up: Megatron (since its ``is_first_iteration`` logging)
does not restart its averages after logging its first iteration, so its second line's average
includes the first iteration; and a torchtitan validation restarts its count, so the next line
averages the steps since the validation. A run resumed from a checkpoint needs
``log_interval`` for its first line.

torchtitan logs tokens per second, not a step time: its tps is per device (its local tokens
over the time since the last line and over the non-data-parallel degree, so tps x world size
is the run's tokens/s), and the step time is ``tokens_per_step / (tps x world_size)`` with
``tokens_per_step`` the tokens of one step on all devices, as the workload states it. Without
``tokens_per_step`` or ``world_size`` a torchtitan line raises :class:`MissingSetting` naming
the setting, rather than a guess. Its ``mfu: 30.41%`` is read as the trainer's MFU, its memory
and TFLOP/s are not read; a ``validate step:`` line is not a step line.

A trainer's own MFU is read where it is logged (nanoGPT's ``mfu 30.00%``, ``mfu=31.5%``,
``mfu_pct=29``, JSON ``"mfu": 0.305`` or ``"train/mfu": "32%"``): with ``%`` or a ``_pct`` /
``_percent`` key it is a percentage, otherwise a fraction. It is the trainer's claim, against a
peak we do not know (nanoGPT assumes an A100's 312 TFLOP/s whatever the device, and logs
-100 % before it has measured); :func:`reported_mfu` summarises it under that label.

A custom regex with named groups (``step``, one of ``step_time_s`` / ``step_time_ms`` /
``time``, and optionally ``loss``, ``tokens``, ``samples``, ``mfu`` (a fraction) or ``mfu_pct``
(a percentage)) replaces them. Times come out in
seconds; a bare ``time`` is taken in ms when followed by ``ms``, in seconds when followed by
``s``, and is otherwise refused rather than guessed.

A loss may be logged as ``nan`` / ``inf`` (it parses as a non-finite float, so the correctness
gate can see it). Lines that look like step lines but cannot be read raise
:class:`MalformedStepLine` naming the line number and the field, instead of being dropped or
crashing: a field whose value is not a number (``"step_time_ms": "n/a"``, ``null``), or a step
time without a unit (``step=2 time=30``: print ``time=30ms`` / ``step_time_ms=30``, or pass a
pattern with a ``(?P<unit>ms|s)`` group).

A line longer than :data:`MAX_LINE_CHARS` is not a step line: :func:`parse_steps` skips it
and says how many it skipped once, in its error when nothing else matched; a worker adds
:func:`long_lines_note` to the trial record's ``log_notes``. The built-in formats are read in
time linear in a line's length (a trainer may print a base64 blob, a long hash or URL, or a
line of progress dots): the cap bounds the work, it does not hide a quadratic parser.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict, cast

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# a number or a non-finite float as Python prints it (nan, inf, -inf; any case)
_VAL = rf"(?:{_NUM}|[-+]?(?i:nan|inf(?:inity)?))"

# Lines longer than this are not step lines, and are not searched. A step line is short:
# torchtitan's and Megatron's are well under 1 KiB and a JSON-lines metrics record rarely
# passes a few KiB, so 64 Ki characters is over ten times the longest we know of, while a
# base64 blob or a line of progress dots can be any length. The parser is linear, so the cap
# only bounds the work per line (a 64 Ki line takes milliseconds). Counted in characters:
# the log is read as text.
MAX_LINE_CHARS = 64 * 1024

# Every pattern below is written so that a search is linear in the line's length (Python's
# re backtracks): blanks around an optional separator are "\s*(?:[:=]\s*)?", never
# "\s*[:=]?\s*" (which splits a run of blanks every way before failing), and nothing rescans
# the rest of the line from each candidate start (see _kv_matches and _step_then).
_SEP = r"\s*(?:[:=]\s*)?"  # blanks, then optionally ":" or "=" and more blanks
# a step number: "step 10", "iter: 10", "iteration #10"
_STEP = re.compile(r"\b(?:step|iter(?:ation)?)\b\s*(?:[:=#]\s*)?(?P<step>\d+)\b", re.IGNORECASE)
# after the step number, anywhere later on the line: a time with its unit
_TIME = re.compile(rf"\b(?:step[_ ]?time|time|dt)\b{_SEP}(?P<time>{_NUM})\s*(?P<unit>ms|s)\b",
                   re.IGNORECASE)
# or one without ("step 2 time 30"): refused, not dropped
_TIME_NO_UNIT = re.compile(
    rf"\b(?P<key>step[_ ]?time|time|dt)\b{_SEP}{_NUM}(?=\s*(?:[,|;]|$))", re.IGNORECASE)
_LOSS = re.compile(rf"\bloss\b{_SEP}(?P<loss>{_VAL})(?!\w)", re.IGNORECASE)
_TOKENS = re.compile(rf"\btokens?\b{_SEP}(?P<tokens>\d+)\b", re.IGNORECASE)
_SAMPLES = re.compile(rf"\bsamples?\b{_SEP}(?P<samples>\d+)\b", re.IGNORECASE)
# key=value. A key is a run of key characters from its first letter or "_" (a digit, "/" or
# "." before it is skipped): the match is tried once per run, at the run's start, where a
# key tried from each character of a long run would be quadratic
_KEY_CHARS = "A-Za-z0-9_/."
_KV_RUN = (rf"[0-9/.]*(?P<key>[A-Za-z_][{_KEY_CHARS}]*)\s*=\s*(?P<val>{_VAL})"
           r"(?:(?P<unit>ms|s)\b|(?P<pct>%)|\b)")
_KV = re.compile(rf"(?<![{_KEY_CHARS}]){_KV_RUN}")
_KV_HERE = re.compile(_KV_RUN)  # from inside a run, where the previous pair ended
_KEY_SET = frozenset(string.ascii_letters + string.digits + "_/.")
# a trainer's own MFU in free text: "mfu 30.00%" (nanoGPT), "mfu: 0.33"
_MFU = re.compile(rf"\bmfu\b{_SEP}(?P<mfu>{_NUM})\s*(?P<pct>%)?", re.IGNORECASE)
# keys (the last segment of train/mfu, perf.mfu) whose value is the trainer's MFU, and the
# divisor to a fraction; any value written with a % sign is a percentage
_MFU_KEYS = {"mfu": 1.0, "model_flops_utilization": 1.0, "mfu_pct": 100.0, "mfu_percent": 100.0}

# ANSI colour codes (SGR): torchtitan's Color class wraps every field of its line in them
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Megatron-LM's training_log: " iteration       10/     100 | consumed samples: ..." (the
# consumed samples always come first: a line with them is a Megatron line, read or refused)
_MEGATRON = re.compile(r"\biteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|(?=\s*consumed samples:)")
_MEGATRON_TIME = "elapsed time per iteration (ms)"
_MEGATRON_LOSS = ("lm loss", "loss")
# torchtitan's MetricsProcessor.log: "step: 10  loss: ...  tps: 12,345  tflops: ...  mfu: 30.41%"
_TITAN_STEP = re.compile(r"\bstep:\s*(?P<step>\d+)\b")
_TITAN_TPS = re.compile(r"\btps:\s*(?P<tps>\S*)")
_TITAN_TFLOPS = re.compile(r"\btflops:")
_TITAN_LOSS = re.compile(r"\bloss:\s*(?P<loss>\S+)")
_TITAN_MFU = re.compile(r"\bmfu:\s*(?P<mfu>\S+)")

TRAINER_MFU_LABEL = "trainer-reported mfu (the trainer's own claim; its peak is unknown to us)"

_TIME_KEYS_S = ("step_time_s", "time_s", "step_time", "dt_s", "elapsed_s")
_TIME_KEYS_MS = ("step_time_ms", "time_ms", "dt_ms", "elapsed_ms", "iter_time_ms")


class LogParseError(ValueError):
    """Nothing usable in the log, or a custom pattern that cannot yield step times."""


class MalformedStepLine(LogParseError):
    """A step line whose field cannot be read; names the line (1-based) and the field."""

    def __init__(self, message: str, line_no: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.line_no = line_no
        self.field = field


class MissingSetting(LogParseError):
    """A step line that needs a setting the workload did not give (torchtitan's tps needs the
    tokens per step and the world size); ``key`` names it."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class _BadField(Exception):
    def __init__(self, field: str, why: str) -> None:
        super().__init__(why)
        self.field = field
        self.why = why


class _NeedsSetting(Exception):
    def __init__(self, key: str, why: str) -> None:
        super().__init__(why)
        self.key = key
        self.why = why


class StepRecordDict(TypedDict):
    """A :class:`StepRecord` as plain data."""

    step: int
    step_time_s: float
    loss: float | None
    tokens: int | None
    samples: int | None
    reported_mfu: float | None
    steps: int
    interval: bool


@dataclass(frozen=True)
class StepRecord:
    step: int
    step_time_s: float
    loss: float | None = None
    tokens: int | None = None
    samples: int | None = None
    reported_mfu: float | None = None  # the trainer's own MFU claim, as a fraction
    # the steps the record stands for: an interval line (torchtitan, Megatron) averages the
    # steps since the trainer's previous line; step_time_s is then that average
    steps: int = 1
    interval: bool = False  # a line averaged since the previous one (steps set by parse_steps)

    def to_dict(self) -> StepRecordDict:
        return cast("StepRecordDict", dict(self.__dict__))


def _shown(value: Any) -> str:
    return "null" if value is None else repr(value)


def _float(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _BadField(field, f"{_shown(value)} is not a number")
    try:
        return float(value)
    except ValueError:
        raise _BadField(field, f"{value!r} is not a number") from None


def _int(field: str, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _BadField(field, f"{_shown(value)} is not an integer")
    try:
        return int(value)
    except ValueError:
        raise _BadField(field, f"{value!r} is not an integer") from None


def _opt(field: str, value: Any, conv: Any) -> Any:
    return None if value is None else conv(field, value)


def _is_mfu_key(key: str) -> bool:
    return re.split(r"[/.]", key)[-1].lower() in _MFU_KEYS


def _mfu_from_mapping(d: dict[str, Any]) -> float | None:
    for key, value in d.items():
        div = _MFU_KEYS.get(re.split(r"[/.]", str(key))[-1].lower())
        if div is None or value is None:
            continue
        if isinstance(value, str) and value.strip().endswith("%"):
            value, div = value.strip()[:-1], 100.0
        return _float(key, value) / div
    return None


class ReportedMfu(TypedDict, total=False):
    """trial.json's ``trainer_reported_mfu_*`` fields (none when the trainer logged no MFU)."""

    trainer_reported_mfu_median: float | None
    trainer_reported_mfu_steps: int
    trainer_reported_mfu_left_out: int
    trainer_reported_mfu_label: str


def reported_mfu(records: Sequence[StepRecord]) -> ReportedMfu:
    """The trainer's own MFU over ``records`` (pure): the median of the values it logged, each
    line weighed as its steps, labelled as its claim. Negative or non-finite values are left
    out and counted: nanoGPT logs -100 % until it has measured. Empty when the trainer logged
    no MFU."""
    vals = [(r.reported_mfu, r.steps) for r in records if r.reported_mfu is not None]
    if not vals:
        return {}
    # a line of k steps (torchtitan's, every log_freq steps) counts as its k steps
    kept = [v for v, k in vals if math.isfinite(v) and v >= 0 for _ in range(k)]
    return {
        "trainer_reported_mfu_median": statistics.median(kept) if kept else None,
        "trainer_reported_mfu_steps": len(kept),
        "trainer_reported_mfu_left_out": sum(k for _, k in vals) - len(kept),
        "trainer_reported_mfu_label": TRAINER_MFU_LABEL,
    }


def _from_mapping(d: dict[str, Any]) -> StepRecord | None:
    step_key = next((k for k in ("step", "iter", "iteration") if k in d), None)
    t = None
    for k in _TIME_KEYS_S:
        if k in d:
            t = _float(k, d[k])
            break
    else:
        for k in _TIME_KEYS_MS:
            if k in d:
                t = _float(k, d[k]) / 1e3
                break
        else:
            for k in ("time", "dt"):
                if step_key is not None and k in d:
                    raise _BadField(k, f"{d[k]!r} has no unit")
    if step_key is None or t is None:
        return None
    tokens_key = "tokens" if "tokens" in d else "tokens_per_step"
    samples_key = "samples" if "samples" in d else "samples_per_step"
    return StepRecord(
        _int(step_key, d[step_key]), t, _opt("loss", d.get("loss"), _float),
        _opt(tokens_key, d.get(tokens_key), _int), _opt(samples_key, d.get(samples_key), _int),
        _mfu_from_mapping(d),
    )


def _time_s(value: str, unit: str | None, key: str) -> float | None:
    v = _float(key, value)
    if unit == "ms" or key.endswith("_ms"):
        return v / 1e3
    if unit == "s" or key.endswith("_s"):
        return v
    return None


def is_long_line(line: str, max_line_chars: int | None = MAX_LINE_CHARS) -> bool:
    """Whether ``line`` is over the cap, so not a step line (None: no cap)."""
    return max_line_chars is not None and len(line) > max_line_chars


def long_lines_note(count: int, max_line_chars: int = MAX_LINE_CHARS) -> list[str]:
    """The one note for a log with ``count`` lines over the cap (none when there are none)."""
    if not count:
        return []
    return [f"{count} line(s) longer than {max_line_chars} characters were not read as step lines"]


def _kv_matches(line: str) -> Iterable[re.Match[str]]:
    """The key=value pairs of ``line``, as ``finditer`` of a pattern whose key may start at any
    letter would find them, in linear time. A key runs to the end of its run of key characters
    (``=`` is not one), so every start in a run matches or fails alike: the first start of each
    run is tried, and a run where the previous pair ended is tried from there."""
    pos = 0
    while pos < len(line):
        m = None
        if pos and line[pos - 1] in _KEY_SET and line[pos] in _KEY_SET:
            m = _KV_HERE.match(line, pos)
        if m is None:  # the rest of that run, if any, fails _KV's lookbehind at each character
            m = _KV.search(line, pos)
        if m is None:
            return
        yield m
        pos = m.end()


def _step_then(line: str, then: re.Pattern[str]) -> tuple[re.Match[str], re.Match[str]] | None:
    """The first step number with a match of ``then`` after it on its line, and that match, as
    ``step(?=.*?then)`` would find them, in linear time: the regex retries the rest of the line
    from every later step, but once ``then`` is not found after one step, it is not after a
    later one either (bar a newline in between, which ``.`` does not cross)."""
    pos, after, nl = 0, None, -1
    while (step := _STEP.search(line, pos)) is not None:
        end = step.end()
        if after is None or after.start() < end:  # else still the first one at or after end
            after = then.search(line, end)
            if after is None:
                return None
        if nl < end:
            nl = line.find("\n", end)
            nl = len(line) if nl < 0 else nl
        if after.start() <= nl:
            return step, after
        pos = end
    return None


def parse_line(line: str, pattern: re.Pattern[str] | None = None, *,
               tokens_per_step: int | None = None,
               world_size: int | None = None) -> StepRecord | None:
    """One line's step record, or None when the line is not a step line. Raises _BadField for
    a step line that cannot be read and _NeedsSetting for a torchtitan line without
    ``tokens_per_step`` / ``world_size`` (parse_steps adds the line number). An interval
    line's ``steps`` is left at 1: parse_steps sizes it. No length cap: that is parse_steps'."""
    line = line.strip()
    if not line:
        return None
    if pattern is not None:
        m = pattern.search(line)
        return _from_groups(m.groupdict()) if m else None
    if "\x1b" in line:
        line = _ANSI.sub("", line).strip()
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, too deep, or an int of > 4300 digits
            obj = None
        if isinstance(obj, dict):
            return _from_mapping(obj)
    rec = _from_kv(line)
    if rec is not None:
        return rec
    mega = _MEGATRON.search(line)
    if mega is not None:
        return _megatron(line, mega)
    free = _step_then(line, _TIME)
    if free is None:
        bare = _step_then(line, _TIME_NO_UNIT)
        if bare is not None:
            raise _BadField(bare[1]["key"], "the step time has no unit")
        return _torchtitan(line, tokens_per_step, world_size)
    step, m = free
    t = float(m["time"]) / (1e3 if m["unit"].lower() == "ms" else 1.0)
    loss = _LOSS.search(line)
    tokens = _TOKENS.search(line)
    samples = _SAMPLES.search(line)
    mfu = _MFU.search(line)
    return StepRecord(  # _int: a number of over 4300 digits is a bad field, not a crash
        _int("step", step["step"]), t,
        float(loss["loss"]) if loss else None,
        _int("tokens", tokens["tokens"]) if tokens else None,
        _int("samples", samples["samples"]) if samples else None,
        float(mfu["mfu"]) / (100.0 if mfu["pct"] else 1.0) if mfu else None,
    )


def _from_kv(line: str) -> StepRecord | None:
    """A key=value step line's record (``step=`` or ``iter=`` and a time with its unit)."""
    kv = {m["key"]: (m["val"] + (m["pct"] if m["pct"] and _is_mfu_key(m["key"]) else ""), m["unit"])
          for m in _kv_matches(line)}
    if "step" not in kv and "iter" not in kv:
        return None
    d: dict[str, str | float] = {}  # a key's text, or step_time_s
    unitless: dict[str, str] = {}
    for key, (val, unit) in kv.items():
        if key in _TIME_KEYS_S + _TIME_KEYS_MS or key in ("time", "dt"):
            t = _time_s(val, unit, key)
            if t is not None:
                d["step_time_s"] = t
            else:
                unitless[key] = val
        else:
            d[key] = val
    if "step_time_s" not in d and unitless:
        key, val = next(iter(unitless.items()))
        raise _BadField(key, f"{val!r} has no unit")
    return _from_mapping(d)


def _megatron(line: str, head: re.Match[str]) -> StepRecord:
    """A Megatron-LM iteration line: ``| key: value |`` fields after the iteration; the
    elapsed time per iteration is the average since its previous line (an interval record)."""
    fields: dict[str, str] = {}
    for part in line[head.end():].split("|"):
        key, sep, val = part.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), val.strip())
    if _MEGATRON_TIME not in fields:
        raise _BadField(_MEGATRON_TIME, "missing from a Megatron iteration line")
    loss_key = next((k for k in _MEGATRON_LOSS if k in fields), None)
    batch = fields.get("global batch size")
    return StepRecord(
        _int("iteration", head["step"]), _float(_MEGATRON_TIME, fields[_MEGATRON_TIME]) / 1e3,
        _float(loss_key, fields[loss_key]) if loss_key else None, None,
        _int("global batch size", batch) if batch is not None else None, None, interval=True)


def _torchtitan(line: str, tokens_per_step: int | None,
                world_size: int | None) -> StepRecord | None:
    """A torchtitan metrics line (``step: N`` then ``tps: R`` and ``tflops:``; not ``validate
    step:``): the step time is tokens_per_step / (tps x world_size), averaged since its
    previous line."""
    step = _TITAN_STEP.search(line)
    tps = None if step is None else _TITAN_TPS.search(line, step.end())
    if (step is None or tps is None or _TITAN_TFLOPS.search(line, tps.end()) is None
            or line[:step.start()].rstrip().lower().endswith("validate")):
        return None
    how = ("a torchtitan metrics line gives tokens/s per device (tps), not a step time, and the "
           "step time is tokens_per_step / (tps x world_size): ")
    if tokens_per_step is None:
        raise _NeedsSetting("tokens_per_step", how + (
            "set the tokens of one step on all devices (workload.tokens_per_step; "
            "summarize_steps --tokens-per-step)"))
    if world_size is None:
        raise _NeedsSetting("world_size", how + (
            "set the number of devices (workload.world_size; summarize_steps --world-size)"))
    rate = _float("tps", tps["tps"].replace(",", ""))
    if not rate > 0:
        raise _BadField("tps", f"{tps['tps']!r} tokens/s gives no step time")
    loss = _TITAN_LOSS.search(line, step.end())
    mfu = _TITAN_MFU.search(line, step.end())
    pct = None if mfu is None or mfu["mfu"].upper() == "N/A" else mfu["mfu"]
    return StepRecord(
        _int("step", step["step"]), tokens_per_step / (rate * world_size),
        _float("loss", loss["loss"]) if loss else None, None, None,
        _float("mfu", pct.rstrip("%")) / (100.0 if pct.endswith("%") else 1.0) if pct else None,
        interval=True)


def _from_groups(g: dict[str, str | None]) -> StepRecord | None:
    if g.get("step") is None:
        return None
    if g.get("step_time_s") is not None:
        t = _float("step_time_s", g["step_time_s"])
    elif g.get("step_time_ms") is not None:
        t = _float("step_time_ms", g["step_time_ms"]) / 1e3
    elif g.get("time") is not None:
        unit = (g.get("unit") or "").lower()
        if unit not in ("ms", "s"):
            raise _BadField("unit", f"{g.get('unit')!r} is not ms or s")
        t = _float("time", g["time"]) / (1e3 if unit == "ms" else 1.0)
    else:
        return None
    if g.get("mfu_pct"):
        mfu: float | None = _float("mfu_pct", g["mfu_pct"]) / 100.0
    else:
        mfu = _float("mfu", g["mfu"]) if g.get("mfu") else None
    return StepRecord(
        _int("step", g["step"]),
        t,
        _float("loss", g["loss"]) if g.get("loss") else None,
        _int("tokens", g["tokens"]) if g.get("tokens") else None,
        _int("samples", g["samples"]) if g.get("samples") else None,
        mfu,
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


class _Blocks:
    """Sizes interval records from their step numbers: the steps since the previous distinct
    step number; the first line's since 0, or, with ``log_interval``, that interval (1 for a
    first line off it: both trainers log their first step). A repeated step number (several
    ranks printing) gets its first line's size."""

    def __init__(self, log_interval: int | None) -> None:
        self.log_interval = log_interval
        self.last: int | None = None
        self.before: int | None = None

    def sized(self, rec: StepRecord) -> StepRecord:
        if rec.step != self.last:
            self.before, self.last = self.last, rec.step
        if self.before is not None:
            k = rec.step - self.before  # < 1: steps going backwards, which check_steps refuses
        elif self.log_interval is None:
            k = rec.step
        else:
            k = min(self.log_interval, rec.step) if rec.step % self.log_interval == 0 else 1
        return replace(rec, steps=max(k, 1))


def _malformed(no: int, exc: _BadField) -> MalformedStepLine:
    if exc.why.endswith("has no unit"):
        fix = ("log the unit (time=30ms, step_time_ms=30) or pass a pattern "
               "(--pattern / workload.log.pattern) that names it: (?P<step_time_ms>...), "
               "(?P<step_time_s>...) or (?P<time>...) with (?P<unit>ms|s)")
    elif exc.field == "unit":
        fix = "make the pattern's (?P<unit>...) group match only ms or s"
    else:
        fix = "fix the trainer's log line, or pass a pattern that skips it"
    return MalformedStepLine(f"line {no}: field {exc.field!r}: {exc.why}; {fix}", no, exc.field)


def parse_steps(lines: Iterable[str], pattern: str | None = None, *,
                max_line_chars: int | None = MAX_LINE_CHARS, tokens_per_step: int | None = None,
                world_size: int | None = None,
                log_interval: int | None = None) -> list[StepRecord]:
    """Every step record in the log, in order; a line longer than ``max_line_chars`` (None: no
    cap) is not a step line. ``tokens_per_step`` (all devices) and ``world_size``: what a
    torchtitan line's tps needs; ``log_interval``: the first interval line's steps (module
    docstring). Raises MalformedStepLine at the first step line that cannot be read,
    MissingSetting at a line that needs a setting not given, and LogParseError when no step
    line is found (saying how many lines were too long)."""
    rx = compile_pattern(pattern) if pattern else None
    out: list[StepRecord] = []
    blocks = _Blocks(log_interval)
    long_lines = 0
    for no, line in enumerate(lines, 1):
        if is_long_line(line, max_line_chars):
            long_lines += 1
            continue
        try:
            rec = parse_line(line, rx, tokens_per_step=tokens_per_step, world_size=world_size)
        except _BadField as exc:
            raise _malformed(no, exc) from None
        except _NeedsSetting as exc:
            raise MissingSetting(f"line {no}: {exc.why}", exc.key) from None
        if rec is not None:
            out.append(blocks.sized(rec) if rec.interval else rec)
    if not out:
        how = "the given --pattern" if pattern else "any built-in step format"
        skipped = "".join(f" ({note})" for note in long_lines_note(
            long_lines, max_line_chars)) if max_line_chars is not None else ""
        raise LogParseError(
            f"no step lines matched {how}{skipped}; expected e.g. 'step 10 ... time 123.4ms', "
            "'iter 10: loss 4.2, time 123.45ms', key=value or JSON lines, Megatron-LM's "
            "iteration lines or torchtitan's metrics lines, or pass a regex "
            "with named groups (step, step_time_ms|step_time_s|time+unit)"
        )
    return out


def lines_covering(records: Sequence[StepRecord], steps: int) -> int:
    """The fewest leading records whose steps add up to at least ``steps`` (all of them when
    they do not): an interval line counts as its k steps."""
    total = 0
    for i, r in enumerate(records):
        if total >= steps:
            return i
        total += r.steps
    return len(records)
