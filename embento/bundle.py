"""What makes a folder an Embento bundle: the one check, read by the entry point (`embento.cli`) to find the bundle
and by the bundle's `commands` to default to the working directory. It imports nothing, so `commands` reaching
it is no circle through `embento.cli`, which imports `commands`."""

from __future__ import annotations

from pathlib import Path

BUNDLE_MARKERS = ("service.py", "bentofile.yaml")


def is_bundle(folder: Path) -> bool:
    return all((folder / name).is_file() for name in BUNDLE_MARKERS)
