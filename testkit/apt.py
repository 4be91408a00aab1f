"""Debian's packages, installed on demand: the tools some tests and benchmarks need (redis-server, PostgreSQL,
promtool, buildah) when the machine lacks them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence


def apt_install(
    packages: Sequence[str], recommends: bool = True, timeout_s: float = 900
) -> subprocess.CompletedProcess:
    """Debian's packages, installed without questions (as root; the caller decides what a failure means)."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    update = subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, text=True, timeout=timeout_s)
    if update.returncode != 0:
        return update
    return subprocess.run(
        ["apt-get", "install", "-y", "-qq", *([] if recommends else ["--no-install-recommends"]), *packages],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
