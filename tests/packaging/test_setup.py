"""`make setup` installs the torch and ONNX Runtime builds of the accelerator asked for, and nothing of the
other: read off the Makefile's own recipe (`make -n`), so no download is needed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import ROOT


def requirements_installed(venv: Path, *make_args: str) -> set[str]:
    """Every `name==version` the recipe would pip-install into a fresh venv, and the indexes it would ask."""
    recipe = subprocess.run(
        ["make", "-n", "setup", f"VENV={venv}", *make_args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    installs = [line for line in recipe.splitlines() if re.search(r"/pip install ", line)]
    return {word for line in installs for word in line.split() if "==" in word or word.startswith("http")}


def test_cpu_is_the_default_and_takes_the_cpu_builds(tmp_path):
    wanted = requirements_installed(tmp_path / "venv")
    assert {"torch==2.13.0+cpu", "onnxruntime==1.31.1", "https://download.pytorch.org/whl/cpu"} <= wanted
    assert not any(word.startswith("onnxruntime-gpu") for word in wanted)


def test_cuda_takes_the_cuda_builds_and_no_cpu_torch(tmp_path):
    wanted = requirements_installed(tmp_path / "venv", "ACCEL=cuda")
    assert {"torch==2.13.0", "onnxruntime-gpu==1.31.1", "nvidia-cublas-cu12==12.9.3.13"} <= wanted
    assert not any("+cpu" in word or "whl/cpu" in word or word.startswith("onnxruntime==") for word in wanted)


def test_the_accelerator_chosen_is_remembered(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".accel").write_text("cuda\n")
    assert "onnxruntime-gpu==1.31.1" in requirements_installed(venv)  # `make serve` after `setup ACCEL=cuda`
    assert "onnxruntime==1.31.1" in requirements_installed(venv, "ACCEL=cpu")


def test_an_unknown_accelerator_is_refused():
    result = subprocess.run(["make", "-n", "setup", "ACCEL=rocm"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode != 0 and "ACCEL must be cpu or cuda" in result.stderr
