"""The reference venvs (`make reference-venv`, `make vl-reference-venv`) built in the background from the session's
start, beside the first tests: on a fresh clone they take about 4 min 45 s of pip, much of it waiting on the disk,
which the tests that need them would otherwise wait for in line. A test that needs one still runs `make` itself
(a no-op once built, and the build's error where it failed), after the background build has ended: two makes
must not install into one venv at once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

STAMPS = (".venv-reference/.installed", ".venv-vl-reference/.installed")  # the Makefile's stamps of the two venvs
_build: subprocess.Popen | None = None


@contextlib.contextmanager
def built_in_background(root: Path, log: Path) -> Iterator[None]:
    """Within the block, `make` builds the venvs that are not current (none, once built: nothing starts). At its
    end a build still running is stopped: a run of a few tests need not wait for it, and the next `make` starts
    that venv again from its first step (its stamp is written last)."""
    global _build
    stale = [stamp for stamp in STAMPS if subprocess.run(["make", "-q", stamp], cwd=root).returncode != 0]
    if stale:
        with open(log, "wb") as output:
            _build = subprocess.Popen(
                ["make", *stale], cwd=root, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )
    try:
        yield
    finally:
        if _build is not None and _build.poll() is None:
            os.killpg(_build.pid, signal.SIGTERM)
            _build.wait()
        _build = None


def wait_for_background_build(timeout_s: float) -> None:
    """Before a test runs `make` on a reference venv: until the background build (if any) has ended."""
    if _build is not None:
        _build.wait(timeout=timeout_s)
