"""Launchers: run worker jobs (trials, the gate's probes) and hand back their records, whatever
the scheduler.

``base`` (the interface, record helpers), ``process`` (one worker process), ``inline`` /
``local`` / ``slurm`` (the implementations, side by side), ``slots`` (device slots),
``checks`` (launcher settings a type cannot check), ``factory`` (``make_launcher``).
"""
