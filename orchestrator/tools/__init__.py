"""``python -m orchestrator.tools.NAME``: the command-line tools (their code lives in
:mod:`orchestrator.cli.tools`)."""
