"""``python -m orchestrator.tools.env_report`` (:mod:`orchestrator.cli.tools.env_report`)."""

from orchestrator.cli.tools.env_report import main

if __name__ == "__main__":
    raise SystemExit(main())
