"""Decoder-only transformer LM on a deterministic synthetic token stream."""
