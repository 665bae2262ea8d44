"""Train a tiny Transformer translation model on CPU, the spr-data way, end to end.

    python examples/train_tiny_mt.py --work /tmp/tiny-mt [--steps 300]
    python examples/train_tiny_mt.py --work /tmp/tiny-de --data pairs.tsv --langs en,de
    python examples/train_tiny_mt.py --work /tmp/tiny-mt --steps 600 --resume

1. ``ingest`` the data (default: the Tatoeba eng–cmn sample shipped with spr-data, or any
   tab-separated file given with ``--data``, its languages with ``--langs``), ``clean`` it,
   train a SentencePiece tokenizer on
   the clean pairs and ``tokenize`` them;
2. check that every trainable parameter gets a finite, non-zero gradient on the first batch
   (``assert_gradient_flow``) before spending any time training;
3. train through ``SprIterableDataset`` (token-budget batches, shuffled, length-bucketed) with
   ``FiniteStepGuard`` on every step (a poisoned batch is skipped and its row ids go to
   ``quarantine.jsonl``, for ``spr-data clean --quarantine``), a ``CoverageMonitor`` that
   reports each epoch's coverage, and an atomic checkpoint (model, optimizer, guard and the
   iterator's position) every ``--save-every`` steps: ``--resume`` continues with exactly the
   batches an uninterrupted run would have seen.

Each step is logged to ``WORK/steps.jsonl`` (step, epoch, loss, row ids).

Threads: torch's default (one per core) is the slowest choice on a shared machine: on a
loaded 2-core box its threads wait on each other and a run takes 10× as long (194 s against
20 s with one thread). ``--threads N`` sets them; the default takes the cores this process may
use (``os.sched_getaffinity``) minus the load already on them (``os.getloadavg``), at least 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spr_data import ingest
from spr_data.demo import demo_data_dir
from spr_data.errors import SprDataError
from spr_data.pipeline.clean import clean
from spr_data.pipeline.sources import parse_langs
from spr_data.pipeline.tokenize import tokenize
from spr_data.pipeline.torch_data import CoverageMonitor, SprIterableDataset
from spr_data.pipeline.train_tokenizer import train_tokenizer
from spr_data.train import FiniteStepGuard, assert_gradient_flow

BOS, EOS = 1, 2  # SentencePiece's defaults


def pick_threads(requested: int | None = None, *, cores: int | None = None,
                 load: float | None = None) -> int:
    """``requested``, else the cores this process may run on (``cores``) that are not busy
    already (``load``: the 1-minute load average), rounded, at least 1."""
    if requested is not None:
        if requested < 1:
            raise SystemExit(f"--threads {requested}: give 1 or more")
        return requested
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, min(cores, math.floor(cores - load + 0.5)))


def prepare(work: Path, data: Path | None, vocab_size: int = 2000,
            langs: tuple[str, str] = ("en", "zh")) -> tuple[Path, int]:
    """Raw pairs → ingest → clean → tokenizer → tokenize; returns (dataset, vocabulary)."""
    tokenized = work / "tokenized"
    model_file = work / "tokenizer" / "tokenizer.model"
    if not (tokenized / "manifest.json").exists():
        source = data or demo_data_dir() / "tatoeba_eng-cmn.sample.tsv"
        ingest([source], work / "raw", langs=list(langs), overwrite=True)
        clean(work / "raw", work / "clean", workers=1, overwrite=True)
        train_tokenizer([work / "clean"], work / "tokenizer", kind="sentencepiece-bpe",
                        vocab_size=vocab_size, overwrite=True)
        tokenize(work / "clean", tokenized, tokenizer=str(model_file), workers=1,
                 overwrite=True)
    import sentencepiece as spm

    return tokenized, spm.SentencePieceProcessor(model_file=str(model_file)).get_piece_size()


class TinyTransformer(nn.Module):
    """Encoder–decoder with shared, tied embeddings; ``pad`` is one index past the vocabulary."""

    def __init__(self, vocab: int, d_model: int = 128, layers: int = 2, max_len: int = 256):
        super().__init__()
        self.pad = vocab
        self.embed = nn.Embedding(vocab + 1, d_model, padding_idx=vocab)
        self.position = nn.Embedding(max_len, d_model)
        self.transformer = nn.Transformer(d_model, nhead=4, num_encoder_layers=layers,
                                          num_decoder_layers=layers, dim_feedforward=4 * d_model,
                                          dropout=0.1, batch_first=True)
        self.out = nn.Linear(d_model, vocab + 1, bias=False)
        self.out.weight = self.embed.weight
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.embed(ids) * math.sqrt(self.embed.embedding_dim) + self.position(positions)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        n = tgt_in.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=tgt_in.device).triu(1)
        h = self.transformer(self._embed(src), self._embed(tgt_in), tgt_mask=causal,
                             src_key_padding_mask=src == self.pad,
                             tgt_key_padding_mask=tgt_in == self.pad,
                             memory_key_padding_mask=src == self.pad, tgt_is_causal=True)
        return self.out(h)


def loss_of(model: TinyTransformer, batch: dict[str, Any]) -> torch.Tensor:
    """Teacher forcing: ``<s> y`` in, ``y </s>`` out; padding ignored."""
    src, tgt, mask = batch["src_ids"], batch["tgt_ids"], batch["tgt_mask"]
    rows = torch.arange(len(tgt))
    lengths = mask.sum(1)
    pad = torch.full((len(tgt), 1), model.pad)
    tgt_out = torch.cat([tgt, pad], 1)
    tgt_out[rows, lengths] = EOS
    tgt_in = torch.cat([torch.full((len(tgt), 1), BOS), tgt], 1)
    logits = model(src, tgt_in)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       tgt_out.reshape(-1), ignore_index=model.pad)


def _save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def train(work: Path, *, data: Path | None = None, steps: int = 300, max_tokens: int = 1500,
          save_every: int = 50, resume: bool = False, seed: int = 0,
          log_every: int = 10, threads: int | None = None,
          langs: tuple[str, str] = ("en", "zh")) -> list[dict[str, Any]]:
    """Train to ``steps`` optimizer steps in all; return this call's step records."""
    before = torch.get_num_threads()
    torch.set_num_threads(pick_threads(threads))
    try:
        return _train(work, data=data, steps=steps, max_tokens=max_tokens,
                      save_every=save_every, resume=resume, seed=seed, log_every=log_every,
                      langs=langs)
    finally:
        torch.set_num_threads(before)


