"""Benchmark ``FiniteStepGuard``'s overhead on a training step, beside an unguarded step.

    python benchmarks/bench_guard.py [--steps 30] [--d-model 512] [--layers 4]

The model is a Transformer encoder (``--layers`` × ``--d-model``, about 13M parameters by
default) on random tokens, AdamW, on CPU (or on ``--device cuda`` where a GPU is lent). Three
step variants alternate (so drifts of a shared machine hit all alike), and the median time
per step of each is printed:

* ``unguarded``: ``loss.backward(); clip_grad_norm_(params, 1.0); opt.step()`` — the
  standard sequence, which also computes the global norm;
* ``guarded``: ``loss.backward(); guard.step(loss, row_ids)`` — the guard's fused finiteness
  check, clipping with the norm it computed, and the step;
* ``no clipping``: ``loss.backward(); opt.step()``, for reference.

Target: the guard costs under 2% of the unguarded step on a model of ≥ 10M parameters.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spr_data.train import FiniteStepGuard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    vocab = 8000
    layer = nn.TransformerEncoderLayer(args.d_model, 8, 4 * args.d_model, batch_first=True)
    model = nn.Sequential(nn.Embedding(vocab, args.d_model),
                          nn.TransformerEncoder(layer, args.layers),
                          nn.Linear(args.d_model, vocab)).to(device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    guard = FiniteStepGuard(model, opt, max_norm=1.0)
    x = torch.randint(0, vocab, (args.batch, args.length), device=device)
    ids = torch.arange(args.batch)

    def backward() -> torch.Tensor:
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), x.reshape(-1))
        loss.backward()
        return loss

    def unguarded() -> None:
        backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    def guarded() -> None:
        loss = backward()
        guard.step(loss, row_ids=ids)

    def no_clipping() -> None:
        backward()
        opt.step()

    variants = {"unguarded (clip_grad_norm_ + step)": unguarded,
                "guarded (guard.step)": guarded, "no clipping (step only)": no_clipping}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(3):  # warm-up
        for fn in variants.values():
            fn()
            opt.zero_grad(set_to_none=True)
    for _ in range(args.steps):
        for name, fn in variants.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - started)
            opt.zero_grad(set_to_none=True)
    print(f"{params / 1e6:.1f}M parameters, batch {args.batch}×{args.length} tokens, "
          f"{args.device}, median of {args.steps} steps each")
    base = statistics.median(times["unguarded (clip_grad_norm_ + step)"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<36} {median * 1000:8.1f} ms  {median / base - 1:+6.1%}")
    print(f"guard overhead vs unguarded: "
          f"{statistics.median(times['guarded (guard.step)']) / base - 1:+.1%} (target < 2%); "
          f"skipped steps: {guard.skipped}")


if __name__ == "__main__":
    main()
