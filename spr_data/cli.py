"""The ``spr-data`` command line: parse options, call the library, render the result."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from spr_data import console
from spr_data._version import __version__
from spr_data.errors import InputError, SprDataError, interrupted
from spr_data.fsio import atomic_write_bytes

if TYPE_CHECKING:
    from spr_data.reader import ReaderOptions


class _JsonErrorsGroup(TyperGroup):
    """Usage errors (a missing option, a value out of range) are raised by click before a
    command runs; with the command's ``--json`` they come as one JSON object on stdout too."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta["spr_data.args"] = list(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            # click's usage errors (typer vendors click: matched by what they carry)
            code = getattr(exc, "exit_code", None)
            if hasattr(exc, "format_message") and isinstance(code, int):
                args: list[str] = ctx.meta.get("spr_data.args", [])
                at = next((i for i, a in enumerate(args) if a in self.commands), -1)
                if at >= 0 and "--json" in args[at + 1:] \
                        and any(p.name == "as_json" for p in self.commands[args[at]].params):
                    console.print_json({"error": exc.format_message(), "exit_code": code})
            raise


app = typer.Typer(
    cls=_JsonErrorsGroup,
    name="spr-data",
    help="Raw corpora → clean, sharded, memory-mapped Arrow datasets for safe training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_state: dict[str, Any] = {"debug": False, "signal": signal.SIGINT}
F = TypeVar("F", bound=Callable[..., Any])

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
WorkersOption = Annotated[int | None, typer.Option(
    "--workers", min=1, help="Worker processes (default: all cores).")]
OverwriteOption = Annotated[bool, typer.Option(
    "--overwrite", help="Replace an existing output or an unfinished run.")]
RetriesOption = Annotated[int | None, typer.Option(
    "--retries", min=1, help="Give up a read after N attempts (default: retry a transient "
    "fault — EIO, ESTALE, a dropped connection… — with backoff for up to 5 minutes).")]
WorkDirOption = Annotated[Path | None, typer.Option(
    "--work-dir", help="With --out s3://…: where the run works before it uploads (a local "
    "disk, or a shared mount for a Ray cluster; default: a directory per URL under "
    "~/.cache/spr-data/runs). A rerun resumes there.")]
CacheDirOption = Annotated[Path | None, typer.Option(
    "--cache-dir", help="Copy shards of a dataset on a network filesystem or URL here "
    "(verified) and map the copies.")]


ExecutorOption = Annotated[str, typer.Option(
    "--executor", help="Where the per-shard tasks run: local (worker processes) or ray "
    "(a local Ray, or the cluster at --ray-address; pip install 'spr-data[ray]').")]
RayAddressOption = Annotated[str | None, typer.Option(
    "--ray-address", help="Join the Ray cluster at HOST:PORT ('auto': the one `ray start` "
    "runs on this machine) instead of starting a local Ray; with --executor ray.")]


def _executor(kind: str, address: str | None, workers: int | None) -> Any:
    """The context manager of --executor: None for local processes (the command makes its
    own), or a RayExecutor, stopped (if it started Ray) when the command ends."""
    import contextlib

    if kind == "local":
        if address is not None:
            raise InputError("--ray-address needs --executor ray")
        return contextlib.nullcontext(None)
    if kind == "ray":
        from spr_data.pipeline.ray_executor import RayExecutor

        return RayExecutor(address, workers=workers)
    raise InputError(f"--executor is local or ray, not {kind!r}")


def _reader(retries: int | None, cache_dir: Path | None) -> ReaderOptions:
    from spr_data.reader import ReaderOptions, RetryPolicy

    return ReaderOptions(retry=RetryPolicy(attempts=retries),
                         cache_dir=None if cache_dir is None else str(cache_dir))


def _version(value: bool) -> None:
    if value:
        console.out.print(f"spr-data {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """spr-data: ingest, check and feed training corpora without losing a row."""
    _state["debug"] = debug
    _state["signal"] = signal.SIGINT
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM (``kill PID``, a Kubernetes eviction) unwinds the run like Ctrl-C: workers
    stopped, the output lock released, one line."""
    _state["signal"] = signum
    raise KeyboardInterrupt


def _reports_errors(fn: F) -> F:
    """Known errors become one line on stderr and their exit code; others a short hint."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))  # fertility-report's --json is a file: not this
        try:
            return fn(*args, **kwargs)
        except SprDataError as exc:
            if _state["debug"]:
                traceback.print_exc()
            _fail(_cli_text(str(exc)), exc.exit_code, as_json=as_json)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (see _terminate): the run's work
            # state and lock are already cleaned up by the with-blocks it unwound through
            _fail(interrupted(fn.__name__), 128 + _state["signal"], as_json=as_json)
        except (typer.Exit, typer.Abort):
            raise
        except OSError as exc:  # a disk that filled up under a step's work files, say
            from spr_data.fsio import failed_write_message

            if _state["debug"]:
                traceback.print_exc()
            said = failed_write_message(exc)
            if said is None and isinstance(exc, FileNotFoundError) and exc.filename:
                # a dataset removed or replaced under the run (an ingest --overwrite of its
                # input): what the run reads is gone, which is bad input, not a bug
                _fail(f"{exc.filename} is gone: it was removed while the run used it (was the "
                      "dataset deleted or replaced?); rerun when it is back", 2,
                      as_json=as_json)
            _fail(said or f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for the "
                  "traceback, and please report it)", 1, as_json=as_json)
        except Exception as exc:
            if _state["debug"]:
                traceback.print_exc()
                _fail(f"unexpected {type(exc).__name__}: {exc}", 1, as_json=as_json)
            _fail(f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for the "
                  "traceback, and please report it)", 1, as_json=as_json)

    return wrapper  # type: ignore[return-value]


def _fail(message: str, exit_code: int, *, as_json: bool) -> NoReturn:
    """One line on stderr; with ``--json`` also one ``{"error", "exit_code"}`` object on
    stdout, so a script that parses stdout sees the failure. The exit code is kept (with
    ``--debug`` too: the traceback comes before the line)."""
    console.print_error(message)
    if as_json:
        console.print_json({"error": message, "exit_code": exit_code})
    raise typer.Exit(exit_code)


def _json_failure(summary: str, problems: list[str]) -> dict[str, Any]:
    """The ``error`` and ``exit_code`` keys of a failed check's ``--json`` report (exit 1), so
    a script that reads only those two keys of any command's output sees the failure."""
    first = f": {problems[0]}" if problems else ""
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    return {"error": " ".join(f"{summary}{first}{more}".split()), "exit_code": 1}


def _cli_text(message: str) -> str:
    """The library names its options as Python keywords (``pass overwrite=True``); on the
    command line the same option is a flag (``pass --overwrite``)."""
    commands = getattr(typer.main.get_command(app), "commands", {}).values()
    flags = {opt for cmd in commands for p in cmd.params for opt in getattr(p, "opts", ())}

    def flag(m: re.Match[str]) -> str:
        name = "--" + m.group(1).replace("_", "-")
        return name if name in flags else m.group(0)

    return re.sub(r"\b([a-z][a-z_]*)=True\b", flag, message)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"64M"``, ``"1GiB"``, ``"500000"`` → bytes (K/M/G/T are powers of 1024)."""
    m = _SIZE.match(text)
    if not m:
        raise InputError(f"cannot read size {text!r}; use a number with an optional K, M or G")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def _check_output_file(path: Path | None, option: str, *, inputs: Sequence[str] = ()) -> None:
    """Refuse an output file that cannot be written before the work, not after it; and one
    that would replace an input or a file this option did not write (``--json`` typed
    before the inputs took the first input as the file name, and wrote over it)."""
    if path is None:
        return
    from spr_data.reader import check_local_output

    check_local_output(path, option)
    if path.is_dir():
        raise InputError(f"{option} {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise InputError(f"{option} {path}: directory {path.parent} does not exist")
    if not path.exists():
        return
    for given in inputs:
        with contextlib.suppress(OSError):
            if "://" not in given and os.path.samefile(given, path):
                raise InputError(f"{option} {path} is one of the inputs; it takes the name of a "
                                 "file to write (the inputs come after the options' values)")
    if path.is_file() and path.stat().st_size and not _written_by(path, option):
        raise InputError(f"{option} {path} exists and is not a report this option wrote; "
                         "choose another file name, or remove that file first")


#: a report larger than this is not one ``fertility-report`` wrote (it is not read whole)
_LARGEST_REPORT = 64 << 20


def _written_by(path: Path, option: str) -> bool:
    """Whether ``path`` holds what ``fertility-report``'s ``option`` writes (so a rerun may
    replace it): its JSON report, its Markdown tables, its chart."""
    import json

    try:
        with path.open("rb") as f:
            head = f.read(1 << 16).decode("utf-8", errors="replace")
        if option == "--json":
            if not head.lstrip().startswith("{") or path.stat().st_size > _LARGEST_REPORT:
                return False
            found = json.loads(path.read_text(encoding="utf-8"))
            return isinstance(found, dict) and {"tokenizers", "reference", "warnings"} <= set(found)
    except (OSError, ValueError):
        return False
    if option == "--markdown":
        return head.startswith(("### ", "- warning: "))
    return head.startswith("<!doctype html><meta charset='utf-8'><title>")


def _parse_weights(text: str) -> dict[str, float]:
    """``Latin=0.5,Bengali=0.5`` → weights: each group once, each weight finite and > 0."""
    import math

    weights: dict[str, float] = {}
    for item in text.split(","):
        group, _, value = item.partition("=")
        group = group.strip()
        try:
            weight = float(value)
        except ValueError:
            raise InputError(f"--weights {text!r}: {item!r} should be GROUP=WEIGHT") from None
        if not group or not math.isfinite(weight) or weight <= 0:
            raise InputError(f"--weights {text!r}: {item!r} needs a group and a weight above 0 "
                             "(a group is never dropped; the least weighted is fed once)")
        if group in weights:
            raise InputError(f"--weights {text!r} gives {group} twice")
        weights[group] = weight
    return weights


def _split_list(text: str | None, option: str) -> list[str] | None:
    """``A,B`` → ``["A", "B"]``; an empty value or item is refused (``--keys ""`` was taken
    for no option at all)."""
    if text is None:
        return None
    items = [p.strip() for p in text.split(",")]
    if not all(items):
        raise InputError(f"{option} {text!r} has an empty name; give them as A,B")
    return items


@app.command()
@_reports_errors
def ingest(
    inputs: Annotated[list[str], typer.Argument(
        help="Input files (paths, or URLs: s3://bucket/key, https://…); a Moses pair is two "
        "files.")],
    out: Annotated[str, typer.Option(
        "--out", "-o", help="Dataset directory to write, or an object store's prefix "
        "(s3://bucket/prefix).")],
    format: Annotated[str | None, typer.Option(
        "--format", help="tsv|moses|jsonl|parquet|text (default: from the file names).")] = None,
    langs: Annotated[str | None, typer.Option(
        "--langs", help="Parallel corpus languages, SRC-TGT (en-de) or SRC,TGT (en,zh-CN).")
    ] = None,
    lang: Annotated[str | None, typer.Option("--lang", help="Mono corpus language.")] = None,
    columns: Annotated[str | None, typer.Option(
        "--columns", help="TSV: 0-based column numbers I,J (default 0,1); Parquet: names.")
    ] = None,
    keys: Annotated[str | None, typer.Option("--keys", help="JSONL keys A,B.")] = None,
    shard_rows: Annotated[int | None, typer.Option(
        "--shard-rows", min=1, help="Roll over to a new shard after N rows.")] = None,
    shard_bytes: Annotated[str, typer.Option(
        "--shard-bytes", help="Roll over after this much data (e.g. 64M, 1G).")] = "256M",
    overwrite: Annotated[bool, typer.Option("--overwrite",
                                            help="Replace an existing dataset.")] = False,
    retries: RetriesOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, help="Inputs parsed at once, in worker processes (default: all "
        "cores when the inputs hold 16 MiB or more); the same bytes for any number.")] = None,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    work_dir: WorkDirOption = None,
    allow_heavy_loss: Annotated[bool, typer.Option(
        "--allow-heavy-loss", help="Write the dataset even when one reason rejects more than "
        "half of the records, or more than 1% of an input's lines are not UTF-8.")] = False,
) -> None:
    """Turn raw corpora into a sharded Arrow dataset with a manifest."""
    from spr_data import render
    from spr_data.pipeline.ingest import ingest as run_ingest
    from spr_data.pipeline.sources import parse_langs

    if langs is not None and lang is not None:
        raise InputError("pass --langs SRC-TGT for a parallel corpus or --lang L for a mono one, "
                         "not both")
    if lang is not None and not lang.strip():
        raise InputError("--lang is empty: give a language code (en, zh-CN), or leave it out to "
                         "take it from the file name")
    lang_list = parse_langs(langs) if langs is not None else [lang] if lang else None
    with _executor(executor, ray_address, workers) as runner, \
            console.progress_bytes("ingest", enabled=not quiet) as progress:
        summary = run_ingest(
            inputs, out, format=format, langs=lang_list,
            columns=_split_list(columns, "--columns"), keys=_split_list(keys, "--keys"),
            shard_rows=shard_rows, shard_bytes=parse_size(shard_bytes),
            overwrite=overwrite, on_progress=progress,
            retry=_reader(retries, None).retry, workers=None if runner else workers,
            executor=runner, work_dir=work_dir, allow_heavy_loss=allow_heavy_loss)
    if as_json:
        console.print_json(summary.to_json())
    else:
        render.show_ingest(summary)


@app.command()
@_reports_errors
def clean(
    dataset: Annotated[str, typer.Argument(help="Dataset directory or URL to clean.")],
    out: Annotated[str, typer.Option(
        "--out", "-o", help="Directory for the kept rows, or an object store's prefix "
        "(s3://bucket/prefix).")],
    recipe: Annotated[Path | None, typer.Option(
        "--recipe", help="TOML recipe (default: built-in defaults for the languages).")] = None,
    workers: WorkersOption = None,
    quarantine: Annotated[list[Path] | None, typer.Option(
        "--quarantine", help="JSONL of row ids to reject as 'quarantined' (repeat it for "
        "several files, e.g. one a rank).")] = None,
    overwrite: OverwriteOption = False,
    retries: RetriesOption = None,
    cache_dir: CacheDirOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    allow_heavy_loss: Annotated[bool, typer.Option(
        "--allow-heavy-loss", help="Publish even when one reason rejects more than the "
        "recipe's max_reason_share (default 0.5) of the rows.")] = False,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    work_dir: WorkDirOption = None,
) -> None:
    """Run the QA stages: keep good rows, keep every rejected row with its reasons."""
    from spr_data import render
    from spr_data.pipeline.clean import clean as run_clean

    with _executor(executor, ray_address, workers) as runner, \
            console.progress_steps(enabled=not quiet) as progress:
        report = run_clean(dataset, out, recipe=recipe, workers=None if runner else workers,
                           quarantine=quarantine, overwrite=overwrite, on_progress=progress,
                           reader=_reader(retries, cache_dir), allow_heavy_loss=allow_heavy_loss,
                           executor=runner, work_dir=work_dir)
    if as_json:
        data = report.to_json()
        data.pop("distributions", None)  # the full histograms are in report.json
        console.print_json(data)
        render.warn_clean(report)
    else:
        render.show_clean(report, out)


@app.command()
@_reports_errors
def tokenize(
    dataset: Annotated[str, typer.Argument(help="Dataset directory or URL to tokenize.")],
    tokenizer: Annotated[str, typer.Option(
        "--tokenizer", "-t", help="[NAME=]PATH of a SentencePiece .model, HF tokenizer.json, "
        "GPT-2 vocab.json (merges.txt beside it) or tiktoken ranks file.")],
    out: Annotated[str, typer.Option(
        "--out", "-o", help="Directory for the output, or an object store's prefix "
        "(s3://bucket/prefix).")],
    workers: WorkersOption = None,
    overwrite: OverwriteOption = False,
    retries: RetriesOption = None,
    cache_dir: CacheDirOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    work_dir: WorkDirOption = None,
) -> None:
    """Add token-id columns (src_ids/tgt_ids or text_ids) for training."""
    from spr_data import render
    from spr_data.pipeline.tokenize import tokenize as run_tokenize

    with _executor(executor, ray_address, workers) as runner, \
            console.progress_steps(enabled=not quiet) as progress:
        report = run_tokenize(dataset, out, tokenizer=tokenizer,
                              workers=None if runner else workers, overwrite=overwrite,
                              on_progress=progress, reader=_reader(retries, cache_dir),
                              executor=runner, work_dir=work_dir)
    if as_json:
        console.print_json(report.to_json())
    else:
        render.show_tokenize(report, out)


@app.command("fertility-report")
@_reports_errors
def fertility_report(
    inputs: Annotated[list[str], typer.Argument(
        help="Text files (one segment per line), dataset directories or dataset URLs.")],
    tokenizer: Annotated[list[str], typer.Option(
        "--tokenizer", "-t", help="[NAME=]PATH of a .model, tokenizer.json, vocab.json or "
        "tiktoken ranks file; or 'bytes' / 'chars'. Repeat to compare.")],
    sample: Annotated[int | None, typer.Option(
        "--sample", min=1, help="At most N segments per input, chosen with --seed.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of --sample.")] = 0,
    parallel: Annotated[bool, typer.Option(
        "--parallel", help="The text files are line-parallel (line i of each says the same): "
        "parity compares them even where their line lengths cannot show it.")] = False,
    reference: Annotated[str | None, typer.Option(
        "--reference", help="Language that parity is measured against (default: en, when "
        "an input is English).")] = None,
    json_file: Annotated[Path | None, typer.Option(
        "--json", help="Write the report as JSON to this file.")] = None,
    markdown_file: Annotated[Path | None, typer.Option(
        "--markdown", help="Write the tables as Markdown to this file.")] = None,
    chart_file: Annotated[Path | None, typer.Option(
        "--chart", help="Write a self-contained HTML chart of characters per token per "
        "script and tokenizer.")] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Exit 1 when any warning fires (for CI of training repos).")] = False,
    retries: RetriesOption = None,
    cache_dir: CacheDirOption = None,
) -> None:
    """Characters per token, fertility and balance per script and language, per tokenizer."""
    import json

    from spr_data import render
    from spr_data.pipeline.fertility import fertility_report as run_report
    from spr_data.pipeline.fertility import read_sources
    from spr_data.tokenizers import load_tokenizer

    for option, path in (("--json", json_file), ("--markdown", markdown_file),
                         ("--chart", chart_file)):
        _check_output_file(path, option, inputs=inputs)
    tokenizers = [load_tokenizer(t) for t in tokenizer]
    names = [t.name for t in tokenizers]
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InputError(f"two tokenizers are named {', '.join(twice)}; name them apart with "
                         "NAME=PATH")
    sources = read_sources(inputs, sample=sample, seed=seed, reader=_reader(retries, cache_dir),
                           parallel=parallel)
    if reference is not None:
        from spr_data.qa.scripts import normalize_lang

        langs = sorted({normalize_lang(lang) for s in sources
                        for lang in ({s.lang} | set(s.seg_langs or ())) if lang})
        if normalize_lang(reference) not in langs:
            raise InputError(f"--reference {reference}: no input is in that language (the "
                             f"inputs are in {', '.join(langs) or 'no known language'})")
    report = run_report(sources, tokenizers, reference=reference or "en")
    if json_file is not None:
        atomic_write_bytes(json_file,
                           (json.dumps(report, indent=2, ensure_ascii=False) + "\n").encode())
    render.show_fertility(report, json_file=json_file)
    if markdown_file is not None:
        atomic_write_bytes(markdown_file, render.fertility_markdown(report).encode())
    if chart_file is not None:
        from spr_data.pipeline.fertility import chart_html

        atomic_write_bytes(chart_file, chart_html(report).encode())
    if strict and report["warnings"]:
        raise typer.Exit(1)


@app.command("train-tokenizer")
@_reports_errors
def train_tokenizer(
    inputs: Annotated[list[str], typer.Argument(
        help="Datasets (directories or URLs) or text files to train on.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the tokenizer.")],
    kind: Annotated[str, typer.Option(
        "--kind", help="sentencepiece-unigram | sentencepiece-bpe | bpe | byte-bpe")],
    vocab_size: Annotated[int, typer.Option("--vocab-size", min=100, help="Vocabulary size.")],
    balance: Annotated[str, typer.Option(
        "--balance", help="Balance groups by 'script' or 'lang', or 'none'.")] = "script",
    alpha: Annotated[float, typer.Option(
        "--alpha", help="Temperature: a group with share p gets ∝ p^alpha.")] = 0.3,
    weights: Annotated[str | None, typer.Option(
        "--weights", help="Explicit group weights instead, e.g. Latin=0.5,Bengali=0.5.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampling.")] = 0,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace the tokenizer an earlier run wrote into --out.")] = False,
    retries: RetriesOption = None,
    cache_dir: CacheDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Train a tokenizer on balanced, streamed text; report its fertility on held-out text."""
    from spr_data import render
    from spr_data.pipeline.train_tokenizer import held_out_report
    from spr_data.pipeline.train_tokenizer import train_tokenizer as run_train

    parsed = _parse_weights(weights) if weights else None
    if parsed is not None and balance == "none":
        raise InputError("--weights balances the groups: it does not go with --balance none")
    units = {"count": "segments read", "sample": "segments fed",
             "held-out report": "segments"}
    with console.progress_phases(enabled=True, units=units) as progress:
        result = run_train(inputs, out, kind=kind, vocab_size=vocab_size, balance=balance,
                           alpha=alpha, weights=parsed, seed=seed, overwrite=overwrite,
                           reader=_reader(retries, cache_dir), on_progress=progress)
        report = held_out_report(result, on_progress=progress)
    if as_json:
        console.print_json({**result.to_json(), "out": str(out), "held_out_report": report})
    else:
        render.show_trained_tokenizer(result, report)


@app.command()
@_reports_errors
def audit(
    dataset: Annotated[str, typer.Argument(help="Dataset directory or URL.")],
    ids_log: Annotated[list[Path] | None, typer.Option(
        "--ids-log", help="Row ids a loader consumed: one per line with '# epoch N' lines "
        "between epochs, or a .npy of one epoch; repeat it for each rank's log, checked "
        "together.")] = None,
    min_distinct: Annotated[float, typer.Option(
        "--min-distinct", min=0.0, max=1.0,
        help="Fail when distinct contents are under this share of the rows.")] = 0.5,
    world_size: Annotated[int | None, typer.Option(
        "--world-size", min=1, help="Replay spr-data's epoch order over W ranks.")] = None,
    workers: Annotated[int, typer.Option("--workers", min=0, help="Loader workers.")] = 0,
    batch_size: Annotated[int | None, typer.Option(
        "--batch-size", min=1, help="Rows per batch (with --max-tokens: at most).")] = None,
    max_tokens: Annotated[int | None, typer.Option(
        "--max-tokens", min=1, help="Token budget per batch (needs token-id columns).")] = None,
    wrap: Annotated[bool, typer.Option(
        "--wrap", help="Replay wrap-around of the last steps instead of dropping them.")] = False,
    block: Annotated[int | None, typer.Option(
        "--block", min=2, help="Replay the blocked order (runs of N consecutive rows).")] = None,
    window: Annotated[int | None, typer.Option(
        "--window", min=1, help="With --max-tokens: the loader's window (positions packed "
        "together; 32768 unless the loader set window=).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Shuffle seed.")] = 0,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Epochs to replay.")] = 1,
    retries: RetriesOption = None,
    cache_dir: CacheDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Integrity, accounting through the lineage, distinct content, epoch replay (with
    --world-size, --batch-size or --max-tokens), and a loader's coverage (--ids-log)."""
    from spr_data import render
    from spr_data.pipeline.audit import Replay, audit_dataset

    replay = None
    if window is not None and max_tokens is None:
        raise InputError("--window is the token budget's packing window: give --max-tokens "
                         "too (a loader with batch_size has no window)")
    if any(x is not None for x in (world_size, batch_size, max_tokens, block)) \
            or workers or seed or epochs != 1 or wrap:  # any replay option asks for a replay
        replay = Replay(world_size=world_size or 1, workers=workers,
                        batch_size=batch_size if batch_size or max_tokens else 1,
                        max_tokens=max_tokens, seed=seed, epochs=epochs,
                        drop_remainder=not wrap, window=window, block=block)
    report = audit_dataset(dataset, ids_log=ids_log, min_distinct=min_distinct, replay=replay,
                           reader=_reader(retries, cache_dir))
    if as_json:
        data = report.to_json()
        if not report.ok:
            failed = [name for name, check in report.checks.items() if not check["ok"]]
            problems = [p for name in failed for p in report.checks[name].get("problems", [])]
            data |= _json_failure(f"audit of {dataset} failed ({', '.join(failed)})", problems)
        console.print_json(data)
    else:
        render.show_audit(report, dataset)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@_reports_errors
def info(
    dataset: Annotated[str, typer.Argument(help="Dataset directory or URL.")],
    samples: Annotated[int, typer.Option("--samples", min=0, help="Sample rows to show.")] = 3,
    random: Annotated[bool, typer.Option(
        "--random", help="Sample rows drawn at random (seeded) rather than the first ones: "
                         "read 100 kept and 100 rejected rows of a clean run by eye.")] = False,
    seed: Annotated[int | None, typer.Option(
        "--seed", min=0, help="Seed of --random (implies it; default 0).")] = None,
    retries: RetriesOption = None,
    as_json: JsonOption = False,
) -> None:
    """Describe a dataset: rows, shards, kind, languages, rejects, lineage, sample rows."""
    from spr_data import render
    from spr_data.info import dataset_info

    described = dataset_info(dataset, samples=samples, random=random or seed is not None,
                             seed=seed or 0,
                             reader=_reader(retries, None))
    if as_json:
        console.print_json(described.to_json())
    else:
        render.show_info(described)


@app.command()
@_reports_errors
def verify(
    dataset: Annotated[str, typer.Argument(help="Dataset directory or URL.")],
    retries: RetriesOption = None,
    as_json: JsonOption = False,
) -> None:
    """Re-hash every shard and check rows, bytes, schema and the id partition; exit 1 if not."""
    from spr_data import render
    from spr_data.verify import verify_dataset

    report = verify_dataset(dataset, reader=_reader(retries, None))
    if as_json:
        data = report.to_json()
        if not report.ok:
            data |= _json_failure(f"{dataset} does not match its manifest",
                                  report.all_problems())
        console.print_json(data)
    else:
        render.show_verify(report, dataset)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@_reports_errors
def demo(
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Directory for the demo datasets, kept (default: a temporary "
        "directory, removed at the end).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Run the main job end to end on the small real sample shipped with spr-data."""
    from spr_data.demo import run_demo

    result = run_demo(out, say=None if as_json else console.out.print)
    if as_json:
        console.print_json(result)


if __name__ == "__main__":  # pragma: no cover
    app()
