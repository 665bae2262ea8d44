"""Tokenizers behind one small interface, so reports treat SentencePiece, HF and tiktoken alike.

``load_tokenizer(spec)`` takes what the CLI takes: a SentencePiece ``.model``, an HF
``tokenizer.json``, a GPT-2 style ``vocab.json`` (its ``merges.txt`` beside it), a
tiktoken-format ranks file (``base64(token) rank`` per line, as Llama 3/4 ship), or the
baselines ``bytes`` and ``chars``; ``NAME=SPEC`` names it. Each tokenizer encodes a batch of
texts through its library's native batch encoder and knows, per token id, whether the token
is a byte-fallback or unknown token and whether it begins with a combining mark.
"""

from __future__ import annotations

import base64
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spr_data.errors import InputError

__all__ = ["Tokenizer", "load_tokenizer"]

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


def _starts_with_mark(piece: bytes) -> bool:
    """Whether a token's text begins with a combining mark (a byte-level token that begins
    inside a character begins with no character at all)."""
    if piece[:1] and 0x80 <= piece[0] < 0xC0:
        return False
    text = piece.decode("utf-8", errors="ignore").lstrip(" \u2581")
    return bool(text) and unicodedata.category(text[0]).startswith("M")


@dataclass
class Tokenizer:
    """A loaded tokenizer: ``encode`` gives token ids per text; the arrays flag ids."""

    name: str
    kind: str
    encoder: Any
    byte_fallback: np.ndarray  # bool per id: a SentencePiece <0x..> byte piece
    unknown: np.ndarray  # bool per id: the unknown token
    starts_with_mark: np.ndarray  # bool per id: the token's text begins with a combining mark
    #: bool per id: the token starts a new word (a leading space or ▁; not a WordPiece ##)
    word_initial: np.ndarray | None = None

    def __post_init__(self) -> None:
        byte_level = self.kind == "hf" and "ByteLevel" in self.encoder.to_str()
        self._byte_level_table = ({ord(c): b for c, b in _byte_decoder().items()}
                                  if byte_level else None)
        self._twin: tuple[Any, re.Pattern[str] | None] | None = (
            _tiktoken_twin(self.encoder) if byte_level else None)
        self._twin_checked = False

    def pretokens(self, texts: Sequence[str]) -> list[str] | None:
        """The pieces the tokenizer's pre-tokenizer cuts ``texts`` into, before any merge;
        None when it has none to ask (SentencePiece, tiktoken, the baselines)."""
        if self.kind != "hf" or self.encoder.pre_tokenizer is None:
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
        """Token ids of each text, special tokens left out."""
        texts = list(texts)
        if self.kind == "bytes":
            return [list(t.encode("utf-8")) for t in texts]
        if self.kind == "chars":
            return [[min(ord(c), 0x10FFFF) for c in t] for t in texts]
        if self.kind == "sentencepiece":
            ids: list[list[int]] = self.encoder.encode(texts)
            return ids
        if self.kind == "tiktoken":  # its batch call runs a thread pool: 4x slower here
            return list(map(self.encoder.encode_ordinary, texts))
        if self._twin is not None:
            return self._encode_twin(texts, *self._twin)
        return [e.ids for e in self.encoder.encode_batch(texts, add_special_tokens=False)]

    def _encode_twin(self, texts: list[str], encoding: Any,
                     added: re.Pattern[str] | None) -> list[list[int]]:
        """GPT-2 style byte-level BPE through tiktoken: the same ids, ~5x faster than the HF
        library, whose regex pre-tokenizer is most of its time on non-Latin text. The first
        batch is encoded both ways; any difference and the HF encoder is used from then on."""
        ids = [self.encoder.encode(t, add_special_tokens=False).ids
               if added is not None and added.search(t) else encoding.encode_ordinary(t)
               for t in texts]
        if not self._twin_checked:
            self._twin_checked = True
            check = texts[:_TWIN_CHECK]
            reference = [e.ids for e in
                         self.encoder.encode_batch(check, add_special_tokens=False)]
            if reference != ids[:len(check)]:
                self._twin = None
                return self.encode(texts)
        return ids


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
                                 special_tokens={})
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
    name, _, target = spec.rpartition("=") if "=" in spec else ("", "", spec)
    if target in ("bytes", "chars"):
        size = 256 if target == "bytes" else 0x110000
        initial = _flags(size)
        initial[[9, 32]] = True  # a space starts a word
        return Tokenizer(name or target, target, None, _flags(size), _flags(size),
                         _flags(size), initial)
    path = Path(target)
    if not path.is_file():
        raise InputError(f"tokenizer {target} does not exist (give a .model, tokenizer.json, "
                         "vocab.json, tiktoken ranks file, 'bytes' or 'chars')")
    name = name or path.name
    if path.suffix == ".json":  # an HF tokenizer.json has a "model"; a GPT-2 vocab does not
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"tokenizer {path} is not valid JSON: {exc}") from exc
        is_hf = isinstance(data, dict) and isinstance(data.get("model"), dict)
        if is_hf:
            return _hf(name, path)
        is_vocab = isinstance(data, dict) and bool(data) \
            and all(isinstance(v, int) for v in data.values())
        if not is_vocab:
            raise InputError(f"tokenizer {path} is neither an HF tokenizer.json (it has no "
                             "'model') nor a GPT-2 vocab.json (token → id)")
        return _gpt2(name, path)
    return _tiktoken(name, path) if _is_tiktoken(path) else _sentencepiece(name, path)


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


def _sentencepiece(name: str, path: Path) -> Tokenizer:
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
    return Tokenizer(name, "sentencepiece", sp, fallback, unknown, marks, initial)


def _hf(name: str, path: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer

    try:
        tok = HFTokenizer.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception on bad JSON
        raise InputError(f"{path} is not an HF tokenizer.json: {exc}") from exc
    byte_level = "ByteLevel" in tok.to_str()
    fallback, unknown, marks, initial = _hf_flags(tok, byte_level)
    return Tokenizer(name, "hf", tok, fallback, unknown, marks, initial)


def _gpt2(name: str, path: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    merges = path.with_name(path.name.replace("vocab.json", "merges.txt"))
    if not merges.is_file():
        raise InputError(f"{path} needs its merges file beside it: {merges} does not exist")
    try:
        tok = HFTokenizer(models.BPE.from_file(str(path), str(merges)))
    except Exception as exc:  # the library raises a bare Exception on bad files
        raise InputError(f"{path} + {merges} are not a GPT-2 vocab and merges: {exc}") from exc
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fallback, unknown, marks, initial = _hf_flags(tok, byte_level=True)
    return Tokenizer(name, "hf", tok, fallback, unknown, marks, initial)


def _tiktoken(name: str, path: Path) -> Tokenizer:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(path))
    pattern = _TIKTOKEN_PATTERNS.get(len(ranks), _CL100K)
    encoding = tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks,
                                 special_tokens={})
    size = max(ranks.values()) + 1
    marks, initial = _flags(size), _flags(size)
    for token, rank in ranks.items():
        marks[rank] = _starts_with_mark(token)
        initial[rank] = token[:1] in (b" ", b"\t")
    return Tokenizer(name, "tiktoken", encoding, _flags(size), _flags(size), marks, initial)
