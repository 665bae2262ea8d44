"""Regenerate ``spr_data/qa/unicode_scripts.tsv``: the Unicode Script (sc) property as ranges.

Python's ``unicodedata`` has no Script property, and the project may not download the UCD, so
the table is read out of a Unicode-aware regex engine that is installed anyway: polars' Rust
``regex`` crate. It is asked with explicit ``\\p{sc=Name}`` classes, because both it and RE2
read a bare ``\\p{Name}`` as Script too, but Rust also knows ``\\p{scx=Name}`` (Script_Extensions),
and spelling out ``sc=`` keeps the table from silently changing meaning. Checks that fail stop
the script before it writes anything: every code point gets at most one script (sc is a
partition, scx is not), the DANDA / VIRAMA / ZWJ anchors come out as Unicode says, and every
code point the engine calls assigned has a script (so no script name is missing from
:data:`CANDIDATES`).

Run from the repository root::

    python tools/gen_unicode_scripts.py            # writes spr_data/qa/unicode_scripts.tsv
    python tools/gen_unicode_scripts.py --check    # exit 1 if the file on disk is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

__all__ = ["CANDIDATES", "build_ranges", "main", "render"]

OUT = Path(__file__).resolve().parents[1] / "spr_data" / "qa" / "unicode_scripts.tsv"
MAX_CP = 0x110000
UNKNOWN = "Unknown"

#: Script long names (PropertyValueAliases.txt) up to Unicode 17; names the engine does not know
#: are skipped and reported, so a newer engine only needs a name added here.
CANDIDATES: tuple[str, ...] = (
    "Adlam", "Ahom", "Anatolian_Hieroglyphs", "Arabic", "Armenian", "Avestan", "Balinese", "Bamum",
    "Bassa_Vah", "Batak", "Bengali", "Beria_Erfe", "Bhaiksuki", "Bopomofo", "Brahmi", "Braille",
    "Buginese", "Buhid", "Canadian_Aboriginal", "Carian", "Caucasian_Albanian", "Chakma", "Cham",
    "Cherokee", "Chisoi", "Chorasmian", "Common", "Coptic", "Cuneiform", "Cypriot", "Cypro_Minoan",
    "Cyrillic", "Deseret", "Devanagari", "Dives_Akuru", "Dogra", "Duployan",
    "Egyptian_Hieroglyphs", "Elbasan", "Elymaic", "Ethiopic", "Garay", "Georgian", "Glagolitic",
    "Gothic", "Grantha", "Greek", "Gujarati", "Gunjala_Gondi", "Gurmukhi", "Gurung_Khema", "Han",
    "Hangul", "Hanifi_Rohingya", "Hanunoo", "Hatran", "Hebrew", "Hiragana", "Imperial_Aramaic",
    "Inherited", "Inscriptional_Pahlavi", "Inscriptional_Parthian", "Javanese", "Kaithi",
    "Kannada", "Katakana", "Kawi", "Kayah_Li", "Kharoshthi", "Khitan_Small_Script", "Khmer",
    "Khojki", "Khudawadi", "Kirat_Rai", "Lao", "Latin", "Lepcha", "Limbu", "Linear_A", "Linear_B",
    "Lisu", "Lycian", "Lydian", "Mahajani", "Makasar", "Malayalam", "Mandaic", "Manichaean",
    "Marchen", "Masaram_Gondi", "Medefaidrin", "Meetei_Mayek", "Mende_Kikakui", "Meroitic_Cursive",
    "Meroitic_Hieroglyphs", "Miao", "Modi", "Mongolian", "Mro", "Multani", "Myanmar", "Nabataean",
    "Nag_Mundari", "Nandinagari", "New_Tai_Lue", "Newa", "Nko", "Nushu", "Nyiakeng_Puachue_Hmong",
    "Ogham", "Ol_Chiki", "Ol_Onal", "Old_Hungarian", "Old_Italic", "Old_North_Arabian",
    "Old_Permic", "Old_Persian", "Old_Sogdian", "Old_South_Arabian", "Old_Turkic", "Old_Uyghur",
    "Oriya", "Osage", "Osmanya", "Pahawh_Hmong", "Palmyrene", "Pau_Cin_Hau", "Phags_Pa",
    "Phoenician", "Psalter_Pahlavi", "Rejang", "Runic", "Samaritan", "Saurashtra", "Sharada",
    "Shavian", "Siddham", "Sidetic", "SignWriting", "Sinhala", "Sogdian", "Sora_Sompeng",
    "Soyombo", "Sundanese", "Sunuwar", "Syloti_Nagri", "Syriac", "Tagalog", "Tagbanwa", "Tai_Le",
    "Tai_Tham", "Tai_Viet", "Tai_Yo", "Takri", "Tamil", "Tangsa", "Tangut", "Telugu", "Thaana",
    "Thai", "Tibetan", "Tifinagh", "Tirhuta", "Todhri", "Tolong_Siki", "Toto", "Tulu_Tigalari",
    "Ugaritic", "Vai", "Vithkuqi", "Wancho", "Warang_Citi", "Yezidi", "Yi", "Zanabazar_Square"
)

#: Code points whose Script the generated table must reproduce (from Scripts.txt).
ANCHORS = {
    0x0041: "Latin", 0x0964: "Common", 0x0965: "Common", 0x09CD: "Bengali", 0x0995: "Bengali",
    0x200C: "Inherited", 0x200D: "Inherited", 0x0300: "Inherited", 0x30FC: "Common",
    0x3005: "Han", 0x0640: "Common", 0x0E01: "Thai", 0xAC00: "Hangul", 0x0020: "Common",
    0xE000: UNKNOWN, 0xD800: UNKNOWN, 0x0378: UNKNOWN,
}


def _all_chars() -> pl.Series:
    """Every scalar value as a one-character string; surrogates become U+0000 (fixed up later)."""
    cps = np.arange(MAX_CP, dtype=np.uint32)
    cps[0xD800:0xE000] = 0  # not encodable in UTF-8; Script=Unknown by definition
    text = cps.astype("<u4").tobytes().decode("utf-32-le")
    return pl.Series("c", list(text), dtype=pl.String)


def _supported(name: str) -> bool:
    try:
        pl.Series(["a"]).str.contains(rf"\p{{sc={name}}}")
    except Exception:  # polars raises ComputeError for a name its regex crate does not know
        return False
    return True


def build_ranges() -> tuple[list[tuple[int, int, str]], list[str]]:
    """``[(start, end, script)]`` covering U+0000..U+10FFFF, and the candidate names skipped."""
    chars = _all_chars()
    names = [UNKNOWN]
    ids = np.zeros(MAX_CP, dtype=np.int16)
    skipped = []
    for name in CANDIDATES:
        if not _supported(name):
            skipped.append(name)
            continue
        hit = chars.str.contains(rf"\p{{sc={name}}}").to_numpy()
        hit[0xD800:0xE000] = False
        taken = hit & (ids != 0)
        if taken.any():
            first = int(np.flatnonzero(taken)[0])
            sys.exit(f"U+{first:04X} matches both {names[ids[first]]} and {name}: the engine "
                     "answers Script_Extensions, not Script; fix the pattern")
        names.append(name)
        ids[hit] = len(names) - 1
    ids[0xD800:0xE000] = 0
    assigned = chars.str.contains(r"\P{Cn}").to_numpy()
    assigned[0xD800:0xE000] = False
    private = chars.str.contains(r"\p{Co}").to_numpy()
    missing = np.flatnonzero(assigned & ~private & (ids == 0))
    if missing.size:
        sys.exit(f"{missing.size} assigned code points have no script, first U+{missing[0]:04X}; "
                 "add the engine's new script names to CANDIDATES")
    for cp, want in ANCHORS.items():
        got = names[ids[cp]]
        if got != want:
            sys.exit(f"U+{cp:04X}: expected Script={want}, the engine says {got}")
    starts = np.flatnonzero(np.diff(ids, prepend=-1))
    ends = np.append(starts[1:] - 1, MAX_CP - 1)
    ranges = [(int(s), int(e), names[ids[s]]) for s, e in zip(starts, ends, strict=True)]
    return ranges, skipped


def _engine_unicode_version() -> str:
    """The newest Unicode version whose probe character the engine knows as assigned."""
    probes = [("17.0", "\U000323b0"), ("16.0", "\U00010d40"), ("15.1", "\U0002ebf0"),
              ("15.0", "\U00011f00"), ("14.0", "\U00010570")]
    for version, ch in probes:
        if pl.Series([ch]).str.contains(r"\P{Cn}").item():
            return version
    return "older than 14.0"


def render(ranges: list[tuple[int, int, str]], skipped: list[str]) -> str:
    """The TSV text, with a ``#`` header that says how it was made."""
    version = _engine_unicode_version()
    head = [
        "# Unicode Script (sc) property as ranges: start_hex<TAB>end_hex<TAB>script_name.",
        "# Generated by tools/gen_unicode_scripts.py; do not edit by hand.",
        f"# Engine: polars {pl.__version__} (Rust regex crate), \\p{{sc=Name}} per script,",
        f"# Unicode {version} (the newest version whose new characters the engine knows).",
        "# Script, not Script_Extensions: U+0964/U+0965 DANDA are Common, U+200C/D Inherited.",
        "# Ranges cover U+0000..U+10FFFF; unassigned, private-use and surrogates are Unknown.",
        f"# Script names the engine does not know (skipped): {' '.join(skipped) or '-'}",
        "start_hex\tend_hex\tscript_name",
    ]
    body = [f"{s:04X}\t{e:04X}\t{name}" for s, e, name in ranges]
    return "\n".join(head + body) + "\n"


def _table(text: str) -> list[str]:
    """The lines that hold the table: not the header line naming the engine's version (a
    newer polars with the same Unicode data gives the same table)."""
    return [line for line in text.splitlines() if not line.startswith("# Engine:")]


def main(argv: list[str] | None = None) -> int:
    """Write the table (or, with ``--check``, compare it with the file on disk)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    ranges, skipped = build_ranges()
    text = render(ranges, skipped)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if _table(current) != _table(text):
            print(f"{args.out} is stale; run python tools/gen_unicode_scripts.py", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date ({len(ranges)} ranges)")
        return 0
    tmp = args.out.with_suffix(".tsv.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out}: {len(ranges)} ranges, {len({r[2] for r in ranges})} scripts; "
          f"skipped {len(skipped)} unknown names: {' '.join(skipped)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
