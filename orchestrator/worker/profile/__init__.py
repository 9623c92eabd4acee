"""The profilers that run inside a trial process (framework, system and compute tools)."""
