"""The container tests' engine, image and host results: built once per session, for test_container.py and
test_kube_play.py alike (both marked `container`; no other test asks for them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.packaging.container_image import (
    build_image,
    compute_host_results,
    engine_files,
    install_tools,
    remove_storage,
)


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """podman and buildah on a private storage root, removed with everything in it at the end."""
    install_tools()
    folder = tmp_path_factory.mktemp("containers")
    env = {**os.environ, **engine_files(folder)}
    try:
        yield env
    finally:
        remove_storage(folder, env)


@pytest.fixture(scope="session")
def image(engine: dict[str, str], tmp_path_factory: pytest.TempPathFactory, tiny_reranker_path: Path) -> dict:
    return build_image(engine, tmp_path_factory.mktemp("build"), tiny_reranker_path)


@pytest.fixture(scope="session")
def host_results(minilm_path: Path, tiny_reranker_path: Path) -> dict[str, np.ndarray]:
    return compute_host_results(minilm_path, tiny_reranker_path)