def _train(work: Path, *, data: Path | None, steps: int, max_tokens: int, save_every: int,
           resume: bool, seed: int, log_every: int,
           langs: tuple[str, str]) -> list[dict[str, Any]]:
    work.mkdir(parents=True, exist_ok=True)
    print(f"torch threads: {torch.get_num_threads()}")
    dataset, vocab = prepare(work, data, langs=langs)
    torch.manual_seed(seed)
    model = TinyTransformer(vocab)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    guard = FiniteStepGuard(model, optimizer, max_norm=1.0,
                            quarantine=work / "quarantine.jsonl")
    data_iter = SprIterableDataset(dataset, max_tokens=max_tokens, seed=seed,
                                   pad_id=model.pad, window=4096)
    coverage = CoverageMonitor(dataset, loader=data_iter)  # one epoch's ids: 1 bit a row
    checkpoint = work / "checkpoint.pt"
    step, epoch, done_in_epoch = 0, 0, 0
    if resume and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=True)  # tensors and plain values only
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        guard.load_state_dict(state["guard"])
        data_iter.load_state_dict(state["data"])
        step, epoch = state["step"], state["data"]["epoch"]
        done_in_epoch = state["data"]["batches_done"]
        print(f"resumed at step {step}, epoch {epoch}, batch {done_in_epoch}")
    else:
        first = next(iter(SprIterableDataset(dataset, max_tokens=max_tokens, seed=seed,
                                             pad_id=model.pad)))
        assert_gradient_flow(model, lambda m: loss_of(m, first))
        print(f"gradient flow: every one of {sum(1 for _ in model.parameters())} trainable "
              "parameters gets a finite, non-zero gradient")
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    model.train()
    while step < steps:
        whole_epoch = done_in_epoch == 0  # this run sees the epoch from its first batch
        if whole_epoch:
            data_iter.set_epoch(epoch)
            coverage = CoverageMonitor(dataset, loader=data_iter)
        for batch in data_iter:
            loss = loss_of(model, batch)
            loss.backward()
            took = guard.step(loss, row_ids=batch["ids"])
            optimizer.zero_grad(set_to_none=True)
            coverage.update(batch["ids"])
            step += 1
            done_in_epoch += 1
            records.append({"step": step, "epoch": epoch, "loss": float(loss.detach()),
                            "stepped": took, "ids": batch["ids"].tolist()})
            with open(work / "steps.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(records[-1]) + "\n")
            if step % log_every == 0:
                recent = [r["loss"] for r in records[-log_every:]]
                print(f"step {step:5d}  epoch {epoch}  loss {sum(recent) / len(recent):.3f}  "
                      f"{time.perf_counter() - started:.0f} s")
            if step % save_every == 0:
                _save(checkpoint, {"model": model.state_dict(), "optimizer":
                                   optimizer.state_dict(), "guard": guard.state_dict(),
                                   "data": data_iter.state_dict(done_in_epoch), "step": step})
            if step >= steps:
                break
        if done_in_epoch < len(data_iter):  # stopped mid-epoch
            break
        if whole_epoch:
            report = coverage.end_epoch()
            print(f"epoch {epoch}: {report['distinct_rows']:,} of {coverage.rows:,} rows seen "
                  f"({report['coverage']:.1%}), {report['repeats']} repeats")
        epoch += 1
        done_in_epoch = 0
    print(f"{guard.skipped} steps skipped by the guard")
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=None,
                        help="Tab-separated pairs (default: the shipped English–Chinese sample)")
    parser.add_argument("--langs", default="en,zh",
                        help="the languages of --data's two columns, SRC,TGT or SRC-TGT "
                             "(default: en,zh)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=1500)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: the cores not busy already, at least 1)")
    args = parser.parse_args()
    try:
        langs = parse_langs(args.langs)  # en,de or en-de; a typo'd code is refused
        train(args.work, data=args.data, steps=args.steps, max_tokens=args.max_tokens,
              save_every=args.save_every, resume=args.resume, threads=args.threads,
              langs=(langs[0], langs[1]))
    except SprDataError as error:  # bad data or options: one line, as the spr-data command does
        raise SystemExit(f"error: {error}") from None


if __name__ == "__main__":
    main()
