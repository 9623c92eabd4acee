"""Every numeric config key has a range (orchestrator.spec.bounds), and a value outside it
(NaN, inf, negative, huge) is refused in one line naming the key before any work (issue 51)."""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.campaign.validate import validate
from orchestrator.cli.main import main as cli_main
from orchestrator.core.errors import ConfigError
from orchestrator.platform import hardware
from orchestrator.spec import config as cfgmod
from orchestrator.spec.bounds import BOUNDS, Bound, check_numbers, check_spending, numeric_fields
from recipes.registry import workload_kinds
from tests.helpers.launching import in_dir

# one composed config per workload kind, so that every kind's own numeric fields are reached
KINDS = {
    "gpt": ["workload=gpt_test", "+sweep=fa2_tiling"],
    "synthetic": ["workload=synthetic", "+sweep=calibrate"],
    "command": ["workload=command_busy", "+sweep=planted_command"],
    "muon_tp": ["workload=muon_tp_test", "+sweep=tp_mode"],
}


def _dataclasses(cls: type, seen: set[type]) -> None:
    if cls in seen:
        return
    seen.add(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        stack = [hints[f.name]]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and dataclasses.is_dataclass(t):
                _dataclasses(t, seen)
            stack.extend(typing.get_args(t))


def all_schemas() -> set[type]:
    """Every config dataclass: the root Config's tree and every registered workload kind's."""
    seen: set[type] = set()
    _dataclasses(cfgmod.Config, seen)
    workload_kinds()  # the recipes register their schemas
    for schema in cfgmod.WORKLOAD_SCHEMAS.values():
        _dataclasses(schema, seen)
    return seen


def test_every_numeric_field_of_every_config_dataclass_has_a_bound() -> None:
    keys = {key for cls in all_schemas() for _, key in numeric_fields(cls)}
    assert len(keys) > 80  # protocol, launcher, hardware, profile, every workload kind
    missing = sorted(keys - set(BOUNDS))
    assert not missing, f"numeric config keys without a bound in orchestrator.spec.bounds: {missing}"
    stale = sorted(set(BOUNDS) - keys)
    assert not stale, f"bounds for keys that are no numeric field (renamed?): {stale}"
    for key, b in BOUNDS.items():  # finite, ordered, a reason for every maximum
        assert math.isfinite(b.lo) and math.isfinite(b.hi) and b.lo < b.hi, key
        assert b.why, key


def test_every_default_lies_in_its_bound() -> None:
    check_numbers(cfgmod.Config())  # protocol, launcher, hardware, profile ... as declared
    for schema in cfgmod.WORKLOAD_SCHEMAS.values():
        check_numbers(schema(), "workload")


def _targets(obj: Any, key: str) -> Iterator[tuple[Any, str, str, Bound, Any]]:
    """(owner, field, dotted key, bound, hint) of every numeric field under ``obj``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = dict(numeric_fields(type(obj)))
        hints = typing.get_type_hints(type(obj))
        for f in dataclasses.fields(obj):
            path = f"{key}.{f.name}" if key else f.name
            if f.name in names:
                yield obj, f.name, path, BOUNDS[names[f.name]], hints[f.name]
            else:
                yield from _targets(getattr(obj, f.name), path)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _targets(v, f"{key}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _targets(v, f"{key}[{i}]")


def _wrap(hint: Any, value: Any, path: str) -> tuple[Any, str]:
    """``value`` in the container the field's type asks for, and the leaf's dotted key."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        return _wrap(args[0], value, path)
    if origin is list:
        inner, leaf = _wrap(args[0], value, f"{path}[0]")
        return [inner], leaf
    if origin is dict:
        inner, leaf = _wrap(args[1], value, f"{path}.x")
        return {"x": inner}, leaf
    return value, path


def bad_values(b: Bound) -> list[Any]:
    """NaN, inf, -inf, 1e308, a huge int; -1 and 0 where the bound refuses them."""
    out: list[Any] = [math.nan, math.inf, -math.inf, 1e308, 10**30]
    for v in (-1, 0):
        if v < b.lo or (v == b.lo and b.lo_open):
            out.append(v)
    return out


def test_fuzz_every_numeric_key_refuses_nan_inf_negative_and_huge(
        compose: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """For every numeric field reached from a composed config of each workload kind: each bad
    value is refused by the walk naming exactly that key, and by the whole pre-flight
    (validate) as a ConfigError, one line, never another exception."""
    # the hardware registry read once, not once per value (YAML parsing is most of the time)
    monkeypatch.setattr(hardware, "load_registry", functools.lru_cache()(hardware.load_registry))
    tried: set[str] = set()
    for kind, overrides in KINDS.items():
        base = compose([*overrides, "hardware=h100"])
        for owner, name, path, bound, hint in list(_targets(base, "")):
            good = getattr(owner, name)
            for value in bad_values(bound):
                wrapped, leaf = _wrap(hint, value, path)
                setattr(owner, name, wrapped)  # in place, put back below (a copy costs more)
                try:
                    with pytest.raises(ConfigError) as walk:
                        check_numbers(base)
                    assert walk.value.key == leaf and "\n" not in str(walk.value), \
                        (kind, leaf, value)
                    with pytest.raises(ConfigError) as pre:
                        validate(base)
                    assert "\n" not in str(pre.value), (kind, leaf, value)
                finally:
                    setattr(owner, name, good)
            tried.add(path.split("[")[0])
        validate(base)  # every value put back
    # the issue's keys, and a key of every group, were among them
    for key in ("protocol.paired_min_s", "protocol.block_steps", "protocol.measured_min_s",
                "launcher.slurm.mem_gb", "hardware.peak_tflops", "profile.tool_timeout_s",
                "workload.model.d_model", "workload.units_per_token", "workload.time_limit_s",
                "workload.optimizer.ns_steps", "invariants.tolerances.fp32.rel_l2"):
        assert key in tried, key


@pytest.mark.parametrize("override,match", [
    # the issue's overrides: every trial failed, the arms ran until the timeout, a traceback
    ("protocol.paired_min_s=inf",
     (r"^protocol\.paired_min_s: must be finite, got inf; set protocol\.paired_min_s to a "
     r"number in \[0, 604800\]$")),
    ("protocol.block_steps=1000000000",
     (r"^protocol\.block_steps: must be <= 1000000 \(.*\), got 1000000000; set "
     r"protocol\.block_steps to an integer in \[1, 1000000\]$")),
    ("protocol.measured_min_s=1e308",
     r"^protocol\.measured_min_s: must be <= 604800 \(a week\), got 1e\+308"),
    ("protocol.seed=100000000000000000000000000", r"^protocol\.seed: must be <= 4294967295"),
    ("protocol.confidence=0.9999999999999",
     r"^protocol\.confidence: must be <= 0\.999999999 .*got 0\.9999999999999"),
    ("launcher.slurm.poll_interval_s=-inf",
     r"^launcher\.slurm\.poll_interval_s: must be finite, got -inf"),
    ("launcher.slurm.poll_interval_s=0", r"^launcher\.slurm\.poll_interval_s: must be > 0, got 0"),
    ("protocol.projection_steps=[100,1000000000000000]",
     r"^protocol\.projection_steps\[1\]: must be <= 1000000000000"),
    ("workload.model.d_model=100000000000", r"^workload\.model\.d_model: must be <= 10000000"),
])
def test_the_issues_overrides_are_refused_naming_the_key_and_the_range(
        compose: Any, override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose(["workload=gpt_test", "+sweep=fa2_tiling", override])


def test_a_sweep_value_out_of_range_is_refused_naming_the_arm(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"^sweep\.values\[0\]: arm '.*' sets "
                                          r"workload\.units_per_token: must be <= 1000000"):
        compose(["workload=synthetic", "+sweep=calibrate", "sweep.variable=workload.units_per_token",
                 "sweep.baseline=1.0", "sweep.values=[1e300]", "sweep.labels=[huge]"])


def test_a_first_look_that_spends_no_error_rate_is_refused(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"^protocol\.alpha_spending: 9 leaves the first look "
                                          r"\(after protocol\.repeats=1 of protocol\.max_rounds="
                                          r"1000 rounds\) an error rate of 5\.0e-29"):
        compose(["workload=gpt_test", "+sweep=fa2_tiling", "protocol.alpha_spending=9",
                 "protocol.repeats=1", "protocol.max_rounds=1000"])
    p = cfgmod.ProtocolConfig(repeats=3, max_rounds=7)
    check_spending(p)  # the default: (3/7)^3 of 5 %


def test_a_refused_number_writes_nothing_anywhere(tmp_path: Path, capsys: Any) -> None:
    """Through the real entry point, in this process (a subprocess per value would cost
    seconds each): one line, exit 2, no run directory and nothing else in the cwd."""
    for override in ("protocol.paired_min_s=inf", "protocol.block_steps=1000000000",
                     "protocol.measured_min_s=1e308", "protocol.trial_timeout_s=nan"):
        with in_dir(tmp_path), pytest.raises(SystemExit) as exc:
            cli_main(["workload=gpt_test", "+sweep=fa2_tiling", "launcher=inline", override])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {override.split('=')[0]}: "), err
    assert not any(tmp_path.iterdir())
