"""Chunked analysis: a file too large for the context, processed chunk by chunk (seed 000)."""
