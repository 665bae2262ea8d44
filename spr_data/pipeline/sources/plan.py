"""Planning an ingest: the inputs' formats (by name, or as given), the corpus's kind, and its
languages (given, or read from the file names), and one :class:`Source` per input.

A format is registered in :data:`SOURCES`: its module holds the ``Source`` subclass, which
declares its name endings, its fixed kind (if any) and how it takes ``--columns``/``--keys``.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spr_data.errors import InputError
from spr_data.langcodes import check_lang, problem, suggest
from spr_data.pipeline.sources.base import COMPRESSIONS, InputFile, Selection, Source
from spr_data.pipeline.sources.jsonl import JsonlSource
from spr_data.pipeline.sources.moses import MosesSource
from spr_data.pipeline.sources.parquet import ParquetSource
from spr_data.pipeline.sources.text import TextSource
from spr_data.pipeline.sources.tsv import TsvSource
from spr_data.qa.scripts import normalize_lang
from spr_data.reader import RetryPolicy, file_size, filesystem_for, is_url
from spr_data.schema import Kind

#: The input formats, by the name ``--format`` takes: a new format is its module and a line here.
SOURCES: dict[str, type[Source]] = {
    "tsv": TsvSource,
    "moses": MosesSource,
    "jsonl": JsonlSource,
    "parquet": ParquetSource,
    "text": TextSource,
}
FORMATS = tuple(SOURCES)

_EXTENSIONS = {ext: fmt for fmt, cls in SOURCES.items() for ext in cls.extensions}

_LANG = r"[a-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})?"
_LANG_SUFFIX = re.compile(rf"^{_LANG}$")
#: suffixes that name a side of a pair, not its language (though each is an ISO 639-3 code:
#: labelling rows "src" would make clean expect Logudorese Sardinian)
_SIDE_SUFFIXES = {"src", "tgt", "trg"}
_LANG_PAIR_IN_NAME = re.compile(r"(?:^|[._-])([a-z]{2,3})-([a-z]{2,3})(?=[._]|$)")


@dataclass
class SourcePlan:
    """The sources of one ingest call and what they imply about the dataset."""

    sources: list[Source]
    kind: Kind
    langs: list[str]


def _strip_compression(path: Path) -> str:
    name = path.name
    suffix = path.suffix.lower()
    return name[: -len(suffix)] if suffix in COMPRESSIONS else name


def _format_of(path: Path) -> str | None:
    return _EXTENSIONS.get(Path(_strip_compression(path)).suffix.lower())


def _moses_langs(a: Path, b: Path, *, named_apart: bool = False) -> tuple[str, str] | None:
    """``train.en`` + ``train.de`` → ``("en", "de")``; None when the names do not pair up.

    ``named_apart`` (the files are a Moses pair by ``--format moses``): also names whose
    stems differ and that end in a text extension, each giving a language code
    (``newstest2019-src.eng.txt.gz`` + ``newstest2019-ref.rus.txt.gz`` → ``("eng", "rus")``)."""
    sa, sb = Path(_strip_compression(a)), Path(_strip_compression(b))
    la, lb = sa.suffix[1:].lower(), sb.suffix[1:].lower()  # corpus.EN corpus.DE too
    if sa.stem == sb.stem and la != lb and _LANG_SUFFIX.match(la) and _LANG_SUFFIX.match(lb):
        return la, lb
    if not named_apart:
        return None
    codes = []
    for name in (sa, sb):
        if _format_of(name) == "text":  # .txt: the code is the suffix before it
            name = Path(name.stem)
        code = name.suffix[1:].lower()
        if not _LANG_SUFFIX.match(code) or problem(code) is not None:
            return None
        codes.append(code)
    return (codes[0], codes[1]) if codes[0] != codes[1] else None


def _refuse_a_pair_read_as_mono(groups: list[tuple[str, list[Path]]],
                                found: list[list[str] | None]) -> None:
    """Two text files whose names differ only in their language (``train.en.txt`` and
    ``train.de.txt``) are the sides of a pair far more often than a two-language mono corpus:
    read as mono, both languages went into one dataset labelled ``und``."""
    (fa, (a,)), (fb, (b,)) = groups
    if fa != "text" or fb != "text" or not found[0] or not found[1]:
        return
    from spr_data.qa.scripts import LANGUAGE_SCRIPTS, normalize_lang

    la, lb = found[0][0], found[1][0]
    rest_a = [part for part in a.name.lower().split(".") if part != la.lower()]
    rest_b = [part for part in b.name.lower().split(".") if part != lb.lower()]
    known = all(normalize_lang(code) in LANGUAGE_SCRIPTS for code in (la, lb))
    if known and la != lb and rest_a == rest_b and len(rest_a) < len(a.name.split(".")):
        raise InputError(
            f"{a.name} and {b.name} look like the two sides of a pair (their names differ only "
            f"in the language, {la} and {lb}): pass --format moses to ingest them as a parallel "
            "corpus (line i of one translates line i of the other), or --lang und to ingest "
            "them as one multilingual mono corpus")


def _check_langs_fit_names(langs: Sequence[str] | None, files: Sequence[str],
                           names: Sequence[str]) -> None:
    """Refuse ``--langs`` that the file names contradict: a swapped Moses pair (the first
    file is always the source, so ``q.en q.de --langs de-en`` would store English labelled
    ``de``), another language than a name gives (``val.de --langs en-fr``), or a typo of it
    (``en-dee``, a real code: Dewoin). Different codes of one language are no contradiction
    (``--langs en-de`` for ``train.eng train.deu``)."""
    if langs is None or len(langs) != len(names) or set(names) <= _SIDE_SUFFIXES:
        return  # train.src + train.tgt name the sides, not languages
    for side in (0, 1) if len(names) == 2 else ():
        own, other = names[side], names[1 - side]
        if _lang_closeness(langs[side], other) > _lang_closeness(langs[side], own):
            said = (f"{files[0]} (the source) says {names[0]} and {files[1]} (the target) "
                    f"says {names[1]}" if len(files) == 2
                    else f"{files[0]}'s name says {names[0]}-{names[1]}")
            raise InputError(
                f"--langs {','.join(langs)} contradicts the file names: {said}; pass --langs "
                f"{names[0]},{names[1]}"
                + (", or list the files in the order of --langs" if len(files) == 2 else "")
            )
    option = "--langs" if len(langs) == 2 else "--lang"
    for side, (given, named) in enumerate(zip(langs, names, strict=True)):
        if _names_another_language(given, named):
            where = files[side] if len(files) == len(names) else files[0]
            role = ("" if len(names) == 1 else " for the source" if side == 0
                    else " for the target")
            raise InputError(
                f"{option} {','.join(langs)} contradicts the file name: {where} says {named}"
                f"{role}, not {given}; pass {option} {','.join(names)}, or rename the file "
                "if its name is wrong")


#: languages an ISO 639-1 macrolanguage code also names (files are often named by it)
_MACRO = {"nb": "no", "nn": "no", "sr": "sh", "hr": "sh", "bs": "sh"}


def _names_another_language(given: str, named: str) -> bool:
    """Whether code ``given`` is surely not the language a file name's ``named`` code says:
    both have ISO 639-1 codes and they differ, or ``given`` is a likely typo of ``named`` (a
    name's code that is no language code, ``train.ge``, says nothing)."""
    a, b = normalize_lang(given), normalize_lang(named)
    if a == b or problem(named) is not None:  # train.ge: the name gives no language
        return False
    if _MACRO.get(a, a) == _MACRO.get(b, b):  # train.no labelled nb: a variety of it
        return False
    if len(a) == 2 and len(b) == 2:
        return True
    return named.lower() in suggest(given.lower().split("-")[0])


def _lang_closeness(a: str, b: str) -> int:
    """2: the same code; 1: the same base language (``zh-CN``, ``zh``; ``ru``, ``rus``); 0:
    different.
    Different codes are not a contradiction (``--langs en-de`` for ``train.eng train.deu``)."""
    a, b = a.lower().replace("_", "-"), b.lower().replace("_", "-")
    if a == b:
        return 2
    return int(a.split("-")[0] == b.split("-")[0] or normalize_lang(a) == normalize_lang(b))


def langs_from_name(path: Path, kind: Kind) -> list[str] | None:
    stem = _strip_compression(path)
    if kind == "parallel":
        m = _LANG_PAIR_IN_NAME.search(stem)
        return [m.group(1), m.group(2)] if m else None
    suffix = Path(Path(stem).stem).suffix[1:] if _format_of(path) else Path(stem).suffix[1:]
    suffix = suffix.lower()  # wiki.EN.txt as wiki.en.txt
    return [suffix] if suffix and _LANG_SUFFIX.match(suffix) else None


def _chosen_side_of_pair_name(path: Path, fmt: str,
                              chosen: Sequence[str] | None) -> list[str] | None:
    """A mono corpus read from one field of a file whose name gives a language pair
    (``pairs.eng-cmn.tsv --columns 1``): the language of that field — the TSV column's place
    in the pair, a JSONL key or Parquet column named by one of the pair's codes — else None
    (no language, rather than the pair read as one code: ``eng-cmn``). Other names: the
    language the name's last suffix gives, as for any mono file."""
    pair = langs_from_name(path, "parallel") if fmt != "text" else None
    if not pair or any(problem(code) is not None for code in pair):
        return langs_from_name(path, "mono")
    field = chosen[0] if chosen and len(chosen) == 1 else ("0" if fmt == "tsv" else None)
    if fmt == "tsv":
        return [pair[int(field)]] if field in ("0", "1") else None
    return [field] if field in pair else None


def _refuse_repeats(paths: Sequence[Path], urls: dict[Path, str], keys: Sequence[str] | None,
                    shown: Callable[[Path], str]) -> None:
    """Refuse one file given twice (by another name, a link or a ``file://`` URL: its rows
    would be read twice, or a Moses pair would pair a file with itself) and one JSONL key for
    both sides (one column for both: the sources, once they resolve the columns)."""
    seen: dict[tuple[Any, ...], Path] = {}
    for p in paths:
        url = urls.get(p)
        local = (Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
                 if url is not None and url.startswith("file:") else None if url else p)
        if local is not None:
            st = local.stat()
            key: tuple[Any, ...] = (st.st_dev, st.st_ino)
        else:
            key = (str(url).split("?")[0].rstrip("/"),)
        first = seen.setdefault(key, p)
        if first is not p:
            raise InputError(f"{shown(first)} and {shown(p)} are the same file; give each input "
                             "once (a Moses pair is two files, one per language)")
    if keys and len(set(keys)) < len(keys):
        raise InputError(f"--keys {','.join(keys)} names one key for both sides; choose the key "
                         "of each side")


def _crossed(langs: Sequence[str], named: Sequence[str]) -> bool:
    """Whether ``langs`` fit a name's two languages better the other way round."""
    def fit(a: Sequence[str]) -> int:
        return _lang_closeness(langs[0], a[0]) + _lang_closeness(langs[1], a[1])
    return fit([named[1], named[0]]) > fit(named)


def _numbers(chosen: Sequence[str]) -> list[int] | None:
    """Two chosen columns as numbers (``--columns 3,1``), else None (names, keys, one)."""
    if len(chosen) != 2 or not all(c.strip().isdigit() for c in chosen):
        return None
    return [int(c) for c in chosen]


def _past_the_pair(chosen: Sequence[str]) -> bool:
    """Two column numbers, one past the first two columns (``--columns 2,1``)."""
    numbers = _numbers(chosen)
    return numbers is not None and max(numbers) >= 2


def _descending(chosen: Sequence[str]) -> bool:
    """Two column numbers, the later column first (``--columns 3,1``): the name's languages,
    given in the file's order, are then read in the other order."""
    numbers = _numbers(chosen)
    return numbers is not None and numbers[0] > numbers[1]


def parse_langs(text: str) -> list[str]:
    """``"en-de"`` or ``"en,zh-CN"`` → a list of two codes, each checked
    (:func:`spr_data.langcodes.check_lang`: a typo is refused with what it may have meant)."""
    parts = [p.strip() for p in text.split(",")] if "," in text else text.split("-")
    if len(parts) != 2 or not all(parts):
        raise InputError(f"--langs {text!r} should be SRC-TGT (e.g. en-de) or SRC,TGT "
                         "(e.g. en,zh-CN or en,sr-Latn-RS)")
    return [check_lang(p, where=f"--langs {text}") for p in parts]


def plan_sources(
    inputs: Sequence[str | Path],
    *,
    format: str | None = None,
    langs: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    retry: RetryPolicy | None = None,
) -> SourcePlan:
    """Check the inputs exist, detect their formats, and decide the dataset's kind and langs.

    ``langs`` with one code means a mono corpus, with two a parallel one. Without it, the kind
    follows from the format and the number of columns or keys.
    """
    if not inputs:
        raise InputError("no input files given")
    if format is not None and format not in FORMATS:
        raise InputError(f"--format {format!r} is not one of {', '.join(FORMATS)}")
    # a URL input (s3://bucket/key, https://…) is named by its path, read from the URL
    urls: dict[Path, str] = {}
    sizes: dict[Path, int] = {}
    paths = []
    for item in inputs:
        if is_url(item):
            url = str(item)
            parts = urllib.parse.urlsplit(url)
            name = Path("/" + parts.netloc + urllib.parse.unquote(parts.path))
            urls[name] = url
            sizes[name] = file_size(filesystem_for(url), url, retry)  # missing: one line
            paths.append(name)
            continue
        p = Path(item)
        if not p.exists():
            raise InputError(f"input file {p} does not exist")
        if not p.is_file():
            raise InputError(f"input {p} is not a regular file")
        paths.append(p)

    def shown(p: Path) -> str:
        return urls.get(p, str(p))

    _refuse_repeats(paths, urls, keys, shown)

    kind: Kind | None = None
    if langs is not None:
        if len(langs) not in (1, 2):
            raise InputError(f"expected one language (mono) or two (parallel), got {list(langs)}")
        kind = "parallel" if len(langs) == 2 else "mono"
        option = "--langs " + ",".join(langs) if len(langs) == 2 else "--lang"
        langs = [check_lang(code, where=option) for code in langs]
    width = len(columns) if columns else len(keys) if keys else None
    if width is not None and width not in (1, 2):
        raise InputError("choose one column/key (mono) or two (source and target)")
    if width is not None:
        width_kind: Kind = "parallel" if width == 2 else "mono"
        if kind is not None and kind != width_kind:
            raise InputError(f"{len(langs or [])} language(s) given but {width} column(s)/key(s)")
        kind = width_kind

    groups: list[tuple[str, list[Path]]] = []
    if format is not None:
        n = SOURCES[format].files_per_source
        if len(paths) % n:
            raise InputError(f"--format {format} takes the files in pairs: SRC TGT [SRC TGT ...]")
        groups = [(format, paths[i:i + n]) for i in range(0, len(paths), n)]
    else:
        i = 0
        while i < len(paths):
            fmt = _format_of(paths[i])
            if fmt is None and i + 1 < len(paths) and _moses_langs(paths[i], paths[i + 1]):
                groups.append(("moses", paths[i:i + 2]))
                i += 2
                continue
            if fmt is None:
                raise InputError(
                    f"cannot tell the format of {shown(paths[i])} from its name; pass --format "
                    f"{'|'.join(FORMATS)} (a Moses pair is two files such as train.en train.de)"
                )
            groups.append((fmt, [paths[i]]))
            i += 1

    given = {fmt for fmt, _ in groups}
    if keys is not None and "jsonl" not in given:
        raise InputError(f"--keys names the keys of JSONL records, and no input is JSONL (they "
                         f"are {', '.join(sorted(given))}); choose TSV or Parquet columns "
                         "with --columns")
    if columns is not None and not given & {"tsv", "parquet"}:
        raise InputError(f"--columns chooses TSV or Parquet columns, and no input is TSV or "
                         f"Parquet (they are {', '.join(sorted(given))})"
                         + ("; name the keys of JSONL records with --keys"
                            if "jsonl" in given else ""))

    def kind_of(fmt: str) -> Kind:
        return SOURCES[fmt].fixed_kind or kind or "parallel"

    kinds = {kind_of(fmt) for fmt, _ in groups}
    if kind is not None and len(kinds) == 1 and kinds != {kind}:
        formats = sorted({f for f, _ in groups})
        pair_of_texts = formats == ["text"] and kind == "parallel" and len(groups) % 2 == 0
        raise InputError(
            f"{'--langs ' + ','.join(langs or []) if kind == 'parallel' else '--lang'} asks "
            f"for a {kind} corpus, but " + ", ".join(shown(ps[0]) for _, ps in groups)
            + f" {'is' if len(groups) == 1 else 'are'} {' and '.join(formats)} input, a "
            f"{next(iter(kinds))} corpus"
            + ("; for the two line-aligned files of a pair, pass --format moses"
               if pair_of_texts else ""))
    if len(kinds) > 1 or (kind is not None and kinds != {kind}):
        raise InputError("inputs mix parallel and mono corpora: "
                         + ", ".join(f"{shown(ps[0])} ({kind_of(f)})" for f, ps in groups))
    final_kind = kinds.pop()
    text_names = ["src", "tgt"] if final_kind == "parallel" else ["text"]

    sources: list[Source] = []
    guessed: set[tuple[str, ...]] = set()
    mono_langs: list[list[str] | None] = []  # each mono input's language, from its name
    for fmt, ps in groups:
        files = [InputFile(p, size=sizes[p] if p in urls else p.stat().st_size, retry=retry,
                           url=urls.get(p)) for p in ps]
        candidates: list[list[str]] = []
        if len(ps) == 2:  # a Moses pair: each name's suffix gives one side's language
            pair = _moses_langs(ps[0], ps[1], named_apart=format == "moses")
            if pair:
                guessed.add(pair)
                _check_langs_fit_names(langs, [shown(q) for q in ps], pair)
        else:
            found = (_chosen_side_of_pair_name(ps[0], fmt, columns or keys)
                     if final_kind == "mono" else langs_from_name(ps[0], final_kind))
            chosen = list((keys if fmt == "jsonl" else columns) or [])
            if found and len(found) == 2 and (_descending(chosen) or (
                    sorted(chosen) == sorted(found) and chosen != list(found))):
                found = [found[1], found[0]]  # pairs.eng-cmn.tsv read as --columns 3,1
            if found and len(found) == 2 and langs is not None and _past_the_pair(chosen) \
                    and _crossed(langs, found):
                # of a file wider than its pair, the name gives the languages, not which
                # chosen column holds which (id, German, English in pairs.en-de.tsv
                # --columns 2,1): --langs says it. Of two columns, or of keys named by
                # their languages, a --langs the other way round is still a contradiction
                found = [found[1], found[0]]
            if found:
                guessed.add(tuple(found))
                _check_langs_fit_names(langs, [shown(ps[0])], found)
            mono_langs.append(found if final_kind == "mono" else None)
            # JSONL keys and Parquet columns: named as chosen, else the languages (given, or
            # from the file name: pairs.en-bn.jsonl holds "en" and "bn"), else Hugging Face's
            # translation.en and translation.bn, else src/tgt (text)
            lang_keys = list(langs) if langs else found
            nested = [f"translation.{k}" for k in lang_keys] if lang_keys else None  # HF's
            candidates = [k for k in (lang_keys, nested, text_names)
                          if k and len(k) == len(text_names)]
            candidates = [k for i, k in enumerate(candidates) if k not in candidates[:i]]
        selection = Selection(columns=columns, keys=keys, candidates=candidates)
        sources.append(SOURCES[fmt].from_plan(files, final_kind, selection))

    if langs is None and format is None and final_kind == "mono" and len(groups) == 2:
        _refuse_a_pair_read_as_mono(groups, mono_langs)
    named = {pair for pair in guessed if not set(pair) <= _SIDE_SUFFIXES}
    if langs is None and final_kind == "parallel" and len(named) > 1:
        # a dataset is one language pair: as "und-und", language id and the alignment model
        # would check nothing (a mono mix is a multilingual corpus, labelled "und")
        raise InputError(
            "the inputs' names give different language pairs ("
            + ", ".join("-".join(pair) for pair in sorted(named)) + "): ingest each pair into "
            "a dataset of its own, or pass --langs if they really are one pair")
    if langs is not None:
        final_langs = list(langs)
    elif len(guessed) == 1:
        final_langs = list(guessed.pop())
        if set(final_langs) <= _SIDE_SUFFIXES:  # train.src + train.tgt: sides, no languages
            final_langs = ["und"] * len(final_langs)
        for code in final_langs:  # a name such as train.ge: refuse it rather than label rows
            check_lang(code, where=f"{paths[0].name} (the language its name gives; pass "
                                   f"--lang{'s' if len(final_langs) == 2 else ''} to set it)")
    else:
        final_langs = ["und"] * len(text_names)
    return SourcePlan(sources, final_kind, final_langs)
