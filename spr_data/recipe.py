"""Cleaning recipes: which QA stages run, in which order, with which thresholds.

A recipe is a TOML file (see ``data_manifests/``). Anything it leaves out takes a default that
suits the dataset's languages; an unknown key or a value of the wrong type is an error that
names it. The *resolved* recipe — every value filled in — is what the run records and hashes.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from spr_data.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "STAGES",
    "AlignConfig",
    "DedupConfig",
    "LangIdConfig",
    "NormalizeConfig",
    "Recipe",
    "RulesConfig",
    "SideRules",
    "default_recipe",
    "load_recipe",
]

STAGES = ("normalize", "rules", "langid", "dedup", "align")

#: Languages whose script carries more per character than Latin does (Han, kana, Hangul):
#: their sides default to 400 characters and 400 words (a Han or kana letter counts as a
#: word). On NTREX's 1,997 sentences Chinese runs 0.34x English's characters (median),
#: Japanese 0.46x, Korean 0.53x.
_DENSE = {"zh", "zho", "cmn", "ja", "jpn", "ko", "kor", "yue", "wuu"}
#: Languages written without word spaces in a script that is not dense: every letter counts as
#: a word (:data:`spr_data.qa.scripts.CJK`), and on NTREX their sentences run 0.96-1.26x
#: English's characters (median; Khmer and Myanmar up to 2.1-2.3x at the 99th percentile). So
#: they keep the Latin limit on characters, with as many words. At 400 and 400 (before stop
#: 49), 0.35-0.55% of NTREX's real Khmer, Myanmar and Tibetan pairs were rejected as too long.
_UNSPACED = {"th", "tha", "lo", "lao", "km", "khm", "my", "mya", "bo", "bod"}


@dataclass(frozen=True)
class _Allowed:
    """The values a numeric key may take, and why: an out-of-range value would silently turn a
    check off or reject every row, so the error says what is allowed instead."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def admits(self, x: float) -> bool:
        if self.low is not None and (x < self.low or (self.low_open and x == self.low)):
            return False
        return not (self.high is not None
                    and (x > self.high or (self.high_open and x == self.high)))

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            text = (f"in {'(' if self.low_open else '['}{self.low:g}, "
                    f"{self.high:g}{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"{'>' if self.low_open else '≥'} {self.low:g}"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '≤'} {self.high:g}"
        else:
            text = ""
        return f"{text} ({self.why})" if self.why else text


def _key(default: Any, low: float | None = None, high: float | None = None, *,
         low_open: bool = False, high_open: bool = False, why: str = "") -> Any:
    """A recipe field whose allowed range travels with it, where the loader finds it."""
    allowed = _Allowed(low, high, low_open, high_open, why)
    return field(default=default, metadata={"allowed": allowed})


_SHARE = "a share"
_PROBABILITY = "a probability"


@dataclass(frozen=True)
class NormalizeConfig:
    """Text normalization; it changes rows (and flags them) but never rejects one."""

    html_unescape: bool = True
    #: C1 controls (U+0080-U+009F) → the Windows-1252 characters of those bytes: text read
    #: as Latin-1 gets its quotes back, and UTF-8 so read stays visible as mojibake
    c1_as_cp1252: bool = True
    nfc: bool = True
    strip_invisible: bool = True
    collapse_whitespace: bool = True


@dataclass(frozen=True)
class SideRules:
    """Thresholds for one side (or the text of a mono corpus)."""

    min_chars: int = _key(1, 0)
    max_chars: int = _key(1000, 1)
    min_words: int = _key(1, 0)
    max_words: int = _key(250, 1)
    #: letters and digits over visible characters (quotes or brackets around the whole side
    #: not counted): below it, a side is a symbol pile (junk)
    min_letter_share: float = _key(0.5, 0.0, 1.0, why=_SHARE)
    #: letters of the side's expected script(s) over all its letters, a dense-script
    #: character counting as several Latin letters (script mismatch)
    min_script_share: float = _key(0.3, 0.0, 1.0, why=_SHARE)
    max_char_run: int = _key(10, 1, why="0 would reject every side")
    max_word_run: int = _key(4, 1, why="0 would reject every side")
    reject_url_only: bool = True
    reject_html: bool = True
    reject_boilerplate: bool = True
    #: UTF-8 read as cp1252 or Latin-1 ("Ã©", "â€™", "å¥½") and U+FFFD replacement characters
    reject_mojibake: bool = True
    #: words whose letters switch between Latin and Cyrillic or Greek inside them ("Тhе"):
    #: look-alike letters swapped in, or UTF-8 read as cp1251
    reject_mixed_script: bool = True


@dataclass(frozen=True)
class RulesConfig:
    """Rule filters: per-side thresholds plus the checks that compare the two sides."""

    src: SideRules = field(default_factory=SideRules)
    tgt: SideRules = field(default_factory=SideRules)
    #: longer over shorter side, in length units (characters, a CJK letter weighing as
    #: several), beyond which a pair is always rejected
    max_length_ratio: float = _key(3.0, 1.0, low_open=True,
                                   why="longer over shorter side is at least 1")
    #: added to both lengths, so that an empty side is no division by zero; small, so that
    #: it does not hide a short side
    length_ratio_smoothing: float = _key(1.0, 0.0, low_open=True)
    #: reject a pair whose log length ratio lies this many spreads from the corpus' own
    #: centre (both measured on each batch of rows: ``length_ratio_z``) …
    length_ratio_z: float = _key(3.0, 0.0, low_open=True)
    #: … and whose ratio, relative to that centre, is above this (a side at least half as
    #: long as the other predicts is never a length mismatch)
    length_ratio_floor: float = _key(2.0, 1.0, why="a ratio relative to the centre, ≥ 1")
    #: reject a pair where one side's mean word length lies this many spreads above the
    #: corpus' own, alone and over the other side's (its spaces lost: ``spaces_lost``) …
    reject_spaces_lost: bool = True
    spaces_lost_z: float = _key(3.5, 0.0, low_open=True)
    #: … and is over this many times what they predict (words of another language are
    #: longer, but not twice as long)
    spaces_lost_floor: float = _key(2.0, 1.0, why="a ratio relative to the centre, ≥ 1")
    reject_copied: bool = True
    numbers_must_match: bool = True
    #: reject a pair where one side ends a sentence and the other has its sentence end
    #: inside and none at its end (its words shuffled: ``sentence_end_inside``)
    reject_end_inside: bool = True
    #: reject a pair where one side stops where no sentence ends and the other ends its
    #: sentence (its last word seen in the batch only as the start of longer ones, or a
    #: common word that ends no sentence there: ``cut_short``)
    reject_cut_short: bool = True


@dataclass(frozen=True)
class LangIdConfig:
    """fastText language identification on each side."""

    #: reject only when fastText is at least this sure of a wrong language …
    min_confidence: float = _key(0.5, 0.0, 1.0, why=_PROBABILITY)
    #: … and gives the expected language less than this (among its top 3 guesses)
    max_expected_p: float = _key(0.05, 0.0, 1.0, why=_PROBABILITY)
    #: shorter segments are judged by their script instead (fastText guesses on them) …
    min_chars: int = _key(20, 0)
    #: … but for those of ``short_chars`` or more, fastText decides where it is at least
    #: ``short_min_confidence`` sure
    short_chars: int = _key(10, 0)
    short_min_confidence: float = _key(0.9, 0.0, 1.0, why=_PROBABILITY)
    #: decide by script evidence where it is reliable, at any length: kana on a Chinese side
    #: is Japanese, Hangul is Korean, 嘅/咗/佢 are Cantonese; a Japanese side without kana
    #: that fastText calls Chinese is Chinese
    script_evidence: bool = True
    #: labels that count as the dataset's language, e.g. zh = ["zh", "wuu", "yue"]
    aliases: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class DedupConfig:
    """Exact duplicates after normalization: the first row by id is kept."""

    pairs: bool = True
    #: reject rows whose source already has this many different targets (0: no limit)
    max_targets_per_source: int = _key(0, 0, why="0: no limit")


@dataclass(frozen=True)
class AlignConfig:
    """Lexical alignment score (IBM Model 1 in both directions) and its threshold.

    By default the threshold is *calibrated* on negatives made from the corpus itself (its
    pairs re-paired, shifted by one, truncated): see :mod:`spr_data.qa.align`.
    """

    #: reject below this score (a fixed align_score) instead of the calibrated threshold
    min_score: float | None = _key(None, high=0.0,
                                   why="an align_score is at most about 0: every token "
                                       "certainly linked")
    #: the old rule, only when asked: reject this share of the training pairs' scores (it
    #: removes that share whatever the corpus holds; the report warns)
    quantile: float | None = _key(None, 0.0, 1.0, high_open=True,
                                  why="1 would reject every pair but the best")
    #: calibrated threshold: the share of the re-paired negatives it should reject …
    negative_recall: float = _key(0.98, 0.5, 1.0, high_open=True, why=_SHARE)
    #: … unless that would reject more than this estimated share of the real pairs
    max_real_reject: float = _key(0.02, 0.0, 1.0, low_open=True, why=_SHARE)
    #: … and only where a pair's p_translation is below this (a corpus without junk, or one
    #: cleaned already, then loses next to nothing)
    min_p_translation: float = _key(0.8, 0.0, 1.0, low_open=True, why=_PROBABILITY)
    #: synthetic negatives of each kind, as a share of the training pairs
    negatives_share: float = _key(0.02, 0.0, 1.0, low_open=True, why=_SHARE)
    #: reject a pair where one side says more than the other (a sentence appended, a side
    #: cut short): its length ratio and its two directions' difference, each in the corpus'
    #: own spreads, both pointing the same way by more than this many spreads together
    #: (:class:`spr_data.qa.align.PartialFit`); 0 turns the check off
    partial_z: float = _key(4.5, 0.0, why="0 turns the check off")
    #: … and by this many already where the side that says more also holds a sentence more:
    #: a sentence end with more text after it that the other side lacks (the next line glued
    #: on, a sentence split that went wrong); where instead the other side lost the end mark
    #: it has (cut short), in a corpus whose sides seldom go without one, by this many to
    #: about 3.5, the fewer the rarer a missing mark among its real pairs (the report's
    #: ``z_lost_end``); 0 asks no less of either
    partial_z_sentence: float = _key(2.5, 0.0, why="0 turns the allowance off")
    #: reject runs of rows one line out of step (a Moses file that lost a line): a run needs
    #: this many neighbouring rows whose lines translate each other better than their own;
    #: 0 turns it off (see :func:`spr_data.qa.align.shifted_runs`)
    shift_links: int = _key(2, 0, why="0 turns the check off")
    iterations: int = _key(3, 1, why="rounds of EM; 0 leaves the model untrained")
    #: over-relaxed EM (1.0: plain EM); at 2.0, 3 rounds decide as 5 plain ones did
    relaxation: float = _key(2.0, 1.0, 4.0, high_open=True, why="1.0 is plain EM")
    #: in scoring, a word may be the best link of at most max(2, fertility · m/l) words of the
    #: other side (a rare word of a non-translation otherwise "explains" all of it); 0: off
    fertility: float = _key(1.5, 0.0, 100.0, high_open=True, why="0 turns the limit off")
    #: in scoring, a word's log-link weighs log(1 + pairs/count)^idf_power: frequent words
    #: find a partner in any sentence, rare ones only in a translation; 0: all alike
    idf_power: float = _key(0.25, 0.0, 4.0, high_open=True, why="0 weighs every word alike")
    #: EM by agreement: both directions learn from the links both of them believe, so a rare
    #: word of a junk pair does not take a whole sentence (false: each direction alone)
    agreement: bool = True
    #: score each pair the model was trained on by what the other pairs taught it (its own
    #: share of the links taken out, a word seen once weighing nothing): in a small corpus of
    #: long sentences a junk pair's rare words otherwise link each other (NTREX, 1,937 news
    #: pairs, 8 languages, 25% junk: re-paired caught 0.62 -> 0.81, real lost 0.96 -> 2.02%);
    #: it costs real pairs in corpora of short sentences (docs/quality.md, *Leave one out*)
    leave_one_out: bool = False
    #: the worse direction's weight in align_score, the better one's 1 - worse_weight (0.5:
    #: both directions alike; 1.0: the worse alone decides)
    worse_weight: float = _key(0.5, 0.5, 1.0, why="0.5 weighs both directions alike")
    #: fit what a difference in final punctuation (? ! or else) costs a pair, from the corpus'
    #: own negatives (false: not used)
    punctuation: bool = True
    #: words are cut to their first stem_chars letters (code points; a Hangul syllable block
    #: counts as its 2-3 letters) before they are linked, so a word's inflected forms learn
    #: one set of links together (Chinese and other scripts tokenized by character are not
    #: affected); 0: whole words
    stem_chars: int = _key(6, 0, why="0 keeps whole words")
    max_train_pairs: int = _key(300_000, 1)
    #: train on the fewest pairs (at least 65,536) whose words are known nearly as well as
    #: from the whole sample: at most this share of the tokens fewer (0: the whole sample)
    sample_tolerance: float = _key(0.005, 0.0, 1.0, high_open=True,
                                   why="0 trains on the whole sample")
    seed: int = _key(0, 0)
    #: a dataset of trusted pairs to train on instead of the corpus being cleaned
    trusted: str | None = None
    #: an alignment model an earlier clean of this language pair wrote (OUT/align_model.npz),
    #: used instead of training one: the thresholds are still calibrated on this corpus
    model: str | None = None


@dataclass(frozen=True)
class Recipe:
    """A resolved cleaning recipe."""

    name: str = "default"
    stages: tuple[str, ...] = STAGES
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    rules: RulesConfig = field(default_factory=RulesConfig)
    langid: LangIdConfig = field(default_factory=LangIdConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    align: AlignConfig = field(default_factory=AlignConfig)
    #: ``clean`` refuses to publish when one reason rejects more than this share of the rows
    #: (a language-code typo rejects nearly all as wrong_lang); ``allow_heavy_loss`` accepts
    max_reason_share: float = _key(0.5, 0.0, 1.0, low_open=True, why=_SHARE)

    def __post_init__(self) -> None:
        """Refuse an impossible recipe however it was made (a file, or code calling clean)."""
        _check_numbers(self, "")
        for side in ("src", "tgt"):
            rules: SideRules = getattr(self.rules, side)
            for unit in ("chars", "words"):
                low, high = getattr(rules, f"min_{unit}"), getattr(rules, f"max_{unit}")
                if low > high:
                    raise InputError(f"recipe: rules.{side}.min_{unit} ({low}) should be ≤ "
                                     f"rules.{side}.max_{unit} ({high}): no side could pass")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def digest(self) -> str:
        """A hash of the resolved recipe: a relaunch with another recipe is refused by it."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _side_defaults(lang: str) -> SideRules:
    base = lang.lower().split("-")[0].split("_")[0]
    if base in _DENSE:
        return SideRules(max_chars=400, max_words=400)
    if base in _UNSPACED:
        return SideRules(max_words=SideRules().max_chars)
    return SideRules()


def default_recipe(langs: list[str], kind: str = "parallel") -> Recipe:
    """The built-in recipe for a dataset's languages; mono corpora skip pair-only stages."""
    sides = [_side_defaults(lang) for lang in langs] or [SideRules()]
    rules = RulesConfig(src=sides[0], tgt=sides[-1])
    stages = STAGES if kind == "parallel" else ("normalize", "rules", "langid", "dedup")
    return Recipe(rules=rules, stages=stages)


T = TypeVar("T")


def _convert(value: Any, hint: Any, where: str, allowed: _Allowed | None = None) -> Any:
    """Check ``value`` against the field's type and allowed range; ``where`` names the key."""
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is type(None) or hint is type(None):
        return value
    if args and type(None) in args:  # Optional[X]
        inner = next(a for a in args if a is not type(None))
        return None if value is None else _convert(value, inner, where, allowed)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise InputError(f"recipe: {where} should be a table, found {value!r}")
        return _build(hint, value, where)  # type: ignore[arg-type]
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(f"recipe: {where} should be a list of names, found {value!r}")
        return tuple(value)
    if origin is dict:
        if not isinstance(value, dict) or not all(
                isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value.values()):
            raise InputError(f"recipe: {where} should map names to lists of names, "
                             f"found {value!r}")
        return {k: list(v) for k, v in value.items()}
    if hint is bool:
        if not isinstance(value, bool):
            raise InputError(f"recipe: {where} should be true or false, found {value!r}")
        return value
    if hint is int:
        rule = allowed or _Allowed(low=0)
        if isinstance(value, bool) or not isinstance(value, int) or not rule.admits(value):
            raise InputError(f"recipe: {where} should be a whole number {rule}, found {value!r}")
        return value
    if hint is float:
        # NaN compares false with every threshold (a check turned off) and inf is not JSON
        rule = allowed or _Allowed()
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or not rule.admits(value)):
            raise InputError(f"recipe: {where} should be a finite number {rule}".rstrip()
                             + f", found {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise InputError(f"recipe: {where} should be a string, found {value!r}")
        return value
    raise InputError(f"recipe: {where} has an unsupported type")  # pragma: no cover


def _build(cls: type[T], table: dict[str, Any], where: str, base: T | None = None) -> T:
    hints = get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    names = set(known)
    # [rules] also takes the side keys, for both sides (_apply_shared_side_keys)
    allowed = names | ({f.name for f in fields(SideRules)} if cls is RulesConfig else set())
    for key in table:
        if key not in names:
            prefix = f"{where}." if where else ""
            close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.75)
            raise InputError(f"recipe: unknown key {prefix}{key}"
                             + (f"; did you mean {prefix}{close[0]}?" if close else "")
                             + f" (known: {', '.join(sorted(allowed))})")
    values = {}
    for key, value in table.items():
        inner_where = f"{where}.{key}" if where else key
        current = getattr(base, key) if base is not None else None
        if dataclasses.is_dataclass(hints[key]) and isinstance(value, dict) and current is not None:
            values[key] = _build(hints[key], value, inner_where, current)
        else:
            values[key] = _convert(value, hints[key], inner_where,
                                   known[key].metadata.get("allowed"))
    start = base if base is not None else cls()
    return replace(start, **values)  # type: ignore[type-var]


def _check_numbers(config: Any, where: str) -> None:
    """Check every number of a resolved (part of a) recipe against its field's range."""
    hints = get_type_hints(type(config))
    for f in fields(config):
        value = getattr(config, f.name)
        inner_where = f"{where}.{f.name}" if where else f.name
        if dataclasses.is_dataclass(value):
            _check_numbers(value, inner_where)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            _convert(value, hints[f.name], inner_where, f.metadata.get("allowed"))


def _apply_shared_side_keys(table: dict[str, Any]) -> dict[str, Any]:
    """``[rules]`` may hold side keys that apply to both sides; ``[rules.src]`` overrides."""
    rules = table.get("rules")
    if not isinstance(rules, dict):
        return table
    side_names = {f.name for f in fields(SideRules)}
    shared = {k: v for k, v in rules.items() if k in side_names}
    if not shared:
        return table
    _build(SideRules, shared, "rules")  # so that an error names the key as written
    rest = {k: v for k, v in rules.items() if k not in side_names}
    for side in ("src", "tgt"):
        own = rest.get(side, {})
        if not isinstance(own, dict):
            raise InputError(f"recipe: rules.{side} should be a table, found {own!r}")
        rest[side] = {**shared, **own}
    return {**table, "rules": rest}


def load_recipe(path: str | Path | None, langs: list[str], kind: str = "parallel") -> Recipe:
    """Read a recipe over the defaults for ``langs``; ``None`` gives the defaults."""
    base = default_recipe(langs, kind)
    if path is None:
        return base
    p = Path(path)
    try:
        table = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"recipe {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read recipe {p}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"recipe {p} is not valid TOML: {exc}") from exc
    try:
        recipe = _build(Recipe, _apply_shared_side_keys(table), "", base)
    except InputError as exc:
        raise InputError(str(exc).replace("recipe:", f"recipe {p}:", 1)) from None
    unknown = [s for s in recipe.stages if s not in STAGES]
    if unknown:
        raise InputError(f"recipe {p}: unknown stage {unknown[0]!r} (known: {', '.join(STAGES)})")
    order = [STAGES.index(s) for s in recipe.stages]
    if order != sorted(order) or len(set(order)) != len(order):
        raise InputError(f"recipe {p}: stages must be a subset of {', '.join(STAGES)}, "
                         "in that order, each once")
    if kind != "parallel" and "align" in recipe.stages:
        raise InputError(f"recipe {p}: the align stage needs a parallel corpus")
    align = table.get("align", {})
    if "min_score" in align and "quantile" in align:
        # min_score wins in clean: the quantile would be ignored, silently
        raise InputError(f"recipe {p}: align.min_score ({align['min_score']!r}) and "
                         f"align.quantile ({align['quantile']!r}) both set the alignment "
                         "threshold; choose one: min_score, a fixed align_score, or quantile, "
                         "the share of the training pairs' scores to fall below it")
    if recipe.align.leave_one_out and recipe.align.idf_power == 0.0:
        raise InputError(f"recipe {p}: align.leave_one_out reads the word counts the weights "
                         "keep; it needs align.idf_power > 0 (default 0.25)")
    if "model" in align and "trusted" in align:
        raise InputError(f"recipe {p}: align.model ({align['model']!r}) and align.trusted "
                         f"({align['trusted']!r}) both name where the alignment model comes "
                         "from; choose one")
    return recipe
