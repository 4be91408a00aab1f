"""Kinds from the checkpoint, through the real server: the former remote-code families that transformers 5
builds natively are served without `trust_remote_code`, with sentence-transformers' vectors; a checkpoint
whose kind cannot be told stops `embento serve` and `bentoml serve` at start with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from bento.serving.start_failures import PREFIX
from tests.conftest import ROOT, free_port, in_session_cache, server_env
from tests.references import TEXTS
from tests.servers import SharedServer
from tests.tolerance import assert_same_vectors

# What `backend: auto` chose for each on this CPU: each exports to ONNX and matches torch on the parity texts.
EXPECTED_BACKEND = {"nomic_bert": "onnx", "gte": "onnx", "jina_embeddings_v3": "onnx", "eurobert": "onnx"}


@pytest.fixture(scope="module")
def native_server(text_families_server: SharedServer) -> str:
    """Each family served by its model_type, beside other text checkpoints (tests/servers.py)."""
    return text_families_server.url


@pytest.mark.server
def test_former_remote_code_families_match_sentence_transformers(native_server, native_family_paths):
    from sentence_transformers import SentenceTransformer

    with httpx.Client(base_url=native_server, timeout=120) as client:
        cards = {card["id"]: card for card in client.get("/v1/models").json()["data"]}
        for family, folder in native_family_paths.items():
            card = cards[family]
            assert (card["capabilities"], card["modalities"]) == (["embed"], ["text"]), card
            assert card["backend"] == EXPECTED_BACKEND[family], card["backend_reason"]
            response = client.post("/v1/embeddings", json={"model": family, "input": TEXTS})
            assert response.status_code == 200, response.text
            served = np.array([item["embedding"] for item in response.json()["data"]])
            reference = SentenceTransformer(str(folder), device="cpu", local_files_only=True)  # no remote code
            assert_same_vectors(served, reference.encode(TEXTS), min_cosine=0.9999)


def start_and_stop(command: list[str], folder: Path, checkpoint: Path) -> tuple[int, str]:
    """`command` with one model, `checkpoint`, run until it exits (it must refuse at once): (status, log)."""
    folder.mkdir()
    (folder / "embento.yaml").write_text(yaml.safe_dump(in_session_cache({"models": [{"model_id": str(checkpoint)}]})))
    env = server_env(folder / "home", EMBENTO_CONFIG=str(folder / "embento.yaml"))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def vision_language_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Qwen3-VL configuration as transformers saves it, which no kind serves (yet)."""
    from transformers import Qwen3VLConfig

    folder = tmp_path_factory.mktemp("qwen3-vl")
    Qwen3VLConfig().save_pretrained(folder)
    return folder


@pytest.mark.server
@pytest.mark.parametrize("how", ["embento serve", "bentoml serve"])
def test_a_checkpoint_whose_kind_cannot_be_told_stops_the_start_with_one_line(how, vision_language_model, tmp_path):
    port = str(free_port())
    command = {
        "embento serve": [sys.executable, "-m", "commands", "serve", "--host", "127.0.0.1", "--port", port],
        "bentoml serve": [sys.executable, "-m", "bentoml", "serve", "service:Gateway", "--port", port],
    }[how]
    status, log = start_and_stop(command, tmp_path / "run", vision_language_model)
    line = (
        f"{PREFIX}cannot tell which kind of model '{vision_language_model}' is: model_type 'qwen3_vl' has vision_config"
    )
    assert status != 0 and log.count(line) == 1, log
    assert [row for row in log.splitlines() if row.strip()][-1].startswith(line)  # the last word, whole
    assert "Traceback" not in log, log
    if how == "embento serve":
        assert status == 2 and "serving" not in log  # refused before anything starts
