"""``train-tokenizer``: tokenizers trained on streamed, script- or language-balanced text.

The fertility trap has two causes, and this fixes both. (1) GPT-2-style pre-tokenizers split
words with a letter class (``\\p{L}``) that leaves out combining marks (``\\p{M}``), so every
Bengali or Devanagari word is cut at each vowel sign before BPE sees it; the ``bpe`` and
``byte-bpe`` kinds here keep marks inside words. (2) A corpus where one language dominates by
characters gets a vocabulary for that language; groups (scripts or languages) are resampled
with temperature α: a group with share p of the characters gets a share ∝ p^α (α = 1 keeps
the corpus as it is, α = 0 makes the groups equal). Rarer groups are repeated, nothing is
dropped, and the text is streamed into the trainer — never held in memory as a corpus.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from spr_data.errors import InputError, OutputError
from spr_data.fsio import (
    atomic_write_bytes,
    is_token,
    os_error_message,
    sha256_file,
    temp_path,
    temp_token,
)
from spr_data.outdir import WORK_DIR, output_lock, temp_tag
from spr_data.qa.scripts import normalize_lang, profile
from spr_data.reader import ReaderOptions, check_local_output

#: ``on_progress(phase, done, total)``; total None while unknown.
Progress = Callable[[str, int, int | None], None]

__all__ = ["KINDS", "MARK_AWARE_PATTERN", "TrainResult", "held_out_report", "iter_segments",
           "train_tokenizer"]

KINDS = ("sentencepiece-unigram", "sentencepiece-bpe", "bpe", "byte-bpe")

#: GPT-2's split, with combining marks counted as part of words (and digits kept apart).
MARK_AWARE_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?[\p{L}\p{M}]+| ?\p{N}+"
                      r"| ?[^\s\p{L}\p{M}\p{N}]+|\s+(?!\S)|\s+")
_BATCH = 4096
#: what a run writes into --out; an existing one is replaced only when an earlier run wrote it
#: (``training.json`` names its tokenizer and that file's hash) and only with ``overwrite``
TRAINING = "training.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
#: Every HOLD_OUT_EVERY-th segment is kept out of training for the closing fertility report.
HOLD_OUT_EVERY = 100
MAX_HELD_OUT = 20_000


def iter_segments(inputs: Sequence[str | Path],
                  reader: ReaderOptions | None = None) -> Iterator[tuple[str, str]]:
    """``(text, language)`` for every segment of datasets (each text column) or text files,
    streamed a batch at a time through the retrying reader (a NAS blip is retried, never an
    EOF that ends the trainer's stream)."""
    from spr_data.dataset import open_dataset
    from spr_data.pipeline.sources import iter_text_lines, langs_from_name
    from spr_data.schema import text_columns

    for item in inputs:
        path = Path(item)
        if "://" in str(item) or path.is_dir():
            ds = open_dataset(str(item), reader=reader)
            ds.require_rows(item, "train on")
            columns = text_columns(ds.kind)  # type: ignore[arg-type]
            for batch in ds.iter_batches(_BATCH):
                for i, column in enumerate(columns):
                    lang = normalize_lang(ds.langs[i]) if i < len(ds.langs) else "und"
                    for text in batch.column(column).to_pylist():
                        yield text, lang
        elif path.is_file():
            found = langs_from_name(path, "mono")
            lang = normalize_lang(found[0]) if found else "und"
            for block in iter_text_lines(path):
                for text in block:
                    yield text, lang
        else:
            raise InputError(f"input {path} does not exist")


def _groups_of(texts: list[str], langs: list[str], by: str) -> list[str]:
    if by == "lang":
        return langs
    return [str(s) for s in profile(pa.array(texts, pa.string())).dominant_script()]


def _batched(inputs: Sequence[str | Path],
             reader: ReaderOptions | None) -> Iterator[tuple[list[str], list[str]]]:
    texts: list[str] = []
    langs: list[str] = []
    for text, lang in iter_segments(inputs, reader):
        texts.append(text)
        langs.append(lang)
        if len(texts) == _BATCH:
            yield texts, langs
            texts, langs = [], []
    if texts:
        yield texts, langs


#: Groups under this share of the characters are fed as they are: temperature sampling would
#: repeat a few stray segments (a Cyrillic name, a line of digits) hundreds of times.
MIN_BALANCED_SHARE = 0.005
#: No group is repeated more than this many times on average.
MAX_RATE = 20.0


def sampling_rates(chars: dict[str, int], alpha: float,
                   weights: dict[str, float] | None = None) -> dict[str, float]:
    """How many times each group's segments are fed to the trainer (on average), so that the
    group shares of characters become ∝ p^α (or ∝ ``weights``); the least boosted group
    gets 1, so nothing is dropped. Groups without letters ("None") and tiny groups keep 1."""
    total = sum(chars.values())
    if not total:
        return {}
    rates = {g: 1.0 for g in chars}
    share = {g: c / total for g, c in chars.items()
             if c and c / total >= MIN_BALANCED_SHARE and g not in ("None", "und")}
    if len(share) < 2:
        return rates
    if weights:
        missing = [g for g in share if g not in weights]
        if missing:
            raise InputError(f"--weights gives no weight for {', '.join(missing)}")
        unknown = [g for g in weights if g not in share]
        if unknown:
            raise InputError(f"--weights names {', '.join(unknown)}, not a balanced group of "
                             f"this input (those are {', '.join(sorted(share))}; groups under "
                             f"{MIN_BALANCED_SHARE:.1%} of the characters keep their size)")
        target = {g: weights[g] for g in share}
    else:
        target = {g: p ** alpha for g, p in share.items()}
    norm = sum(target.values())
    ratio = {g: (target[g] / norm) / share[g] for g in share}
    low = min(ratio.values())
    rates.update({g: min(r / low, MAX_RATE) for g, r in ratio.items()})
    return rates


@dataclass
class TrainResult:
    """What ``train-tokenizer`` wrote and measured; ``to_json`` is ``training.json``."""

    out: Path
    kind: str
    vocab_size: int
    balance: str
    alpha: float
    chars_by_group: dict[str, int]
    rates: dict[str, float]
    fed_chars_by_group: dict[str, int]
    segments_fed: int
    tokenizer_file: Path
    held_out: list[tuple[str, str]]
    vocab_size_asked: int = 0  # --vocab-size; vocab_size is what the trainer made
    weights: dict[str, float] | None = None  # --weights, when given instead of alpha
    seed: int = 0
    #: sha256 of the tokenizer file: what tells a later run that the file is this run's
    tokenizer_sha256: str = ""

    @property
    def warnings(self) -> list[str]:
        """A vocabulary smaller than asked (a BPE trainer stops when no pair is left to
        merge; SentencePiece refuses instead): a model sized by --vocab-size would not fit."""
        if self.vocab_size_asked and self.vocab_size < self.vocab_size_asked:
            return [f"the text gave {self.vocab_size:,} tokens of the {self.vocab_size_asked:,} "
                    "asked (--vocab-size): it is too little text for that vocabulary; size "
                    f"the model's embeddings by {self.vocab_size:,}, or train on more text"]
        return []

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "vocab_size": self.vocab_size,
                "vocab_size_asked": self.vocab_size_asked or self.vocab_size,
                "warnings": self.warnings,
                "balance": self.balance, "weights": self.weights, "seed": self.seed,
                "alpha": self.alpha, "chars_by_group": self.chars_by_group,
                "sampling_rates": {g: round(r, 4) for g, r in self.rates.items()},
                "fed_chars_by_group": self.fed_chars_by_group,
                "segments_fed": self.segments_fed, "held_out_segments": len(self.held_out),
                "tokenizer": self.tokenizer_file.name,
                "tokenizer_sha256": self.tokenizer_sha256}


