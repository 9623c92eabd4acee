"""Worker: what runs inside a trial or probe process: the bootstrap, the timing protocol, the
external command, the correctness probe, the profilers, the microbenchmarks."""
