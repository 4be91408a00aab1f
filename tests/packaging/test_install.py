"""Installing the project adds one importable package, `embento`; the `embento` command still finds the
bundle (service.py, models/, …), which stays in its folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from importlib.metadata import Distribution, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


def fresh_venv(folder: Path, project: Path, editable: bool, suite_packages: bool = True) -> Path:
    """A venv with the project installed from `project` (no dependencies) and, with `suite_packages`, every
    package the suite has."""
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
    if suite_packages:
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

    for name in ("models", "runners", "bento", "config", "server_state", "commands", "gateway", "service"):
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


def declared_closure(requirements: list[str]) -> list[Distribution]:
    """The suite's installed distributions that `requirements` need, and theirs in turn (extras not asked for and
    markers not met left out): what pip would install beside the package."""
    found: dict[str, Distribution] = {}
    pending = [Requirement(text) for text in requirements]
    while pending:
        requirement = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(requirement.name)
        if key not in found:
            found[key] = distribution(requirement.name)
            pending += [Requirement(text) for text in found[key].requires or []]
    return list(found.values())


def declared(python: Path) -> list[str]:
    """The dependencies the installed package declares (its metadata's Requires-Dist)."""
    code = "import importlib.metadata as m; print('\\n'.join(m.requires('embento') or []))"
    # -I: not the working directory's embento.egg-info (the checkout's, from `make setup`) before the venv's own
    found = subprocess.run([str(python), "-I", "-c", code], check=True, capture_output=True, text=True)
    return found.stdout.splitlines()


def only_declared(python: Path, folder: Path) -> None:
    """The fresh venv gets embento's declared dependencies and theirs, from the suite's installed copies (no
    download), and nothing else: a folder of links to their files, on its path."""
    folder.mkdir()
    for dist in declared_closure(declared(python)):
        top = {Path(str(file)).parts[0] for file in dist.files or []} - {"..", "__pycache__"}
        for name in top - set(os.listdir(folder)):  # a namespace package two of them share: once
            (folder / name).symlink_to(SUITE_PACKAGES / name)
    (site_packages(python) / "declared-dependencies.pth").write_text(f"{folder}\n")


def pinned(name: str) -> str:
    """The version requirements.txt or requirements-test.txt pins `name` at."""
    for file in ("requirements.txt", "requirements-test.txt"):
        for line in (ROOT / file).read_text().splitlines():
            if line.split("#")[0].strip().lower().startswith(f"{name.lower()}=="):
                return line.split("==")[1].split("#")[0].strip()
    raise AssertionError(f"{name} is pinned nowhere")


def test_the_package_installed_from_a_checkout_runs_on_what_it_declares(tmp_path):
    """`pip install <checkout>` into a fresh venv, which then holds only what the package declares (and that needs):
    the client imports; `embento --version` and `--help` answer wherever it runs, the bundle's packages missing or
    the checkout gone; any other command says what to install or where the checkout must be, in one line."""
    project = checkout_copy(tmp_path / "checkout")
    python = fresh_venv(tmp_path / "venv", project, editable=False, suite_packages=False)
    only_declared(python, tmp_path / "declared")
    command = str(python.parent / "embento")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "EMBENTO_PROJECT_DIR")}

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)

    checked = run(str(python), "-m", "pip", "check")
    assert checked.returncode == 0, checked.stdout  # every declared dependency there, at a version it accepts
    for requirement in map(Requirement, declared(python)):
        assert requirement.specifier.contains(pinned(requirement.name)), requirement  # the pins the suite runs with
    client = run(str(python), "-c", "from embento import Client; print(Client.__module__)")
    assert client.returncode == 0 and client.stdout == "embento.client\n", client.stderr
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for state in ("its packages missing", "the checkout gone"):
        assert run(command, "--version").stdout == f"embento {version}\n", state
        help_text = run(command, "--help")
        assert help_text.returncode == 0 and help_text.stderr == "", (state, help_text.stderr)
        assert all(name in help_text.stdout for name in ("serve", "build", "containerize", "models", "keys")), state
        serve = run(command, "serve")
        assert serve.returncode == 2 and serve.stdout == "" and len(serve.stderr.splitlines()) == 1, serve.stderr
        assert "Traceback" not in serve.stderr
        if state == "its packages missing":
            assert f"pip install -r {project.resolve()}/requirements.txt" in serve.stderr, serve.stderr
            assert f"pip install -r {project.resolve()}/requirements.txt" in help_text.stdout, help_text.stdout
            shutil.rmtree(project)  # a wheel's files need no source
        else:
            assert "no Embento checkout found" in serve.stderr