def train_tokenizer(
    inputs: Sequence[str | Path],
    out: str | Path,
    *,
    kind: str,
    vocab_size: int,
    balance: str = "script",
    alpha: float = 0.3,
    weights: dict[str, float] | None = None,
    seed: int = 0,
    reader: ReaderOptions | None = None,
    on_progress: Progress | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Train a tokenizer of ``kind`` on the balanced stream and write it into ``out``;
    ``reader`` says how datasets are read (network filesystems, retries, a local cache).
    ``on_progress(phase, done, total)`` hears each phase: ``count`` (segments read, total
    unknown), ``sample`` (segments fed, of about ``total``), ``train`` (after the stream).

    ``out`` is locked for the run. An earlier run's tokenizer there is replaced only with
    ``overwrite``; a ``tokenizer.json``, ``tokenizer.model`` or ``training.json`` that no run
    wrote is never replaced. A run that fails or is interrupted leaves no temp file behind,
    and one killed outright leaves only temp files its rerun proves its own and removes."""
    check_local_output(out)
    out = Path(out)
    with output_lock(out, command="train-tokenizer"):
        if (out / "manifest.json").exists() or any(
                (out / WORK_DIR / n).exists() for n in ("outputs", "run.json")):
            raise InputError(f"--out {out} is a dataset (or an unfinished run's output); give "
                             "a directory for the tokenizer")
        _remove_run_temps(out)  # a killed run's, by the tokens its work state recorded
        try:
            return _train_tokenizer(inputs, out, kind=kind, vocab_size=vocab_size,
                                    balance=balance, alpha=alpha, weights=weights, seed=seed,
                                    reader=reader, overwrite=overwrite,
                                    on_progress=on_progress or (lambda p, d, t: None))
        except OSError as exc:  # writing the tokenizer: a full disk, a read-only directory
            raise OutputError(os_error_message(exc, out)) from exc
        finally:  # whatever ended the run (an interrupt too): its temp files go
            _remove_run_temps(out)


def held_out_report(result: TrainResult,
                    on_progress: Progress | None = None) -> dict[str, Any] | None:
    """The fertility report of the trained tokenizer on the segments held out of its training
    (one input per language), or None when none were held out; ``on_progress`` hears it as
    the ``held-out report`` phase."""
    from spr_data.pipeline.fertility import TextSource, fertility_report
    from spr_data.tokenizers import load_tokenizer

    progress = on_progress or (lambda p, d, t: None)
    progress("held-out report", 0, len(result.held_out))
    by_lang: dict[str, list[str]] = {}
    for text, lang in result.held_out:
        by_lang.setdefault(lang, []).append(text)
    sources = [TextSource(f"held-out:{lang}", None if lang == "und" else lang, texts)
               for lang, texts in by_lang.items()]
    report = fertility_report(sources, [load_tokenizer(str(result.tokenizer_file))]) \
        if sources else None
    progress("held-out report", len(result.held_out), len(result.held_out))
    return report


def _remove_run_temps(out: Path) -> None:
    """Remove the temp files runs in ``out`` made (``tokenizer.PID-TOKEN.tmp.model`` and
    ``.vocab``, ``tokenizer.json.PID-TOKEN.tmp``, ``training.json.PID-TOKEN.tmp``) whose
    token a run recorded in ``out/.work/tags`` before making them, then those records; a
    file of a like name that no run recorded stays."""
    records = out / WORK_DIR / "tags"
    try:
        tags = {p.name for p in records.iterdir() if is_token(p.name)}
        names = [p.name for p in out.iterdir()]
    except OSError:
        return
    for name in names:
        stem = name.removesuffix(".model").removesuffix(".vocab") \
            if name.endswith((".tmp.model", ".tmp.vocab")) else name
        if any(temp_token(stem, final) in tags
               for final in ("tokenizer", *TOKENIZER_FILES, TRAINING)):
            (out / name).unlink(missing_ok=True)
    for tag in tags:
        (records / tag).unlink(missing_ok=True)
    for directory in (records, records.parent):  # only if empty: a user's .work stays
        with contextlib.suppress(OSError):
            directory.rmdir()


def _earlier_run(out: Path) -> set[str]:
    """The files of ``out`` an earlier train-tokenizer wrote: its ``training.json`` and the
    tokenizer file that names (when its hash is the one recorded, or no hash was: older
    runs recorded none)."""
    try:
        made = json.loads((out / TRAINING).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return set()
    if not (isinstance(made, dict) and made.get("kind") in KINDS
            and made.get("tokenizer") in TOKENIZER_FILES):
        return set()
    own = {TRAINING}
    tokenizer = out / made["tokenizer"]
    recorded = made.get("tokenizer_sha256")
    if tokenizer.is_file() and (not recorded or sha256_file(tokenizer) == recorded):
        own.add(tokenizer.name)
    return own


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse, before any work, to replace a file in ``out`` that no run wrote, or an earlier
    run's tokenizer without ``overwrite``."""
    found = [n for n in (*TOKENIZER_FILES, TRAINING) if (out / n).exists()]
    own = _earlier_run(out)
    strangers = [n for n in found if n not in own]
    if strangers:
        raise InputError(
            f"{out / strangers[0]} was not written by spr-data train-tokenizer (no "
            f"{TRAINING} of an earlier run here names it); move it away or choose another "
            "--out: a run never replaces a file it did not write (overwrite=True replaces "
            "only an earlier run's tokenizer)")
    if found and not overwrite:
        raise InputError(f"{out} already holds a tokenizer from an earlier run "
                         f"({', '.join(found)}); pass overwrite=True to replace it")


#: the tokens a byte-level BPE holds before its first merge
_BYTES = 256


def _train_tokenizer(inputs: Sequence[str | Path], out: Path, *, kind: str, vocab_size: int,
                     balance: str, alpha: float, weights: dict[str, float] | None, seed: int,
                     reader: ReaderOptions | None, on_progress: Progress,
                     overwrite: bool) -> TrainResult:
    if kind not in KINDS:
        raise InputError(f"--kind {kind!r} is not one of {', '.join(KINDS)}")
    if balance not in ("script", "lang", "none"):
        raise InputError(f"--balance {balance!r} is not one of script, lang, none")
    if not 0.0 <= alpha <= 1.0:
        raise InputError(f"--alpha should be between 0 and 1, found {alpha}")
    if kind == "byte-bpe" and vocab_size <= _BYTES:
        raise InputError(f"--vocab-size {vocab_size} is not above the {_BYTES} bytes a byte-level "
                         f"BPE starts from (it would make {_BYTES} tokens and no merge); ask "
                         f"for more than {_BYTES}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {out}: {exc.strerror}") from exc
    _check_out(out, overwrite)
    chars: Counter[str] = Counter()
    segments: Counter[str] = Counter()
    for texts, langs in _batched(inputs, reader):  # pass 1: the groups' sizes
        for text, group in zip(texts, _groups_of(texts, langs, balance if balance != "none"
                                                 else "lang"), strict=True):
            segments[group] += 1
            if text.strip():
                chars[group] += len(text)
        on_progress("count", sum(segments.values()), None)
    if not chars:
        raise InputError("no text to train on: the inputs hold no segment that is not blank")
    rates = ({g: 1.0 for g in chars} if balance == "none"
             else sampling_rates(dict(chars), alpha, weights))
    fed: Counter[str] = Counter()
    count = [0]
    expected = round(sum(n * rates.get(g, 1.0) for g, n in segments.items())
                     * (1 - 1 / HOLD_OUT_EVERY))

    held_out: list[tuple[str, str]] = []

    def stream() -> Iterator[str]:  # pass 2: the balanced stream, deterministic from the seed
        rng = random.Random(seed)
        index = 0
        for texts, langs in _batched(inputs, reader):
            groups = _groups_of(texts, langs, balance if balance != "none" else "lang")
            for text, lang, group in zip(texts, langs, groups, strict=True):
                index += 1
                if index % HOLD_OUT_EVERY == 0:  # never trained on: the report measures these
                    if len(held_out) < MAX_HELD_OUT:
                        held_out.append((text, lang))
                    continue
                rate = rates.get(group, 1.0)
                times = int(rate) + (rng.random() < rate - int(rate))
                for _ in range(times):
                    fed[group] += len(text)
                    count[0] += 1
                    yield text
            on_progress("sample", count[0], max(expected, count[0]))
        on_progress("train", 0, None)  # the trainer has the whole stream: now it learns

    tag = temp_tag(out)  # recorded before any temp file is made: a rerun proves them ours
    if kind.startswith("sentencepiece"):
        target, stale = out / "tokenizer.model", out / "tokenizer.json"
        size = _train_sentencepiece(stream(), target, kind.split("-")[1], vocab_size, tag)
    else:
        target, stale = out / "tokenizer.json", out / "tokenizer.model"
        size = _train_hf(stream(), target, kind, vocab_size, tag)
    on_progress("train", 1, 1)
    stale.unlink(missing_ok=True)  # a tokenizer of another kind: an earlier run's (checked)
    result = TrainResult(out, kind, size, balance, alpha, dict(chars), rates, dict(fed),
                         count[0], target, held_out, vocab_size, weights, seed,
                         sha256_file(target))
    atomic_write_bytes(out / TRAINING,
                       json.dumps(result.to_json(), indent=2, ensure_ascii=False).encode(),
                       tag=tag)
    return result


def _train_hf(texts: Iterator[str], target: Path, kind: str, vocab_size: int,
              tag: str | None = None) -> int:
    """Train and write the tokenizer; its vocabulary size (under ``vocab_size`` when the
    text has fewer merges to learn)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    split = pre_tokenizers.Split(Regex(MARK_AWARE_PATTERN), behavior="isolated")
    if kind == "byte-bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=[])
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = split
        # the split keeps each word's space in its token (" Mann"): decoding joins the
        # tokens as they are (without a decoder, Hugging Face puts a space between each)
        tok.decoder = decoders.Fuse()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                      special_tokens=["<unk>"])
    tok.train_from_iterator(texts, trainer=trainer)
    tmp = temp_path(target, tag)
    try:
        tok.save(str(tmp))
        tmp.replace(target)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, Exception) and not isinstance(exc, OSError) and _disk_full(target):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target)) from exc
        raise
    size: int = tok.get_vocab_size(with_added_tokens=True)
    return size


def _train_sentencepiece(texts: Iterator[str], target: Path, model_type: str,
                         vocab_size: int, tag: str | None = None) -> int:
    """Train and write the model; its vocabulary size. The trainer writes the model to memory,
    not to a file: a file's name (a temp name with the run's pid) went into the model's
    ``trainer_spec.model_prefix``, so no two runs made the same bytes."""
    import io

    import sentencepiece as spm

    stopped: list[BaseException] = []

    def guarded() -> Iterator[str]:
        """The stream, noting what stopped it: SentencePiece turns an exception raised in
        its iterator (a Ctrl-C, an unreadable input) into a RuntimeError of its own."""
        try:
            yield from texts
        except BaseException as exc:
            stopped.append(exc)
            raise

    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=guarded(), model_writer=model, model_type=model_type,
            vocab_size=vocab_size, byte_fallback=True, character_coverage=0.9995,
            input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2,
            num_threads=2)
    except RuntimeError as exc:  # its checks: a vocabulary too small or too large
        if stopped:
            raise stopped[0] from None
        reason = (str(exc).strip().splitlines()[-1] if str(exc).strip()
                  else type(exc).__name__)
        raise InputError(f"SentencePiece cannot train a {model_type} model of "
                         f"{vocab_size:,} pieces on this text: {reason}") from None
    atomic_write_bytes(target, model.getvalue(), tag=tag)
    size: int = spm.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()
    return size


def _disk_full(target: Path) -> bool:
    """Whether the filesystem of ``target`` has no room left: the trainers report a failed
    write as their own error, so the cause is read from the filesystem."""
    try:
        st = os.statvfs(target.parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20
