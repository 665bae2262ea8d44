"""Quality checks over datasets (rules, language id, dedup, alignment, audit)."""
