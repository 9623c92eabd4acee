"""Next hypothesis from evidence: rank the sweeps by the Amdahl bound of what a profile shows
(:mod:`.rank`, pure), read a profiled run directory or profile the current baseline
(:mod:`.load`, :mod:`.profile`), and the command (:mod:`.cli`)."""
