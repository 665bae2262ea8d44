"""Print the fertility trap-and-fix table of the README.

    python benchmarks/tokenizer_table.py [--corpora ../shared/corpora]

Builds the 90/10 English/Bengali corpus of ``tests/test_train_tokenizer.py``, trains the trap
(GPT-2-style byte-level BPE, corpus as it is) and every ``train-tokenizer`` kind with script
balancing (α = 0.3), all with 8,000 tokens, and measures them on held-out NTREX English and
Bengali, beside GPT-2 and Llama 2 as published.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spr_data.pipeline.fertility import fertility_report, read_sources  # noqa: E402
from spr_data.pipeline.train_tokenizer import KINDS, train_tokenizer  # noqa: E402
from spr_data.testing import corpora_dir  # noqa: E402
from spr_data.tokenizers import load_tokenizer  # noqa: E402
from tests.test_train_tokenizer import VOCAB, build_mix, train_trap  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpora", type=Path, default=None,
                        help="shared/corpora (default: $SPR_DATA_CORPORA or ../shared/corpora)")
    args = parser.parse_args()
    args.corpora = corpora_dir(args.corpora)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = build_mix(args.corpora, root)
        trap = train_trap(files, root / "trap.json")
        specs = [f"trap: GPT-2-style byte-level BPE, unbalanced={trap}"]
        for kind in KINDS:
            result = train_tokenizer(files, root / kind, kind=kind, vocab_size=VOCAB)
            specs.append(f"train-tokenizer --kind {kind}={result.tokenizer_file}")
        tok_dir = args.corpora / "tokenizers"
        specs += [f"GPT-2 (published)={tok_dir / 'gpt2-vocab.json'}",
                  f"Llama 2 (published)={tok_dir / 'llama2_tokenizer.model'}"]
        ntrex = args.corpora / "multiparallel/ntrex128"
        report = fertility_report(read_sources([ntrex / "newstest2019-src.eng.txt.gz",
                                                ntrex / "newstest2019-ref.ben.txt.gz"]),
                                  [load_tokenizer(s) for s in specs])
    print("| tokenizer (8,000 tokens unless published) | Bengali chars/token | English "
          "chars/token | Bengali pieces cut at a mark | Bengali tokens starting with a mark |"
          " flagged |")
    print("|---|---|---|---|---|---|")
    for name, data in report["tokenizers"].items():
        bn, en = data["by_lang"]["bn"], data["by_lang"]["en"]
        cut = bn["pretoken_mark_split_rate"]
        flagged = "yes" if any(w.startswith(f"{name}:") and ("Bengali" in w)
                               for w in report["warnings"]) else "no"
        print(f"| {name} | {bn['chars_per_token']:.2f} | {en['chars_per_token']:.2f} | "
              f"{'—' if cut is None else f'{cut:.1%}'} | {bn['mark_split_rate']:.1%} | "
              f"{flagged} |")


if __name__ == "__main__":
    main()
