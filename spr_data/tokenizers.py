"""Tokenizers behind one small interface, so reports treat SentencePiece, HF and tiktoken alike.

``load_tokenizer(spec)`` takes what the CLI takes: a SentencePiece ``.model``, an HF
``tokenizer.json``, a GPT-2 style ``vocab.json`` (its ``merges.txt`` beside it), a
tiktoken-format ranks file (``base64(token) rank`` per line, as Llama 3/4 ship), or the
baselines ``bytes`` and ``chars``; ``NAME=SPEC`` names it. Each backend is one subclass of
``Tokenizer`` (its ``kind``): it encodes a batch of texts through its library's native batch
encoder and knows, per token id, whether the token is a byte-fallback or unknown token and
whether it begins with a combining mark.

tiktoken encodings (and the tiktoken twin of a GPT-2 style BPE) encode many texts in one
native call: the texts are joined by a separator registered as a special token, which tiktoken
cuts its input at before its regex runs, so each text is encoded exactly as if alone.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
import threading
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import InputError

__all__ = ["FALLBACK", "MARK", "UNKNOWN", "WORD_INITIAL", "BytesTokenizer", "CharsTokenizer",
           "HFTokenizer", "SentencePieceTokenizer", "TiktokenTokenizer", "Tokenizer",
           "load_tokenizer"]

#: bits of ``Tokenizer.id_bits``: what each token id is
FALLBACK, UNKNOWN, MARK, WORD_INITIAL = 1, 2, 4, 8

#: The pre-tokenizer regexes of tiktoken-format files, by vocabulary size: Llama 3 uses the
#: cl100k pattern, Llama 4 the o200k one (which keeps combining marks inside words).
_CL100K = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_O200K = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+",
])
_TIKTOKEN_PATTERNS = {128_000: _CL100K, 200_000: _O200K}
#: joins texts into one tiktoken call (a special token); texts holding its core (the part
#: without NULs, which no separator's neighbour can complete) are encoded one by one
_SEPARATOR_CORE = "<spr-data:separator>"
_SEPARATOR = f"\x00{_SEPARATOR_CORE}\x00"
#: characters per joined tiktoken call
_JOIN_CHARS = 1 << 18


def _starts_with_mark(piece: bytes) -> bool:
    """Whether a token's text begins with a combining mark (a byte-level token that begins
    inside a character begins with no character at all)."""
    if piece[:1] and 0x80 <= piece[0] < 0xC0:
        return False
    text = piece.decode("utf-8", errors="ignore").lstrip(" \u2581")
    return bool(text) and unicodedata.category(text[0]).startswith("M")


@dataclass
class Tokenizer(ABC):
    """A loaded tokenizer: ``encode`` gives token ids per text; the arrays flag ids. One
    subclass per backend (its ``kind``), so each library's fast paths stay in one place.

    The defaults are those of a tokenizer that cannot encode words alone (see
    ``encode_words``) and has no pre-tokenizer to ask."""

    #: the backend: "bytes", "chars", "sentencepiece", "hf" or "tiktoken"
    kind: ClassVar[str]
    name: str
    encoder: Any
    byte_fallback: np.ndarray  # bool per id: a SentencePiece <0x..> byte piece
    unknown: np.ndarray  # bool per id: the unknown token
    starts_with_mark: np.ndarray  # bool per id: the token's text begins with a combining mark
    #: bool per id: the token starts a new word (a leading space or ▁; not a WordPiece ##)
    word_initial: np.ndarray | None = None
    #: the files it was loaded from (a GPT-2 vocab.json and its merges.txt), for hashing
    files: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        #: the four flag arrays as bits of one byte per id (one lookup per token for reports)
        self.id_bits: np.ndarray = (self.byte_fallback * FALLBACK + self.unknown * UNKNOWN
                        + self.starts_with_mark * MARK).astype(np.uint8)
        if self.word_initial is not None:
            self.id_bits |= (self.word_initial * WORD_INITIAL).astype(np.uint8)

    @property
    def encodes_words(self) -> bool:
        """Whether ``encode_words`` can work (it returns None where it finds it cannot)."""
        return False

    def pretokens(self, texts: Sequence[str]) -> list[str] | None:
        """The pieces the tokenizer's pre-tokenizer cuts ``texts`` into, before any merge;
        None when it has none to ask (SentencePiece, tiktoken, the baselines)."""
        return None

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, special tokens left out."""
        return _split(*self.encode_flat(list(texts)))

    @abstractmethod
    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of all ``texts`` end to end (int64), and each text's number of tokens."""

    def encode_words(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """Token ids of each word as it reads after a space in running text (``" " + word``),
        end to end, and each word's number of tokens; None when this tokenizer cannot.

        A text holding single spaces only is then its first word (encoded alone) followed by
        its other words: the pre-tokenizer regexes of GPT-2 and tiktoken start a piece at every
        space followed by a non-space, and SentencePiece (splitting at whitespace, with its
        dummy ``▁`` prefix) starts a piece at every ``▁``. Words repeat: the fertility report
        encodes each distinct word once. Give only words that ``encodes_alone`` accepts."""
        return None

    def encodes_alone(self, texts: Sequence[str]) -> np.ndarray:
        """Per text (a word without spaces, or a segment's first word): whether it gets the
        same tokens out of its segment (see ``encode_words``) as in it; never, for a
        tokenizer that cannot encode words alone."""
        return np.zeros(len(list(texts)), dtype=bool)

    def check(self, texts: Sequence[str]) -> None:
        """Check a fast path against the library on these texts, before any other call (the
        tiktoken twin of an HF tokenizer); nothing to check here."""
        return None


class _Baseline(Tokenizer):
    """A yardstick without a vocabulary file: every byte or character is a token."""

    #: ids: the byte values or the code points
    size: ClassVar[int]

    @classmethod
    def load(cls, name: str) -> _Baseline:
        initial = _flags(cls.size)
        initial[[9, 32]] = True  # a space starts a word
        return cls(name or cls.kind, None, _flags(cls.size), _flags(cls.size),
                   _flags(cls.size), initial)


class BytesTokenizer(_Baseline):
    """``bytes``: each UTF-8 byte of a text is a token."""

    kind = "bytes"
    size = 256

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        data = [t.encode("utf-8") for t in texts]
        return (np.frombuffer(b"".join(data), dtype=np.uint8).astype(np.int64),
                np.fromiter(map(len, data), dtype=np.int64, count=len(data)))


class CharsTokenizer(_Baseline):
    """``chars``: each code point of a text is a token."""

    kind = "chars"
    size = 0x110000

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        texts = list(texts)
        codes = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)
        return (codes.astype(np.int64),
                np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))


