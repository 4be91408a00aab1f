"""The `embento` command's entry point: it finds the Embento bundle and runs the bundle's own `commands`.

The bundle (service.py, gateway/, runners/, bento/, config/, models/, commands/, bentofile.yaml) is not
installed into site-packages, where names such as `models` would collide with other projects: BentoML loads
it from its folder (`bentoml serve --working-dir`, `bentoml build`), and so does this command.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tomllib
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote, urlparse

from embento.bundle import BUNDLE_MARKERS, is_bundle
from embento.overview import COMMANDS, DESCRIPTION

BUNDLE_ENV = "EMBENTO_PROJECT_DIR"
# The bundle's own packages: a module of theirs missing is a broken checkout, not packages left to install.
BUNDLE_PACKAGES = {"commands", "config", "models", "bento", "gateway", "runners", "service", "shared_metrics"}


class BundleNotFound(Exception):
    pass


def installed_from() -> Path | None:
    """The local folder this package was installed from (pip records it: PEP 610's direct_url.json)."""
    try:
        text = distribution("embento").read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    url = urlparse(json.loads(text).get("url", "")) if text else None
    return Path(unquote(url.path)) if url and url.scheme == "file" else None


def find_bundle(cwd: Path, environ: Mapping[str, str]) -> Path:
    """EMBENTO_PROJECT_DIR; else the working directory when it is a bundle; else the checkout the package
    was installed from (or, run from a checkout, the folder above this package)."""
    if given := environ.get(BUNDLE_ENV):
        if not is_bundle(Path(given)):
            raise BundleNotFound(f"{BUNDLE_ENV}={given} is not an Embento checkout (it needs {BUNDLE_MARKERS})")
        return Path(given).resolve()
    candidates = [cwd, installed_from(), Path(__file__).resolve().parent.parent]
    for folder in candidates:
        if folder is not None and is_bundle(folder):
            return folder.resolve()
    looked = ", ".join(str(folder) for folder in candidates if folder is not None)
    raise BundleNotFound(
        f"no Embento checkout found (looked in {looked}); run from the checkout, install it "
        f"from the checkout (`pip install -e .`), or set {BUNDLE_ENV}"
    )


def version() -> str:
    """The installed package's version; run from a checkout without installing it, its pyproject's."""
    try:
        return distribution("embento").version
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["--version"], ["-V"]):  # needs no bundle
        print(f"embento {version()}")
        return 0
    try:
        commands = bundle_commands()
    except Unavailable as exc:
        return without_bundle(args, str(exc))
    return commands.main(argv)


class Unavailable(Exception):
    """The bundle cannot run here: not found, or its packages are not installed."""


def bundle_commands() -> ModuleType:
    """The bundle's `commands`, from the bundle found."""
    try:
        bundle = find_bundle(Path.cwd(), os.environ)
    except BundleNotFound as exc:
        raise Unavailable(str(exc)) from None
    sys.path.insert(0, str(bundle))
    try:
        return importlib.import_module("commands")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in BUNDLE_PACKAGES:
            raise
        raise Unavailable(
            f"the Embento checkout at {bundle} needs the server's packages, not installed here (no module "
            f"{exc.name!r}): pip install -r {bundle}/requirements.txt -r {bundle}/requirements-cpu.txt (or "
            "requirements-cuda.txt), as `make setup` does"
        ) from None


def without_bundle(args: list[str], reason: str) -> int:
    """`--help` (or nothing) lists the commands and says why they cannot run; a command says why, in one line."""
    parser = argparse.ArgumentParser(
        prog="embento",
        description=DESCRIPTION,
        epilog=f"Here: {reason}.",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # a path or a command in it stays whole
    )
    parser.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    subcommands = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for name, text in COMMANDS.items():
        subcommands.add_parser(name, help=text, add_help=False)
    if not args or args[0] in ("-h", "--help"):
        parser.print_help(sys.stdout if args else sys.stderr)
        return 0 if args else 2
    print(f"embento: {reason}", file=sys.stderr)
    return 2
