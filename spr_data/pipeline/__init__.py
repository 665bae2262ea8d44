"""Runners and commands that move data: ingest, clean, tokenize, audit, fertility, iterators."""
