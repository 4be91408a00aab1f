"""`embento containerize`: BentoML's `containerize` of a built Bento, with the engine this machine has.

Docker when its daemon answers, else buildah, else podman: the last two need no daemon, which is how
locked-down build machines and CI runners usually build. Local package folders the Bento was built with
(`--find-links /wheels`, `--index-url file:///mirror/simple`) are mounted read-only into the build at the
same path; Docker's build cannot mount host folders, so there they must be served over HTTP instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from config.errors import ConfigError
from config.settings import ImageSettings

CONTAINER_BACKENDS = ("auto", "docker", "buildah", "podman")
DAEMONLESS_BACKENDS = ("buildah", "podman")
LABEL_PREFIX = "ai.embento."


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def choose_backend(requested: str) -> str:
    if requested != "auto":
        if shutil.which(requested) is None:
            raise ConfigError(f"container engine '{requested}' is not installed")
        return requested
    if docker_answers():
        return "docker"
    for backend in DAEMONLESS_BACKENDS:
        if shutil.which(backend):
            return backend
    raise ConfigError(
        "no container engine: start Docker's daemon, or install buildah or podman "
        "(Debian: apt-get install buildah podman runc)"
    )


def local_package_folders(settings: ImageSettings) -> list[Path]:
    """The host folders the build's package sources name: `file://` URLs and plain paths."""
    sources = [settings.index_url or "", *(settings.extra_index_url or []), *settings.find_links]
    folders = [Path(source.removeprefix("file://")) for source in sources if source.startswith(("file://", "/"))]
    return list(dict.fromkeys(folders))


def package_mount(folders: Iterable[Path], backend: str) -> list[str]:
    """`--opt volume=…` for the folders: one mount, their common parent (BentoML's buildah and podman
    backends pass a single volume)."""
    folders = list(folders)
    if not folders:
        return []
    if backend not in DAEMONLESS_BACKENDS:
        raise ConfigError(
            f"the Bento reads packages from host folders ({', '.join(map(str, folders))}); {backend} "
            "cannot mount them into its build: use buildah or podman, or serve them as an index URL"
        )
    common = Path(os.path.commonpath([str(folder) for folder in folders]))
    if common == Path("/"):
        raise ConfigError(
            f"the package folders {', '.join(map(str, folders))} share no parent below /; "
            "keep them under one folder, mounted read-only into the build"
        )
    return ["--opt", f"volume={common}:{common}:ro"]


def containerize_command(tag: str, backend: str, image_tag: str, bento: Mapping) -> list[str]:
    """`bentoml containerize` of the Bento whose bento.yaml is `bento`, labelled with how it was made."""
    arguments = {k: v for k, v in (bento.get("args") or {}).items() if k != "accel"}
    settings = ImageSettings.model_validate(arguments)
    labels = [
        option
        for key, value in (bento.get("labels") or {}).items()
        for option in ("--opt", f"label={LABEL_PREFIX}{key}={value}")
    ]
    # Build steps fetch through the host's network, as the host's own package sources are reached (a proxy,
    # a mirror routed to the host alone); a private build network also needs CNI plugins and iptables.
    network = ["--opt", "network=host"] if backend in DAEMONLESS_BACKENDS else []
    return [
        sys.executable,
        "-m",
        "bentoml",
        "containerize",
        tag,
        "--backend",
        backend,
        "--image-tag",
        image_tag,
        *network,
        *package_mount(local_package_folders(settings), backend),
        *labels,
    ]
