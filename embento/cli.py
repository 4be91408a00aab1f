"""The `embento` command's entry point: it finds the Embento bundle and runs the bundle's own `commands`.

The bundle (service.py, gateway/, runners/, bento/, config/, models/, commands/, bentofile.yaml) is not
installed into site-packages, where names such as `models` would collide with other projects: BentoML loads
it from its folder (`bentoml serve --working-dir`, `bentoml build`), and so does this command.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from urllib.parse import unquote, urlparse

from embento.bundle import BUNDLE_MARKERS, is_bundle

BUNDLE_ENV = "EMBENTO_PROJECT_DIR"


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


def main(argv: Sequence[str] | None = None) -> int:
    try:
        bundle = find_bundle(Path.cwd(), os.environ)
    except BundleNotFound as exc:
        print(f"embento: {exc}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(bundle))
    return importlib.import_module("commands").main(argv)