class TiktokenTokenizer(Tokenizer):
    """A tiktoken-format ranks file (Llama 3/4): many texts per native call, joined by the
    separator token; its regex starts a piece at every space, so words encode alone."""

    kind = "tiktoken"

    @classmethod
    def load(cls, name: str, path: Path) -> TiktokenTokenizer:
        import tiktoken

        ranks = _read_tiktoken_ranks(path)
        pattern = _TIKTOKEN_PATTERNS.get(len(ranks), _CL100K)
        size = max(ranks.values()) + 1
        encoding = tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks,
                                     special_tokens={_SEPARATOR: size})
        marks, initial = _flags(size), _flags(size)
        for token, rank in ranks.items():
            marks[rank] = _starts_with_mark(token)
            initial[rank] = token[:1] in (b" ", b"\t")
        return cls(name, encoding, _flags(size), _flags(size), marks, initial, (path,))

    @property
    def encodes_words(self) -> bool:
        return True

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return _encode_joined(self.encoder, list(texts))

    def encode_words(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        return self.encode_flat([" " + w for w in words])

    def encodes_alone(self, texts: Sequence[str]) -> np.ndarray:
        return np.ones(len(list(texts)), dtype=bool)


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece ``.model``: it encodes a batch in its own threads; words encode
    alone (many per call) when its pieces stop at spaces."""

    kind = "sentencepiece"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._spaces_split: bool | None = None
        self._maps_chars = True  # a SentencePiece normalizer with a character map (NFKC)

    @classmethod
    def load(cls, name: str, path: Path) -> SentencePieceTokenizer:
        import sentencepiece as spm

        try:
            sp = spm.SentencePieceProcessor(model_file=str(path))
        except (OSError, RuntimeError) as exc:
            raise InputError(f"{path} is not a SentencePiece model: {exc}") from exc
        size = sp.get_piece_size()
        fallback, unknown, marks, initial = (_flags(size) for _ in range(4))
        for i in range(size):
            piece = sp.id_to_piece(i)
            fallback[i] = sp.is_byte(i)
            unknown[i] = sp.is_unknown(i)
            marks[i] = _starts_with_mark(piece.encode())
            initial[i] = piece.startswith("\u2581")
        return cls(name, sp, fallback, unknown, marks, initial, (path,))

    @property
    def encodes_words(self) -> bool:
        return self._pieces_stop_at_spaces()

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        encoded: list[list[int]] = self.encoder.encode(list(texts))
        return encoded

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return _flatten(self.encode(texts))

    def encode_words(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        if self.word_initial is None or not self._pieces_stop_at_spaces():
            return None
        return self._encode_joined_words(list(words), self.word_initial)

    def encodes_alone(self, texts: Sequence[str]) -> np.ndarray:
        """Not for a model whose pieces span ``▁``, nor for a word that holds a ``▁`` (it
        reads as a space) or that its normalizer turns into more or fewer than one
        ``▁``-led word (a zero-width space in it, with NFKC)."""
        texts = list(texts)
        if not self._pieces_stop_at_spaces():
            return np.zeros(len(texts), dtype=bool)
        array = pa.array(texts, pa.large_string())
        ok = ~np.asarray(pc.match_substring(array, "\u2581").to_numpy(zero_copy_only=False))
        if self._maps_chars:  # what the map makes of each text: still one ▁-led word?
            normal = pa.array(self.encoder.normalize(texts), pa.large_string())
            ok &= np.asarray(pc.and_(
                pc.equal(pc.count_substring(normal, "\u2581"), 1),
                pc.and_(pc.starts_with(normal, "\u2581"),
                        pc.greater(pc.utf8_length(normal), 1))).to_numpy(zero_copy_only=False))
        return ok

    def _pieces_stop_at_spaces(self) -> bool:
        """Whether this SentencePiece model encodes each word on its own: a BPE (or word, or
        character) model with a dummy ``▁`` prefix, none of whose pieces but whitespace-only
        ones holds a ``▁`` past its start (a model trained without splitting at whitespace
        has ``▁of▁the``). Not a unigram model: its best path sums scores over the whole text,
        so near-ties between two splits of a word fall with the rounding of what precedes."""
        if self._spaces_split is None:
            sp = self.encoder
            pieces = (sp.id_to_piece(i) for i in range(sp.get_piece_size()))
            proto = sp.serialized_model_proto()
            self._maps_chars = bool(_proto_field(proto, _NORMALIZER_SPEC, _CHARSMAP))
            self._spaces_split = (
                _proto_field(proto, _TRAINER_SPEC, _MODEL_TYPE) not in (None, _UNIGRAM)
                and sp.normalize("a") == "\u2581a"  # a dummy ▁ stands for a word's space
                and not any(p.strip("\u2581") and "\u2581" in p[1:] for p in pieces))
        return self._spaces_split

    def _encode_joined_words(self, words: list[str],
                             initial: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """SentencePiece ids of words without ``▁``, many per call: ``" ".join(words)`` cut
        at the ``initial`` tokens; None when a piece spans a space."""
        flats, lengths = [], []
        step = 4096  # words per text: SentencePiece encodes the texts in its own threads
        texts = [" ".join(words[i:i + step]) for i in range(0, len(words), step)]
        for i, ids in enumerate(self.encoder.encode(texts)):
            flat = np.asarray(ids, dtype=np.int64)
            starts = initial[np.minimum(flat, len(initial) - 1)]
            count = min(step, len(words) - i * step)
            if len(flat) == 0 or not starts[0] or int(starts.sum()) != count:
                return None  # a piece spans a space: this model does not split at whitespace
            flats.append(flat)
            lengths.append(np.bincount(np.cumsum(starts) - 1, minlength=count))
        if not flats:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(flats), np.concatenate(lengths)


class HFTokenizer(Tokenizer):
    """An HF ``tokenizer.json`` (or a GPT-2 ``vocab.json`` + ``merges.txt``): a plain GPT-2
    style byte-level BPE runs through its tiktoken twin, once the twin gave the library's
    ids; words encode alone only then."""

    kind = "hf"

    def __post_init__(self) -> None:
        super().__post_init__()
        byte_level = "ByteLevel" in self.encoder.to_str()
        self._byte_level_table = ({ord(c): b for c, b in _byte_decoder().items()}
                                  if byte_level else None)
        self._twin: tuple[Any, re.Pattern[str] | None] | None = (
            _tiktoken_twin(self.encoder) if byte_level else None)
        self._twin_checked = False

    @classmethod
    def load(cls, name: str, path: Path) -> HFTokenizer:
        from tokenizers import Tokenizer as Library

        try:
            tok = Library.from_file(str(path))
        except Exception as exc:  # the library raises a bare Exception on bad JSON
            raise InputError(f"{path} is not an HF tokenizer.json: {exc}") from exc
        byte_level = "ByteLevel" in tok.to_str()
        fallback, unknown, marks, initial = _hf_flags(tok, byte_level)
        return cls(name, tok, fallback, unknown, marks, initial, (path,))

    @classmethod
    def load_gpt2(cls, name: str, path: Path) -> HFTokenizer:
        """A GPT-2 style ``vocab.json`` with its merges file beside it."""
        from tokenizers import Tokenizer as Library
        from tokenizers import decoders, models, pre_tokenizers

        merges = path.with_name(path.name.replace("vocab.json", "merges.txt")
                                if "vocab.json" in path.name else "merges.txt")
        if not merges.is_file():
            raise InputError(f"{path} needs its merges file beside it: {merges} does not exist")
        try:
            tok = Library(models.BPE.from_file(str(path), str(merges)))
        except Exception as exc:  # the library raises a bare Exception on bad files
            raise InputError(f"{path} + {merges} are not a GPT-2 vocab and merges: {exc}") \
                from exc
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        fallback, unknown, marks, initial = _hf_flags(tok, byte_level=True)
        return cls(name, tok, fallback, unknown, marks, initial, (path, merges))

    @property
    def encodes_words(self) -> bool:
        return self._twin is not None

    def pretokens(self, texts: Sequence[str]) -> list[str] | None:
        if self.encoder.pre_tokenizer is None:
            return None
        table = self._byte_level_table
        pieces = []
        for text in texts:
            for piece, _ in self.encoder.pre_tokenizer.pre_tokenize_str(text):
                if table is not None:  # byte-level stand-ins → the bytes → the text
                    piece = piece.translate(table).encode("latin-1").decode("utf-8", "replace")
                pieces.append(piece)
        return pieces

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        texts = list(texts)
        twin = self._checked_twin(texts)
        if twin is not None:
            added = self._twin[1] if self._twin is not None else None
            if added is not None and any(map(added.search, texts)):
                return self._encode_twin(texts, twin, added)
            return _split(*_encode_joined(twin, texts))
        return [e.ids for e in self.encoder.encode_batch(texts, add_special_tokens=False)]

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        texts = list(texts)
        if self._twin is not None:
            twin = self._checked_twin(texts)
            added = self._twin[1] if self._twin is not None else None
            if twin is not None and not (added is not None and any(map(added.search, texts))):
                return _encode_joined(twin, texts)
        return _flatten(self.encode(texts))

    def encode_words(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        words = list(words)
        if self._twin is None or self._checked_twin(words) is None:
            return None
        return self.encode_flat([" " + w for w in words])

    def encodes_alone(self, texts: Sequence[str]) -> np.ndarray:
        """Not for the added tokens (they may take the space beside them)."""
        texts = list(texts)
        if self._twin is None:
            return np.zeros(len(texts), dtype=bool)
        ok = np.ones(len(texts), dtype=bool)
        added = self._twin[1]
        if added is not None:
            ok[[i for i, t in enumerate(texts) if added.search(t)]] = False
        return ok

    def check(self, texts: Sequence[str]) -> None:
        """Check the tiktoken twin against the library on these texts (it is used only if
        both give the same ids)."""
        self._checked_twin(list(texts))

    def _checked_twin(self, texts: list[str]) -> Any:
        """The tiktoken twin, once its ids matched the HF library's on the first texts it
        was given; None (and the HF encoder from then on) after any difference."""
        with _TWIN_LOCK:  # threads of the fertility report share the tokenizer
            if self._twin is None:
                return None
            encoding, added = self._twin
            if not self._twin_checked:
                self._twin_checked = True
                check = [t for t in texts if added is None or not added.search(t)]
                check = check[:_TWIN_CHECK]
                reference = [e.ids for e in
                             self.encoder.encode_batch(check, add_special_tokens=False)]
                if reference != [encoding.encode_ordinary(t) for t in check]:
                    self._twin = None
                    return None
            return encoding

    def _encode_twin(self, texts: list[str], encoding: Any,
                     added: re.Pattern[str] | None) -> list[list[int]]:
        """Texts holding an added token through the HF encoder, the others through the
        tiktoken twin."""
        return [self.encoder.encode(t, add_special_tokens=False).ids
                if added is not None and added.search(t) else encoding.encode_ordinary(t)
                for t in texts]


def _split(flat: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
    ids, ends = flat.tolist(), np.cumsum(lengths).tolist()
    return [ids[end - n:end] for end, n in zip(ends, lengths.tolist(), strict=True)]


def _flatten(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64,
                       count=int(lengths.sum()))
    return flat, lengths


def _encode_joined(encoding: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """tiktoken ids of each text as if encoded alone, in few native calls (which release the
    GIL): texts joined by the separator token, cut apart at it."""
    separator = encoding._special_tokens.get(_SEPARATOR)
    if separator is None:
        return _flatten([encoding.encode_ordinary(t) for t in texts])
    sizes = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 1)
    cuts = np.unique(np.searchsorted(sizes, np.arange(_JOIN_CHARS, sizes[-1] if len(sizes)
                                                      else 0, _JOIN_CHARS)))
    flats, lengths = [], []
    for start, stop in itertools.pairwise([0, *cuts.tolist(), len(texts)]):
        if start == stop:
            continue
        joined = _SEPARATOR.join(texts[start:stop])
        if joined.count(_SEPARATOR_CORE) != stop - start - 1:  # a text holds the separator
            flat, n = _flatten([encoding.encode_ordinary(t) for t in texts[start:stop]])
        else:
            ids = encoding.encode_to_numpy(joined, allowed_special={_SEPARATOR})
            at = np.flatnonzero(ids == separator)
            n = np.diff(np.append(at, len(ids)), prepend=-1) - 1
            flat = np.delete(ids, at).astype(np.int64)
        flats.append(flat)
        lengths.append(n)
    if not flats:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(flats), np.concatenate(lengths)


#: ModelProto.trainer_spec.model_type of a SentencePiece model: unigram (the default)
_TRAINER_SPEC, _MODEL_TYPE, _UNIGRAM = 2, 3, 1
#: ModelProto.normalizer_spec.precompiled_charsmap: empty when only whitespace is normalized
_NORMALIZER_SPEC, _CHARSMAP = 3, 2


def _proto_field(proto: bytes, outer: int, inner: int) -> bytes | int | None:
    """Field ``inner`` of message field ``outer`` of a serialized protobuf message (the
    last one, as protobuf reads them), without the protobuf library; None when absent or
    unreadable (the caller then assumes the cautious default)."""

    def fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
        i = 0
        while i < len(data):
            key, i = _varint(data, i)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, i = _varint(data, i)
                yield number, value
            elif wire == 2:
                size, i = _varint(data, i)
                yield number, data[i:i + size]
                i += size
            elif wire in (1, 5):  # fixed 64 / 32 bits
                i += 8 if wire == 1 else 4
            else:
                raise ValueError(f"protobuf wire type {wire}")

    found = None
    try:
        for number, message in fields(proto):
            if number == outer and isinstance(message, bytes):
                for field, value in fields(message):
                    if field == inner:
                        found = value
    except ValueError:
        return None
    return found


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated protobuf varint")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7


def _flags(n: int) -> np.ndarray:
    return np.zeros(n, dtype=bool)


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable stand-ins for the 256 byte values."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes, strict=True)}


#: GPT-2's pre-tokenizer regex, the one HF's ByteLevel(use_regex=True) applies
_GPT2 = r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
#: segments encoded both ways before the tiktoken twin of an HF tokenizer is trusted
_TWIN_CHECK = 2000
_TWIN_LOCK = threading.Lock()


def _tiktoken_twin(tok: Any) -> tuple[Any, re.Pattern[str] | None] | None:
    """A tiktoken encoding that gives the same ids as ``tok`` (an HF tokenizer), when ``tok``
    is a plain GPT-2 style byte-level BPE: no normalizer, ByteLevel pre-tokenizer with GPT-2's
    regex, merges in id order. Its ranks hold the 256 bytes and each merge's product at its
    id, nothing else, so that tiktoken can build only what the merges build. Texts holding an
    added token go through ``tok`` itself (the second item matches them)."""
    config = json.loads(tok.to_str())
    model, pre = config.get("model") or {}, config.get("pre_tokenizer") or {}
    if (model.get("type") != "BPE" or config.get("normalizer") or model.get("dropout")
            or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")
            or model.get("byte_fallback") or pre.get("type") != "ByteLevel"
            or pre.get("add_prefix_space") or not pre.get("use_regex", True)):
        return None
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - a dependency, but the HF path still works
        return None
    decoder, vocab = _byte_decoder(), model.get("vocab") or {}
    ranks: dict[bytes, int] = {}
    for char, byte in decoder.items():
        if char not in vocab:
            return None
        ranks[bytes([byte])] = vocab[char]
    last = max(ranks.values())
    for merge in model.get("merges") or []:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        rank = vocab.get(left + right)
        if rank is None or rank <= last:
            return None  # merge order and id order differ: tiktoken would merge differently
        try:
            ranks[bytes(decoder[c] for c in left + right)] = last = rank
        except KeyError:  # not a byte-level vocabulary after all
            return None
    if len(set(ranks.values())) != len(ranks):
        return None
    encoding = tiktoken.Encoding(name="hf-twin", pat_str=_GPT2, mergeable_ranks=ranks,
                                 special_tokens={_SEPARATOR: max(ranks.values()) + 1})
    added = [t["content"] for t in config.get("added_tokens") or []]
    pattern = re.compile("|".join(map(re.escape, added))) if added else None
    return encoding, pattern


def _hf_flags(tok: Any, byte_level: bool) -> tuple[np.ndarray, ...]:
    size = tok.get_vocab_size(with_added_tokens=True)
    unknown, marks, initial = _flags(size), _flags(size), _flags(size)
    decoder = _byte_decoder() if byte_level else None
    vocab = tok.get_vocab(with_added_tokens=True)
    model = json.loads(tok.to_str()).get("model", {})
    wordpiece = model.get("type") == "WordPiece"
    for token, i in vocab.items():
        if decoder is not None:
            piece = bytes(decoder.get(c, 0) for c in token)
        else:
            piece = token.removeprefix("##").encode()
        marks[i] = _starts_with_mark(piece)
        if wordpiece:
            initial[i] = not token.startswith("##")
        else:
            initial[i] = piece[:1] in (b" ", b"\t") or token.startswith("\u2581")
    unk = model.get("unk_token")
    if unk is not None and tok.token_to_id(unk) is not None:
        unknown[tok.token_to_id(unk)] = True
    return _flags(size), unknown, marks, initial


def load_tokenizer(spec: str) -> Tokenizer:
    """A tokenizer from a CLI spec: ``[NAME=]PATH``, ``bytes`` or ``chars``."""
    name, _, target = spec.partition("=") if "=" in spec else ("", "", spec)
    if "=" in spec and Path(spec).is_file():  # a path that holds "=" itself
        name, target = "", spec
    if target in _BASELINES:
        return _BASELINES[target].load(name)
    path = Path(target)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise InputError(f"tokenizer {target} {what} (give a .model, tokenizer.json, "
                         "vocab.json, tiktoken ranks file, 'bytes' or 'chars')")
    name = name or path.name
    if path.suffix == ".json":  # an HF tokenizer.json has a "model"; a GPT-2 vocab does not
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"tokenizer {path} is not valid JSON: {exc}") from exc
        is_hf = isinstance(data, dict) and isinstance(data.get("model"), dict)
        if is_hf:
            return HFTokenizer.load(name, path)
        is_vocab = isinstance(data, dict) and bool(data) \
            and all(isinstance(v, int) for v in data.values())
        if not is_vocab:
            raise InputError(f"tokenizer {path} is neither an HF tokenizer.json (it has no "
                             "'model') nor a GPT-2 vocab.json (token → id)")
        return HFTokenizer.load_gpt2(name, path)
    if _is_tiktoken(path):
        return TiktokenTokenizer.load(name, path)
    if "merges" in path.name and path.suffix == ".txt":  # half of a GPT-2 pair
        vocab = path.with_name(path.name.replace("merges.txt", "vocab.json"))
        raise InputError(f"tokenizer {path} is a BPE merges file: give its vocab.json "
                         f"({vocab if vocab.is_file() else 'beside it'}), which reads the "
                         "merges with it")
    return SentencePieceTokenizer.load(name, path)


#: the built-in yardsticks, by spec
_BASELINES: dict[str, type[_Baseline]] = {"bytes": BytesTokenizer, "chars": CharsTokenizer}


def _is_tiktoken(path: Path) -> bool:
    """A tiktoken ranks file starts with a ``base64 rank`` line; a SentencePiece model is a
    binary protobuf."""
    with open(path, "rb") as f:
        first = f.readline(256).split()
    try:
        base64.b64decode(first[0], validate=True)
        int(first[1])
    except (ValueError, IndexError):
        return False
    return len(first) == 2



def _read_tiktoken_ranks(path: Path) -> dict[bytes, int]:
    """``base64(token) rank`` per line, checked: tiktoken panics on a byte without a rank
    or two tokens with one rank (a truncated file), and its own loader caches files by
    path in the temp directory, so a changed file would be read stale."""
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            parts = raw.split()
            if not parts:
                continue
            try:
                if len(parts) != 2:
                    raise ValueError
                token, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
            except (ValueError, binascii.Error):
                raise InputError(f"{path}:{number}: not a tiktoken ranks line (base64 token, "
                                 f"a space, a rank): {raw[:60]!r}") from None
            if token in ranks or rank < 0:
                raise InputError(f"{path}:{number}: token listed twice or a negative rank")
            ranks[token] = rank
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise InputError(f"{path}: no rank for {len(missing)} of the 256 bytes (0x{missing[0]:02x} "
                         "first): the file is truncated or not a byte-level BPE")
    if len(set(ranks.values())) != len(ranks):
        raise InputError(f"{path}: two tokens share a rank (a truncated or edited file)")
    return ranks

