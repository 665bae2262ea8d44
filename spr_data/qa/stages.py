"""The stages of a cleaning recipe, in order: the one place that maps recipe names to stages.

A new stage is one module with one class (see :mod:`spr_data.qa.stage` for the two shapes)
and one line here; its reasons, its place in the waterfall and in each reject's ``reasons``
follow from this list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from spr_data.qa.align_stage import AlignStage
from spr_data.qa.dedup import DedupStage
from spr_data.qa.langid import LangIdStage
from spr_data.qa.normalize import NormalizeStage
from spr_data.qa.quarantine import QuarantineStage
from spr_data.qa.rules import RulesStage
from spr_data.qa.stage import Stage
from spr_data.recipe import Recipe
from spr_data.schema import text_columns

__all__ = ["build_stages"]


def build_stages(recipe: Recipe, kind: str, langs: list[str], *,
                 quarantine: Sequence[str | Path] = (),
                 cleaned: str | Path | None = None, tokenized: bool = False) -> list[Stage]:
    """The stages ``clean`` runs for ``recipe`` on a ``kind`` dataset of ``langs``, in order:
    the quarantine lists first (when given), then the recipe's stages. ``cleaned``: the
    dataset's directory when this recipe cleaned it already (the align stage then reuses
    that run's decision). ``tokenized``: the dataset has token-id columns, so normalize
    leaves its text as it is (the ids were made from it)."""
    columns = text_columns(kind)  # type: ignore[arg-type]
    rules = RulesStage(recipe.rules, columns, langs)
    makers: dict[str, Callable[[], Stage]] = {
        "normalize": lambda: NormalizeStage(recipe.normalize, columns, rewrite=not tokenized),
        "rules": lambda: rules,
        "langid": lambda: LangIdStage(recipe.langid, columns, langs),
        "dedup": lambda: DedupStage(recipe.dedup, columns),
        "align": lambda: AlignStage(recipe.align, langs[0], langs[-1],
                                    rules if "rules" in recipe.stages else None,
                                    None if cleaned is None else str(cleaned)),
    }
    stages: list[Stage] = [QuarantineStage(tuple(map(str, quarantine)))] if quarantine else []
    stages += [makers[name]() for name in recipe.stages]
    return stages

