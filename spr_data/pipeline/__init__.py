"""Stages that move data: ingest now; the stage runner, tokenize and iterators later."""
