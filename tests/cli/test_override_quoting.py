"""An override whose value holds a character Hydra's grammar refuses unquoted (a revision such
as HEAD~1, a ~/path) is refused in one line that shows the quoted form (issue 51)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from orchestrator.cli.main import main as cli_main
from orchestrator.cli.main import quote_hint
from orchestrator.core.errors import ConfigError
from tests.helpers.launching import in_dir


@pytest.mark.parametrize("override,quoted", [
    ("sweep.baseline=HEAD~1", """'sweep.baseline="HEAD~1"'"""),
    ("sweep.baseline=main^2", """'sweep.baseline="main^2"'"""),
    ("source.repo=~/code", """'source.repo="~/code"'"""),
    ("sweep.values=[HEAD~1,main]", """'sweep.values=["HEAD~1",main]'"""),
    ("+workload.params.flags=a;b", """'+workload.params.flags="a;b"'"""),
])
def test_the_hint_quotes_the_value_and_hydra_parses_it(override: str, quoted: str) -> None:
    hint = quote_hint(override)
    assert f"write {quoted} (the outer quotes keep the shell" in hint
    # what the shell hands over parses, to the value meant
    (arg,) = shlex.split(quoted)
    parsed = OverridesParser.create().parse_override(arg)
    value = parsed.value()
    assert "~" in str(value) or "^" in str(value) or ";" in str(value), value


def test_no_hint_where_quoting_is_not_the_problem() -> None:
    assert quote_hint("sweep.values=[1,2") == ""
    assert quote_hint("sweep.baseline=${oc.env:X}") == ""
    assert quote_hint("""sweep.baseline='HEAD~1'""") == ""
    assert quote_hint("+sweep") == ""


def test_an_unquoted_revision_is_one_line_with_the_quoted_form(compose: Any) -> None:
    with pytest.raises(ConfigError, match=r"""^override: cannot parse: .*sweep\.baseline=HEAD~1; """
                                          r"""Hydra's grammar takes '~' only in a quoted value: """
                                          r"""write 'sweep\.baseline="HEAD~1"'"""):
        compose(["workload=gpt_test", "+sweep=fa2", "sweep.baseline=HEAD~1"])


@pytest.mark.parametrize("multirun", [[], ["-m"]])
def test_the_cli_says_it_in_one_line_and_writes_nothing(
        tmp_path: Path, capsys: Any, multirun: list[str]) -> None:
    """-m parsed the overrides without the translation: a traceback."""
    with in_dir(tmp_path), pytest.raises(SystemExit) as exc:
        cli_main([*multirun, "+sweep=fa2", "sweep.baseline=HEAD~1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and """write 'sweep.baseline="HEAD~1"'""" in err[0], err
    assert not any(tmp_path.iterdir())
