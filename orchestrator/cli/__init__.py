"""Entry points: argument parsing, printing, exit codes. ``python -m orchestrator`` and the
other commands are thin modules beside this package."""
