"""``python -m orchestrator.tools.summarize_steps`` (:mod:`orchestrator.cli.tools.summarize_steps`)."""

from orchestrator.cli.tools.summarize_steps import main

if __name__ == "__main__":
    raise SystemExit(main())
