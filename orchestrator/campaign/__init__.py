"""Campaign: the pre-flight checks, plan-launch-collect-analyze-decide-render, resume,
provenance, the gate runner, profiled runs, promotion, advise and the autopilot loop."""
