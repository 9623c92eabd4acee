from orchestrator.cli.baseline import main

if __name__ == "__main__":
    raise SystemExit(main())
