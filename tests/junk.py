"""Junk of every kind the clean rules target, injected into real pairs with a fixed seed.

Used by the quality tests and by ``benchmarks/bench_clean.py``; each injector takes a real
pair (and a random generator and the corpus, for re-pairing) and returns a junk pair.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

Pair = tuple[str, str]
Injector = Callable[[Pair, random.Random, Sequence[Pair], Sequence[str]], Pair]

_SYMBOLS = "★☆■□▲△●○◆◇※§¶†‡•◎♪♫#$%&*+=<>|~^@"
_KEYWORDS = ("forum measuring jug glass heat resistant 1 litre or 1.1/2 pint 2.95 fr.",
             "cheap hotels london paris rome book now free wifi parking 24h",
             "mp3 download free ringtone nokia samsung lg sony ericsson 2009")


def _symbols(rng: random.Random) -> str:
    return " ".join("".join(rng.choice(_SYMBOLS) for _ in range(rng.randint(2, 5)))
                    for _ in range(rng.randint(3, 8)))


def _other(rng: random.Random, corpus: Sequence[Pair], pair: Pair) -> Pair:
    while True:
        other = corpus[rng.randrange(len(corpus))]
        if other[1] != pair[1] and other[0] != pair[0]:
            return other


INJECTORS: dict[str, Injector] = {
    "empty_target": lambda p, r, c, f: (p[0], "   "),
    "too_long": lambda p, r, c, f: (" ".join([p[0]] * 120), " ".join([p[1]] * 120)),
    "length_ratio": lambda p, r, c, f: (p[0], " ".join([p[1]] + [_other(r, c, p)[1]
                                                             for _ in range(6)])),
    "symbol_pile": lambda p, r, c, f: (p[0], _symbols(r)),
    "repetition": lambda p, r, c, f: (p[0], p[1] + " " + "!" * r.randint(15, 40)),
    "repeated_word": lambda p, r, c, f: (p[0] + " " + " ".join([p[0].split()[0]] * 8), p[1]),
    "copied_source": lambda p, r, c, f: (p[0], p[0]),
    "numbers": lambda p, r, c, f: (f"{p[0]} ({r.randint(100, 499)})",
                                f"{p[1]} ({r.randint(500, 999)})"),
    "url_only": lambda p, r, c, f: (p[0], f"http://www.example-{r.randint(1, 999)}.com/page?id="
                                       f"{r.randint(1, 99999)}"),
    "html": lambda p, r, c, f: (p[0], f'<div class="c{r.randint(1, 9)}"><a href="/x">{p[1]}</a>'),
    "boilerplate": lambda p, r, c, f: ("All rights reserved. Read our privacy policy.", p[1]),
    "swapped_sides": lambda p, r, c, f: (p[1], p[0]),
    "misaligned": lambda p, r, c, f: (p[0], _other(r, c, p)[1]),
    "wrong_language": lambda p, r, c, f: (p[0], r.choice(f)),
    "keyword_list": lambda p, r, c, f: (r.choice(_KEYWORDS), _other(r, c, p)[1]),
    "duplicate": lambda p, r, c, f: p,
}


def inject(pairs: Sequence[Pair], kinds: Sequence[str], per_kind: int, seed: int = 0,
           foreign: Sequence[str] = ()) -> tuple[list[Pair], dict[int, str]]:
    """The real pairs with ``per_kind`` junk pairs of each kind inserted at random places.

    ``foreign`` holds sentences in a language that is neither side's (``wrong_language``).

    Returns the mixed corpus and, for each junk line (0-based), its kind. A duplicate copies a
    real pair that appears earlier in the corpus, so that the copy is the one to reject.
    """
    rng = random.Random(seed)
    junk: list[tuple[int, Pair, str]] = []
    for kind in kinds:
        for _ in range(per_kind):
            at = rng.randrange(len(pairs))
            source = pairs[at]
            made = INJECTORS[kind](source, rng, pairs, foreign)
            position = at + 1 if kind == "duplicate" else rng.randrange(len(pairs) + 1)
            junk.append((position, made, kind))
    out: list[Pair] = []
    labels: dict[int, str] = {}
    by_position: dict[int, list[tuple[Pair, str]]] = {}
    for position, made, kind in junk:
        by_position.setdefault(position, []).append((made, kind))
    for i in range(len(pairs) + 1):
        for made, kind in by_position.get(i, []):
            labels[len(out)] = kind
            out.append(made)
        if i < len(pairs):
            out.append(pairs[i])
    return out, labels
