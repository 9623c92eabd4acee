"""The shared style of the orchestrator's command-line tools.

- ``make_parser(prog, description)``: argparse with ``--json`` already added; argparse's own
  usage errors are turned into the one-line form below.
- ``run(main, argv)``: calls ``main(args)``; a :class:`ToolError` (or ConfigError) becomes
  ``error: <key>: <message>`` on stderr and exit code 2, nothing else is printed.
- ``positive_number(flag, value, hi=...)`` and ``number(flag, value, bound)``: a numeric flag
  (or file field) finite and in its range (an :class:`~orchestrator.spec.bounds.Bound`), else
  the one-line error naming it and the range.
- ``writable_dir(flag, path)``: a directory flag that is not a file or under one.
- ``emit(data, text_lines, as_json)``: JSON (sorted, indented) or the text lines, on stdout.
- ``quiet_broken_pipe(fn)``: when the reader of stdout goes away (``tool | head -1``), stop
  quietly as Unix tools do: no traceback, exit code 141 (128 + SIGPIPE, what a shell reports
  for ``yes | head -1``). ``run`` applies it; the other entry points call it themselves.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from orchestrator.core.errors import ConfigError
from orchestrator.spec.bounds import Bound

EXIT_BAD_INPUT = 2
EXIT_BROKEN_PIPE = 128 + 13  # a process killed by SIGPIPE, as a shell reports it


class ToolError(ConfigError):
    """Bad input to a tool: names the argument (or file) and how to fix it; exit code 2."""


# the most a device does and the most one step costs: far above any (peaks of the fastest
# accelerators are thousands of TFLOP/s), finite so that 1e308 is refused as a typo
MAX_PEAK_TFLOPS = 1e6
MAX_STEP_TFLOP = 1e9  # a zettaFLOP per device-step (workload.flops_per_step's bound)


def positive_number(flag: str, value: Any, hi: float = math.inf, why: str = "") -> float:
    """A flag's (or file field's) value as a positive finite float, at most ``hi`` (``why``:
    why the maximum); ToolError naming it else."""
    if value is None:
        raise ToolError(flag, "is required")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ToolError(flag, f"must be a number, got {value!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise ToolError(flag, f"must be a positive number, got {value!r}")
    if x > hi:
        because = f" ({why})" if why else ""
        raise ToolError(flag, f"must be at most {hi:g}{because}, got {value!r}; give a "
                        f"number in (0, {hi:g}]")
    return x


def number(flag: str, value: Any, bound: Bound) -> Any:
    """A flag's (or file field's) value, text or number, checked against ``bound`` (finite, in
    range, whole where it must be); ToolError naming the flag and the range else."""
    if value is None:
        raise ToolError(flag, "is required")
    if isinstance(value, str):
        try:
            value = int(value) if bound.integer else float(value)
        except ValueError:
            raise ToolError(flag, f"must be a number, got {value!r}") from None
    problem = bound.problem(value)
    if problem:
        raise ToolError(flag, f"{problem}; give {bound.range_text()}")
    return value


def writable_dir(flag: str, path: Path) -> Path:
    """``path`` unless it is a file, or lies under one (a directory flag: every later write
    there would fail with a traceback); ToolError naming the flag and the fix."""
    if path.exists() and not path.is_dir():
        raise ToolError(flag, f"{path} is a file, not a directory; give a directory (a new one "
                        "is made), or remove the file")
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ToolError(flag, f"{path} is under {parent}, which is a file, not a directory; "
                        "give another directory")
    return path


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        print(f"error: {self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def make_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=description,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


def intermixed(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Let positional overrides come after the flags too (``--base X workload=NAME``): a
    tool without subcommands parses its arguments intermixed."""
    parser.parse_args = parser.parse_intermixed_args  # type: ignore[method-assign, assignment]
    return parser


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf become null (strict JSON has no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def emit(data: Any, text_lines: Sequence[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps(_clean(data), indent=2, sort_keys=True, allow_nan=False))
    else:
        print("\n".join(text_lines))


def _stdout_to_devnull() -> None:
    # the interpreter flushes stdout once more at exit; with the reader gone that flush would
    # print "Exception ignored ... BrokenPipeError", so whatever is left goes nowhere
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (replaced, closed)
        pass


def quiet_broken_pipe(fn: Callable[[], int | None]) -> int:
    """``fn()``'s exit code; 141 without a traceback when stdout's reader has gone away.

    Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError (at the write,
    or in the final flush); a Unix tool would just stop. ``--help`` output (argparse's
    SystemExit after printing) is covered too."""
    try:
        try:
            rc = fn()
        finally:
            sys.stdout.flush()  # a late write fails here, inside the guard, not at shutdown
        return rc or 0
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE


def run(main: Callable[[argparse.Namespace], int | None], parser: argparse.ArgumentParser,
        argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        args = parser.parse_args(argv)
        try:
            return main(args) or 0
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT

    return quiet_broken_pipe(body)
