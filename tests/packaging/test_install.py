"""Installing the project adds one importable package, `embento`; the `embento` command still finds the
bundle (service.py, models/, …), which stays in its folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT

# The fresh venv reads the suite's installed dependencies (yaml, pydantic, httpx, numpy) as a plain folder
# appended to its path, so nothing is downloaded and the suite venv's own install hooks (.pth) do not run.
SUITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])
# Python 3.11's venv brings setuptools 65, which cannot build a wheel without the `wheel` package: the build
# takes the suite's setuptools instead, and only it.
BUILD_BACKEND = ("setuptools", "_distutils_hack", "pkg_resources")


def checkout_copy(folder: Path) -> Path:
    """The project's files, so that building it leaves nothing in the real checkout. Dot folders stay out: the
    venvs (the reference venvs are gigabytes each), git and the tools' caches are not the project."""
    shutil.copytree(ROOT, folder, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "bench"))
    return folder


def fresh_venv(folder: Path, project: Path, editable: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True)
    python = folder / "bin" / "python"
    backend = folder.parent / "build-backend"
    backend.mkdir()
    for name in os.listdir(SUITE_PACKAGES):
        if name.split("-")[0] in BUILD_BACKEND:
            (backend / name).symlink_to(SUITE_PACKAGES / name)
    before = set(os.listdir(site_packages(python)))
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            *(["-e"] if editable else []),
            str(project),
        ],
        check=True,
        capture_output=True,
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(backend)},
    )
    added = set(os.listdir(site_packages(python))) - before
    importable = {
        name.removesuffix(".py")
        for name in added
        if not name.endswith((".dist-info", ".pth")) and not name.startswith(("__editable__", "_"))
    }
    assert importable <= {"embento"}, f"the install added top-level {sorted(importable)}"
    (site_packages(python) / "suite-dependencies.pth").write_text(f"{SUITE_PACKAGES}\n")
    return python


def site_packages(python: Path) -> Path:
    return Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )


@pytest.mark.parametrize("editable", [False, True], ids=["wheel", "editable"])
def test_a_fresh_install_adds_only_embento_and_the_command_finds_the_bundle(tmp_path, editable):
    project = checkout_copy(tmp_path / "checkout")
    python = fresh_venv(tmp_path / "venv", project, editable)
    elsewhere = tmp_path / "elsewhere"  # not the checkout: nothing importable from the working directory
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "EMBENTO_PROJECT_DIR")}

    def run(*command: str) -> subprocess.CompletedProcess:
        return subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)

    for name in ("models", "runners", "bento", "config", "commands", "gateway", "service"):
        assert "ModuleNotFoundError" in run(str(python), "-c", f"import {name}").stderr, name
    client = run(str(python), "-c", "from embento import Client; print(Client.__module__)")
    assert client.returncode == 0 and client.stdout.strip() == "embento.client", client.stderr
    help_text = run(str(python.parent / "embento"), "--help")
    assert help_text.returncode == 0, help_text.stderr
    assert all(command in help_text.stdout for command in ("serve", "build", "containerize", "models"))
    serve_help = run(str(python.parent / "embento"), "serve", "--help")
    assert serve_help.returncode == 0 and "--model-id" in serve_help.stdout, serve_help.stderr
    found = run(
        str(python),
        "-c",
        "from embento.cli import find_bundle; import os, pathlib; print(find_bundle(pathlib.Path.cwd(), os.environ))",
    )
    assert found.stdout.strip() == str(project.resolve()), found.stderr  # the checkout it was installed from


def test_embento_project_dir_chooses_the_bundle_and_must_be_one(tmp_path):
    from embento.cli import BUNDLE_ENV, BundleNotFound, find_bundle

    with pytest.raises(BundleNotFound, match=f"{BUNDLE_ENV}=.* is not an Embento checkout"):
        find_bundle(tmp_path, {BUNDLE_ENV: str(tmp_path)})
    assert find_bundle(tmp_path, {BUNDLE_ENV: str(ROOT)}) == ROOT
    assert find_bundle(ROOT, {}) == ROOT
