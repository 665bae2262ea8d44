"""What a person and a script see: output that fits 80 columns, grouped warnings, errors as
JSON with ``--json``, exit codes kept under ``--debug``, a demo that cleans up after itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rich.cells import cell_len

import spr_data
from spr_data import render
from spr_data.demo import run_demo
from spr_data.errors import OutputError
from spr_data.outdir import REJECTS_DIR
from tests.conftest import run_cli


def spr(*args: object, columns: int = 80, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """``spr-data ARGS`` in a subprocess on a COLUMNS-wide terminal, as a user runs it."""
    full = {**os.environ, "COLUMNS": str(columns), **(env or {})}
    return subprocess.run([sys.executable, "-m", "spr_data.cli", *map(str, args)],
                          capture_output=True, text=True, env=full, timeout=300)


def assert_fits(text: str, width: int = 80) -> None:
    lines = text.splitlines()
    assert lines
    too_wide = [line for line in lines if cell_len(line) > width]
    assert not too_wide, too_wide[:3]
    # folded tables show up as runs of lines whose cells are one or two letters
    folded = [line for line in lines if line.strip() and max(map(len, line.split())) <= 2
              and len(line.split()) >= 6]
    assert not folded, folded[:3]


@pytest.fixture(scope="module")
def demo_datasets(tmp_path_factory: pytest.TempPathFactory, corpora: Path) -> Path:
    """The shipped sample, ingested and cleaned, and the clean OpenNMT part tokenized."""
    root = tmp_path_factory.mktemp("demo")
    run_demo(root)
    tokenized = run_cli("tokenize", root / "opennmt-en-de-clean", "--tokenizer",
                        corpora / "tokenizers" / "llama2_tokenizer.model", "--out",
                        root / "opennmt-tok", "--workers", "1", "--quiet")
    assert tokenized.exit_code == 0, tokenized.stderr
    return root


def test_info_fits_80_columns_on_clean_tokenized_and_rejects(demo_datasets: Path) -> None:
    clean = spr("info", demo_datasets / "opennmt-en-de-clean")
    assert clean.returncode == 0, clean.stderr
    assert_fits(clean.stdout)
    assert "lid_tgt_expected_p" in clean.stdout  # a long column name, whole
    assert "It is not acceptable" in clean.stdout  # the text, not letters in a column

    tokenized = spr("info", demo_datasets / "opennmt-tok", "--samples", "2")
    assert tokenized.returncode == 0, tokenized.stderr
    assert_fits(tokenized.stdout)
    ids = [line for line in tokenized.stdout.splitlines() if "src_ids" in line and "[" in line]
    assert len(ids) == 2 and all(" ids: " in line and line.rstrip().endswith("…]")
                                 for line in ids), ids
    # what made the token ids, not a clean's recipe ("recipe ?")
    said = " ".join(tokenized.stdout.split())
    assert "recipe ?" not in said and "tokenizer " in said and "tokens, sha256:" in said

    rejects = spr("info", demo_datasets / "opennmt-en-de" / REJECTS_DIR)
    assert rejects.returncode == 0, rejects.stderr
    assert_fits(rejects.stdout)
    assert "<bytes 83>" in rejects.stdout and "empty_field" in rejects.stdout

    wide = spr("info", demo_datasets / "tatoeba-eng-cmn", columns=200)
    assert_fits(wide.stdout, 200)
    assert "你好。" in wide.stdout


def test_summaries_fit_their_width() -> None:
    ids = list(range(1000, 1300))
    text = render.summarize(ids, 40, name="src_ids")
    assert text.startswith("[300 ids: 1000, 1001") and text.endswith(", …]")
    assert cell_len(text) <= 40
    assert render.summarize([3, 4], name="tgt_ids") == "[3, 4]"
    raw = "première ligne\nzweite Zeile\t!".encode()
    assert render.summarize(raw, 30).startswith(f"<bytes {len(raw)}> première ligne\\n")
    assert cell_len(render.summarize("你用跑的。" * 20, 15)) <= 15
    assert render.summarize({"input": 0, "line": 5}) == "input=0 line=5"
    # spaces that are not printable show as their code points, not as bytes (\x3000 read as
    # a byte that is not UTF-8, found by a new-user trial)
    assert render.summarize("a\u3000b\xa0c\x1bd") == "a\\u3000b\\u00a0c\\x1bd"


NTREX_FILES = ("ben", "eng", "hin", "zho-CN", "deu", "amh")


def test_fertility_report_fits_and_groups_warnings(corpora: Path, tmp_path: Path) -> None:
    ntrex = corpora / "multiparallel" / "ntrex128"
    inputs = [ntrex / f"newstest2019-{'src' if code == 'eng' else 'ref'}.{code}.txt.gz"
              for code in NTREX_FILES]
    full = tmp_path / "report.json"
    done = spr("fertility-report", *inputs, "-t", corpora / "tokenizers" / "gpt2-vocab.json",
               "-t", f"llama2={corpora / 'tokenizers' / 'llama2_tokenizer.model'}",
               "-t", "bytes", "-t", "chars", "--json", full)
    assert done.returncode == 0, done.stderr
    assert_fits(done.stdout)
    assert "Bengali" in done.stdout and "Devanagari" in done.stdout  # never cut into pieces
    report = json.loads(full.read_text())
    assert len(report["warnings"]) > 4  # many warnings in the report…
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) <= 2  # …one line per tokenizer on the terminal
    assert any(line.startswith("warning: gpt2-vocab.json:") for line in warnings)
    assert "combining marks" in warnings[0] and "more" in done.stderr
    # baselines are yardsticks: no warning about them anywhere
    assert not [w for w in report["warnings"] if w.startswith(("bytes:", "chars:"))]
    assert all(d["tokenizer"] not in ("bytes", "chars") for d in report["warning_details"])
    assert [d["message"] for d in report["warning_details"]] == report["warnings"]
    assert f"{len(report['warnings'])} warning(s) in all" in done.stderr


def test_fertility_table_goes_vertical_when_even_short_headers_do_not_fit() -> None:
    columns = [render.Column("group"), *(render.Column(f"measure {i}", f"m{i}", "right")
                                         for i in range(8))]
    rows = [["Canadian_Aboriginal", *(f"{i}.00%" for i in range(8))]]
    out = render.table("t", columns, rows, width=40)
    from rich.console import Console

    probe = Console(width=40, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    for item in out:
        probe.print(item)
    text = probe.export_text()
    assert_fits(text, 40)
    assert "Canadian_Aboriginal" in text and "measure 7 7.00%" in text


def test_demo_without_out_leaves_nothing_in_temp(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = run_demo()
    assert result["kept"] is False
    assert result["datasets"]["tatoeba-eng-cmn"]["verified"]
    assert list(tmp_path.iterdir()) == []


def test_json_errors_and_debug_exit_codes(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    failed = run_cli("info", missing, "--json")
    assert failed.exit_code == 2
    assert json.loads(failed.stdout) == {"error": f"{missing} does not exist", "exit_code": 2}

    usage = run_cli("ingest", tmp_path / "x.tsv", "--json")  # no --out: click's usage error
    assert usage.exit_code == 2
    error = json.loads(usage.stdout)
    assert error["exit_code"] == 2 and "--out" in error["error"]

    debug = run_cli("--debug", "info", missing)
    assert debug.exit_code == 2  # the traceback does not turn 2 into 1
    assert "Traceback" in debug.stderr and f"{missing} does not exist" in debug.stderr

    # fertility-report's --json names a file: its errors stay off stdout
    plain = run_cli("fertility-report", missing, "-t", "bytes", "--json", tmp_path / "r.json")
    assert plain.exit_code == 2 and plain.stdout == ""


def test_failed_checks_with_json_carry_error_and_exit_code(tmp_path: Path) -> None:
    """verify and audit exit 1 with their report; with --json it also holds the keys every
    other failure has, so a script can read any command's failure the same way."""
    src = tmp_path / "pairs.en-de.tsv"
    src.write_text("Hello .\tHallo .\nThank you .\tDanke .\n")
    spr_data.ingest([src], tmp_path / "ds", langs=["en", "de"])
    shard = tmp_path / "ds" / "shard-00000.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit: the hash no longer matches
    shard.write_bytes(bytes(data))
    for command in ("verify", "audit"):
        result = run_cli(command, tmp_path / "ds", "--json")
        assert result.exit_code == 1, result.stderr
        report = json.loads(result.stdout)
        assert report["ok"] is False and report["exit_code"] == 1
        assert "\n" not in report["error"] and str(shard) in report["error"]
        assert "content hash" in report["error"]
    assert "integrity" in json.loads(run_cli("audit", tmp_path / "ds", "--json").stdout)["error"]
    ok = json.loads(run_cli("verify", tmp_path / "ds" / REJECTS_DIR, "--json").stdout)
    assert ok["ok"] and "error" not in ok and "exit_code" not in ok


