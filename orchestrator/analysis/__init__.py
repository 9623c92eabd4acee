"""Analysis (pure): from trial records to speedups, verdicts and decisions.md sections; the
correctness judgement, profile analysis, the simulator. Imports spec, platform and core."""
