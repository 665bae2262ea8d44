"""Language codes: is ``en-ge`` a pair of languages, and if not, what was meant?

A typo in ``--langs`` is silent destruction: ``clean`` then rejects nearly every row as being in
the wrong language. So a code is checked when it enters (``ingest``), against ISO 639-1,
639-2/B, 639-3 and 639-5 codes and BCP-47 tags with script, region and variant subtags
(``zh-Hant``, ``pt-BR``, ``sr-Latn-RS``, ``es-419``, ``zh_CN``), and a wrong one is refused with
the codes it most likely meant: those one edit away, most common first — commonness measured
as the training lines of each language in fastText's ``lid.176`` model — and the language of
a country whose code was typed instead (``jp`` → ``ja``).

The table (``qa/language_codes.tsv``) is generated offline by ``tools/gen_language_codes.py``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from spr_data.errors import InputError

__all__ = ["LanguageCodeError", "check_lang", "lang_name", "names_a_language", "problem",
           "suggest"]


class LanguageCodeError(InputError):
    """A language code that is no ISO 639 code or BCP-47 tag."""


#: Country codes typed for a language code, where the country code is no language code
#: itself: the language the country's code stands for in practice.
_COUNTRY_LANGUAGE = {
    "jp": "ja", "cn": "zh", "gr": "el", "dk": "da", "ua": "uk", "cz": "cs",
    "ge": "ka", "ir": "fa", "il": "he", "vn": "vi", "us": "en", "gb": "en", "rs": "sr",
    "at": "de", "pk": "ur", "np": "ne", "al": "sq", "by": "be", "kz": "kk", "hk": "zh",
    "mx": "es", "tj": "tg",
}


@dataclass(frozen=True)
class _Table:
    langs: dict[str, tuple[str, int]]  # code (2 or 3 letters) → (name, lid.176 count)
    scripts: dict[str, str]  # lowercase ISO 15924 → its spelling (Latn) and name below
    script_names: dict[str, str]
    regions: dict[str, str]  # lowercase ISO 3166-1 alpha-2 → name


@functools.cache
def _table() -> _Table:
    text = resources.files("spr_data.qa").joinpath("language_codes.tsv").read_text("utf-8")
    langs: dict[str, tuple[str, int]] = {}
    scripts: dict[str, str] = {}
    script_names: dict[str, str] = {}
    regions: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        kind, *fields = line.split("\t")
        if kind == "lang":
            alpha3, alpha2, bib, count, name = fields
            weight = int(count) if count else 0
            for code in (alpha3, alpha2, bib):
                if code:
                    langs[code] = (name, weight)
        elif kind == "script":
            scripts[fields[0].lower()] = fields[0]
            script_names[fields[0].lower()] = fields[1]
        elif kind == "region":
            regions[fields[0].lower()] = fields[1]
    return _Table(langs, scripts, script_names, regions)


def lang_name(code: str) -> str | None:
    """The English name of a primary language code (``de`` → German), if it is one."""
    found = _table().langs.get(code.lower())
    return found[0] or None if found else None


@functools.cache
def _language_words() -> frozenset[str]:
    """Lower-case words that name a language: codes of languages people write (a lid.176
    label, or a code of one of them: ``cmn`` for ``zh``) and one-word English names."""
    from spr_data.qa.scripts import normalize_lang
    table = _table().langs
    codes = {c for c, (_, lines) in table.items() if lines > 0 or len(normalize_lang(c)) == 2}
    names = {name.lower() for name, lines in table.values()
             if lines > 0 and name and " " not in name and "(" not in name}
    return frozenset(codes | names)


def names_a_language(word: str) -> bool:
    """Whether ``word`` is a common language code or English language name (``de``, ``eng``,
    ``German``): what a column header of a corpus says."""
    return word.lower() in _language_words()


def _one_edit(a: str, b: str) -> bool:
    """Whether ``b`` is one substitution, insertion, deletion or swap of neighbours from ``a``."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def suggest(code: str, limit: int = 3) -> list[str]:
    """Codes that ``code`` (a primary language subtag) most likely meant, most likely first:
    the language of a country whose code it is, then codes one edit away, by how common the
    language is (lid.176 training lines; ISO 639-1 codes before longer ones on a tie)."""
    code = code.lower()
    table = _table().langs
    out: list[str] = []
    country = _COUNTRY_LANGUAGE.get(code)
    if country and country != code:
        out.append(country)
    near = [c for c in table if _one_edit(code, c) and (table[c][1] > 0 or len(c) == 2)
            and not table[c][0].endswith(_DEPRECATED)]
    near.sort(key=lambda c: (-table[c][1], len(c), c))
    seen = {table[c][0] for c in out}
    for c in near:  # one code per language: de, not also ger and deu
        if table[c][0] not in seen:
            seen.add(table[c][0])
            out.append(c)
    return out[:limit]


