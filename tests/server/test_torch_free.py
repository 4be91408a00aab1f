"""A text embedder on ONNX Runtime is served by a model service that never loads torch (issue 51), with the
vectors torch gives."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from config.settings import ModelConfig
from models.inference.auto_backend import MIN_COSINE, check_export
from testkit.sentences import make_sentences
from tests.conftest import MINILM
from tests.servers import SharedServer
from tests.tolerance import assert_same_vectors

pytestmark = pytest.mark.server


def service_processes(pid: int, service: str) -> list[psutil.Process]:
    """The server's processes of one BentoML service (its command line names it after `--service-name`)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        line = child.cmdline()
        if any(arg == "--service-name" and value == service for arg, value in zip(line, line[1:])):
            found.append(child)
    return found


def test_minilm_on_onnx_runtime_is_served_without_torch(minilm_alone_server: SharedServer, minilm_path: Path):
    from sentence_transformers import SentenceTransformer

    # `backend: auto` (the default) serves ONNX Runtime without torch once the export and its verdict exist, as
    # a Bento's build or an earlier start leaves them.
    assert check_export(minilm_path, ModelConfig(model_id=MINILM), "embed").matches
    texts = make_sentences(16, seed=5)
    url, pid = minilm_alone_server.ready()  # MiniLM alone, every setting its default (tests/servers.py)
    [model] = httpx.get(f"{url}/v1/models", timeout=30).json()["data"]
    response = httpx.post(f"{url}/v1/embeddings", json={"model": MINILM, "input": texts}, timeout=120)
    assert response.status_code == 200, response.text
    [service] = service_processes(pid, "TextEmbedder")
    maps = Path(f"/proc/{service.pid}/maps").read_text()
    assert model["backend"] == "onnx", model
    assert "libtorch" not in maps and "onnxruntime" in maps
    got = np.array([row["embedding"] for row in response.json()["data"]])
    reference = SentenceTransformer(str(minilm_path), device="cpu").encode(texts)
    assert_same_vectors(got, reference, min_cosine=MIN_COSINE)
