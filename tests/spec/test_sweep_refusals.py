"""What a sweep can never run is refused before any work, in one line naming the key and the
fix (issue 51): an arm without a label."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.core.errors import ConfigError

CALIBRATE = ["workload=synthetic", "+sweep=calibrate"]
ENV_SWEEP = [*CALIBRATE, "sweep.variable=env.FOO", "sweep.baseline=x", "sweep.labels=null"]


@pytest.mark.parametrize("overrides,match", [
    # it was accepted, and decisions.md read "reject       : reject: ..."
    (["sweep.labels=['',b,c]"],
     (r"^sweep\.labels\[0\]: gives the arm an empty label \(''\), and a verdict is named by "
      r"its label; give sweep\.labels\[0\] a name that is not blank$")),
    (["sweep.labels=[a,'   ',c]"], r"^sweep\.labels\[1\]: gives the arm an empty label \('   '\)"),
    (["sweep.baseline_label=''"], r"^sweep\.baseline_label: gives the arm an empty label"),
    (["sweep.baseline_label=' '"], r"^sweep\.baseline_label: gives the arm an empty label"),
])
def test_an_empty_or_blank_label_is_refused(compose: Any, overrides: list[str],
                                            match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose([*CALIBRATE, *overrides])


def test_a_value_whose_own_text_is_empty_needs_a_label(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"^sweep\.values\[0\]: gives the arm an empty label "
                                          r"\(''\).*; name every value with sweep\.labels="):
        compose([*ENV_SWEEP, "sweep.values=['',y]"])
    with pytest.raises(ConfigError, match=r"^sweep\.baseline: gives the arm an empty label.*"
                                          r"sweep\.baseline_label=NAME"):
        compose([*ENV_SWEEP, "sweep.values=[y]", "sweep.baseline_label=null", "sweep.baseline=''"])
    assert compose([*ENV_SWEEP, "sweep.values=['',y]", "sweep.labels=[unset,y]"])