def test_overwrite_hint_speaks_python_in_the_api_and_flags_in_the_cli(tmp_path: Path) -> None:
    src = tmp_path / "pairs.en-de.tsv"
    src.write_text("Hello .\tHallo .\nThank you .\tDanke .\n")
    spr_data.ingest([src], tmp_path / "ds", langs=["en", "de"])
    with pytest.raises(OutputError) as api:
        spr_data.ingest([src], tmp_path / "ds", langs=["en", "de"])
    assert "overwrite=True" in str(api.value) and "--overwrite" not in str(api.value)
    cli = run_cli("ingest", src, "--out", tmp_path / "ds", "--langs", "en-de", "--json")
    assert cli.exit_code == 1 and "pass --overwrite" in cli.stderr
    assert "--overwrite" in json.loads(cli.stdout)["error"]


def test_train_tokenizer_reports_each_phase(tmp_path: Path) -> None:
    """~30 s of silence on a real corpus: the library reports its phases, the CLI draws them."""
    import io

    from rich.console import Console

    from spr_data import console
    from spr_data.demo import demo_data_dir
    from spr_data.pipeline.train_tokenizer import iter_segments, train_tokenizer

    heard: list[tuple[str, int, int | None]] = []
    sample = demo_data_dir()
    inputs = [sample / "opennmt_en-de.sample.en", sample / "opennmt_en-de.sample.de"]
    result = train_tokenizer(inputs, tmp_path / "tok", kind="bpe", vocab_size=800,
                             on_progress=lambda *event: heard.append(event))
    phases = list(dict.fromkeys(phase for phase, _, _ in heard))
    assert phases == ["count", "sample", "train"]
    counted = [done for phase, done, _ in heard if phase == "count"]
    assert counted[-1] == sum(1 for _ in iter_segments(inputs))  # both files, every line
    fed = [(done, total) for phase, done, total in heard if phase == "sample"]
    assert fed[-1][0] == result.segments_fed and fed[-1][1] is not None
    assert abs(fed[-1][1] - result.segments_fed) <= 0.05 * result.segments_fed
    assert heard[-1] == ("train", 1, 1)

    screen = Console(file=io.StringIO(), force_terminal=True, width=80, color_system=None)
    with console.progress_phases(enabled=True, console=screen,
                                 units={"count": "segments read"}) as update:
        for event in heard:
            update(*event)
    drawn = screen.file.getvalue()  # type: ignore[attr-defined]
    assert "count" in drawn and "sample" in drawn and "train" in drawn
    assert f"{counted[-1]:,} / {counted[-1]:,} segments read" in drawn

    piped = Console(file=io.StringIO(), force_terminal=False)
    with console.progress_phases(enabled=True, console=piped) as update:
        update("count", 5, None)
    assert piped.file.getvalue() == ""  # type: ignore[attr-defined]


@pytest.mark.parametrize(("part", "whole", "shown"), [
    (9004, 9008, "99.96%"), (9008, 9008, "100.0%"), (1, 100000, "0.001%"), (0, 5, "0.0%"),
    (50, 100, "50.0%"), (999999, 1000000, "99.9999%"),
])
def test_a_kept_share_is_never_rounded_to_all_or_none(part: int, whole: int, shown: str):
    """'kept 9,004 of 9,008 rows (100.0%)' hid four rejects."""
    from spr_data.render import _share

    assert _share(part, whole) == shown
