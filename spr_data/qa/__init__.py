"""Quality stages: pure functions over Arrow batches (rules, language id, dedup, alignment).

Nothing here imports ``spr_data.pipeline``: the runner and the commands live there and call
in (``tests/test_layout.py`` holds the line)."""
