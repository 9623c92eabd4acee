from orchestrator.cli.report import main

if __name__ == "__main__":
    raise SystemExit(main())
