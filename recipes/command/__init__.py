"""The ``command`` workload: any external training command as a trial."""
