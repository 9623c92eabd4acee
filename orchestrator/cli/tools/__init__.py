"""Command-line tools usable on logs and numbers from any trainer, not only ours.

Each is a module CLI (``python -m orchestrator.tools.NAME``) and a console script, and follows
one style (:mod:`orchestrator.cli.tools._cli`): text by default, ``--json`` for machines, bad input
as one line ``error: <what>: <how to fix>`` on stderr with exit code 2.
"""
