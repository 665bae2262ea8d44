"""The README's two set-up commands work as written on a fresh machine, without a CUDA build.

``.ci/run`` runs both literally in fresh virtual environments (the second is the test
command); the slow test here does the same for command 1 and for command 2's install, so a
change that would pull multi-GB CUDA wheels fails here, not on a user's machine.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CUDA_PACKAGE = re.compile(r"^(nvidia|cuda)[-_]", re.IGNORECASE | re.MULTILINE)


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("setup_commands",
                                                  ROOT / "tools" / "setup_commands.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_has_the_two_commands() -> None:
    first, second = _tool().setup_commands()
    assert first.startswith("pip install -e . && spr-data demo")
    assert second.startswith("pip install -e '.[dev]' && python -m pytest")


def test_ci_runs_exactly_the_readme_commands() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "tools/setup_commands.py 1" in ci and "tools/setup_commands.py 2" in ci
    assert 'eval "$first"' in ci and 'eval "$second"' in ci
    # no other install slipped in before the README's commands: every pip install is theirs
    assert not re.search(r"^\s*pip install", ci, re.MULTILINE)
    assert ci.count("venv --clear") == 2  # each command in a fresh environment


def test_dev_extra_pins_torch_exactly() -> None:
    """A range would let pip choose the newest CUDA build over the local CPU wheel."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch = [r for r in project["optional-dependencies"]["dev"] if r.startswith("torch")
             and not r.startswith("torchdata")]
    assert len(torch) == 1 and re.fullmatch(r"torch==\d+\.\d+\.\d+", torch[0]), torch
    assert not any(r.startswith("torch") for r in project["dependencies"])


def _fresh_venv(path: Path) -> dict[str, str]:
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(path)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{path / 'bin'}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(path)
    # not byte-compiling torch's thousands of modules halves the time; the commands are as written
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_PROGRESS_BAR="off", PIP_NO_COMPILE="1")
    return env


def _packages(env: dict[str, str]) -> str:
    return subprocess.run(["pip", "list", "--format=freeze"], env=env, check=True,
                          capture_output=True, text=True).stdout


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SPR_DATA_CI_SETUP_DONE") == "1",
                    reason=".ci/run has just run both commands in fresh environments")
def test_setup_commands_in_fresh_venvs(tmp_path: Path) -> None:
    first, second = _tool().setup_commands()
    # command 2 up to its test run (the test run is this very suite: .ci/run runs it whole)
    install, run_tests = second.split("#")[0].strip().split(" && ")
    assert run_tests == "python -m pytest"
    temp = tmp_path / "tmp"
    temp.mkdir()
    env_first = {**_fresh_venv(tmp_path / "venv-first"), "TMPDIR": str(temp)}
    env_second = _fresh_venv(tmp_path / "venv-second")
    # both at once: each is mostly waiting on pip's downloads and unpacking
    logs = [(tmp_path / f"{i}.out", tmp_path / f"{i}.err") for i in (1, 2)]
    runs = []
    for command, env, (out, err) in zip((first, install), (env_first, env_second), logs,
                                        strict=True):
        with open(out, "w") as stdout, open(err, "w") as stderr:  # files: no pipe fills up
            runs.append(subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env,
                                         stdout=stdout, stderr=stderr))
    for run in runs:
        run.wait(timeout=600)
    out_first, err_first, _, err_second = (p.read_text() for pair in logs for p in pair)

    assert runs[0].returncode == 0, err_first[-3000:]
    assert out_first.count("verify: ok") == 2, out_first
    assert "kept" in out_first  # the clean step ran on both datasets
    assert not CUDA_PACKAGE.search(_packages(env_first))
    assert not [p.name for p in temp.iterdir() if p.name.startswith("spr-data-demo-")]

    assert runs[1].returncode == 0, err_second[-3000:]
    packages = _packages(env_second)
    assert not CUDA_PACKAGE.search(packages), CUDA_PACKAGE.findall(packages)
    assert re.search(r"^torch==", packages, re.MULTILINE)
    check = subprocess.run(["python", "-c", "import torch, spr_data.train; "
                            "print(torch.cuda.is_available())"], cwd=ROOT, env=env_second,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