_DEPRECATED = "(deprecated code)"  # iw, in, ji: accepted, never suggested
_SEP = re.compile(r"[-_]")
_PRIVATE = "x"


def problem(code: str) -> str | None:
    """Why ``code`` is not a language code or BCP-47 tag, with a "did you mean"; None if it is."""
    parts = _SEP.split(code.strip())
    if not code.strip() or not all(parts):
        return f"{code!r} is not a language code (empty subtag)"
    table = _table()
    primary = parts[0].lower()
    if not (primary.isascii() and primary.isalpha() and 2 <= len(primary) <= 3) \
            or primary not in table.langs:
        return f"{parts[0]!r} is not a language code" + _hint(primary)
    seen_script = seen_region = False
    rest = parts[1:]
    for i, sub in enumerate(rest):
        low = sub.lower()
        if low == _PRIVATE:  # private use: whatever follows is the user's
            if i + 1 == len(rest):
                return f"{code!r}: nothing follows the private-use marker x"
            break
        if i == 0 and len(low) == 3 and low.isalpha() and low in table.langs:
            continue  # an extended language subtag (zh-yue)
        if len(low) == 4 and low.isalpha() and not seen_script and not seen_region:
            if low not in table.scripts:
                near = [table.scripts[s] for s in table.scripts if _one_edit(low, s)][:3]
                return (f"{code!r}: {sub!r} is not a script code (ISO 15924, such as Latn, "
                        "Cyrl, Hans)" + (f"; did you mean {', '.join(near)}?" if near else ""))
            seen_script = True
            continue
        if (len(low) == 2 and low.isalpha()) or (len(low) == 3 and low.isdigit()):
            if seen_region:
                return f"{code!r}: two region subtags"
            if low.isalpha() and low not in table.regions:
                return (f"{code!r}: {sub!r} is not a region code (ISO 3166-1, such as BR, CN, "
                        "or a UN M.49 number such as 419)")
            seen_script = seen_region = True
            continue
        if low.isalnum() and (5 <= len(low) <= 8 or (len(low) == 4 and low[0].isdigit())):
            seen_script = seen_region = True  # a variant (de-CH-1996, ca-valencia)
            continue
        return (f"{code!r}: {sub!r} is not a script (4 letters), region (2 letters or 3 "
                "digits) or variant subtag, in that order")
    return None


def _hint(primary: str) -> str:
    names = []
    for c in suggest(primary):
        name = lang_name(c) or "?"
        if _COUNTRY_LANGUAGE.get(primary) == c:
            name += f"; {primary.upper()} is the country code of "
            name += _table().regions.get(primary, "a country")
        names.append(f"{c} ({name})")
    return f"; did you mean {', '.join(names)}?" if names else ""


def check_lang(code: str, *, where: str = "--langs") -> str:
    """``code`` itself when it is an ISO 639 code or a BCP-47 tag; otherwise a
    :class:`LanguageCodeError` saying where it came from and what it may have meant."""
    why = problem(code)
    if why is not None:
        raise LanguageCodeError(
            f"{where}: {why} (language codes are ISO 639-1 or 639-3, or BCP-47 tags such as "
            "zh-Hant, pt-BR)")
    return code
