"""Core (pure): statistics, steady state, log parsing, sanitizing, errors, record formats.

Imports nothing else of the project."""
