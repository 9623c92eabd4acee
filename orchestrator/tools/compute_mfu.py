"""``python -m orchestrator.tools.compute_mfu`` (:mod:`orchestrator.cli.tools.compute_mfu`)."""

from orchestrator.cli.tools.compute_mfu import main

if __name__ == "__main__":
    raise SystemExit(main())
