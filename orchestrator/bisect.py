from orchestrator.cli.bisect import entry

if __name__ == "__main__":
    raise SystemExit(entry())
