"""Microbenchmarks of one operation per arm, and their direction against the end-to-end verdict."""
