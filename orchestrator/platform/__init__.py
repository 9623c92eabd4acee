"""Platform: the device seam, processes and their guards, run-directory claims, the hardware
registry, the environment report, FLOP counting. Imports only :mod:`orchestrator.core`."""
