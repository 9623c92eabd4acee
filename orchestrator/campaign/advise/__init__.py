"""Advise's campaign side: read a profiled run directory and the sweep files, or profile the
current baseline."""
