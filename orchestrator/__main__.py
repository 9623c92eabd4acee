"""``python -m orchestrator +sweep=NAME [overrides]``"""

from orchestrator.cli.main import main

if __name__ == "__main__":
    main()
