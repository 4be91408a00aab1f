"""Request content never reaches a log line (issue 62, item 1; docs/operations.md, Logs).

A marker travels in every route family's bodies, good and bad: texts, queries, documents, images (as data URIs,
the marker's bytes in them), audio, token ids, bulk-job files, and bodies that fail validation in each way a client
gets wrong (a typed item with an unknown key, a wrong type, a missing field, invalid JSON, bytes that are not UTF-8).
Then no line of the server's log (the gateway's and the model services' processes write it) holds the marker, in
any form it was sent in: at the default level on the session's server, which serves every kind, and at debug level
(`bentoml serve --debug`, where every library logs) on a server of its own. A client's mistake is answered, not
logged: no traceback and no ERROR line."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from testkit.batches import finished, request_line, submitted
from testkit.media import audio_bytes, data_uri, image_bytes
from testkit.ports import free_port
from tests.conftest import (
    MINILM,
    QWEN3_EMBEDDER,
    TINY_CLAP,
    TINY_CLASSIFIER,
    TINY_CLIP,
    TINY_COLPALI,
    TINY_RERANKER,
    TINY_SPLADE,
    background,
    in_session_cache,
    server_env,
    wait_listening,
    wait_ready,
)

pytestmark = pytest.mark.server

MARKER = "Zq7marker9Private"
TEXT = f"my private medical note {MARKER}"
# The marker as it travels inside a data URI: its bytes in base64 (an "image" that is not one), and a real PNG
# with the marker's bytes after its end (an image that decodes, the marker in its base64).
MARKER_B64 = base64.b64encode(MARKER.encode() * 3).decode()
NOT_AN_IMAGE = f"data:image/png;base64,{MARKER_B64}"
PNG_WITH_MARKER = data_uri(image_bytes() + MARKER.encode() * 3, "image/png")
WAV = data_uri(audio_bytes(seconds=0.5), "audio/wav")
# Token ids as a client sends them; the log must hold neither the list nor a run of it.
TOKEN_IDS = [7592, 2088, 3231, 4937, 6178, 2361]
TOKEN_RUN = "7592, 2088, 3231"
OK, REFUSED = True, False
Case = tuple[str, object, bool]


def bodies(embedder: str, reranker: str, classifier: str, image_model: str, sparse: str) -> list[Case]:
    """(path, body, answered) per route family, each with the marker: bodies answered (200) and client mistakes
    (4xx). A body of bytes is sent as it is."""
    rerank = {"model": reranker, "query": TEXT, "documents": [TEXT, "another"]}
    return [
        # OpenAI and infinity
        ("/v1/embeddings", {"model": embedder, "input": [TEXT]}, OK),
        ("/v1/embeddings", {"model": embedder, "input": TOKEN_IDS}, OK),
        ("/embeddings", {"model": embedder, "input": TEXT, "encoding_format": "base64"}, OK),
        ("/v1/embeddings", {"model": embedder, "input": [{"text": TEXT, "foo": 1}]}, REFUSED),
        ("/v1/embeddings", {"model": embedder, "input": [TEXT], "dimensions": TEXT}, REFUSED),
        ("/v1/embeddings", {"input": TEXT, "model": TEXT}, REFUSED),
        ("/v1/embeddings", {"model": embedder, "input": [TEXT, 5]}, REFUSED),
        ("/v1/embeddings", {"model": embedder, "inputs": [TEXT]}, REFUSED),
        ("/v1/embeddings", f'{{"model": "{embedder}", "input": ["{TEXT}"'.encode(), REFUSED),
        ("/v1/embeddings", f'{{"input": "{TEXT} \xff"}}'.encode("latin-1"), REFUSED),
        ("/v1/embeddings", {"model": image_model, "input": [{"image": NOT_AN_IMAGE}]}, REFUSED),
        ("/embeddings_image", {"model": image_model, "input": [PNG_WITH_MARKER]}, OK),
        ("/embeddings_image", {"model": image_model, "input": [NOT_AN_IMAGE]}, REFUSED),
        ("/embeddings_audio", {"model": TINY_CLAP, "input": [NOT_AN_IMAGE.replace("image/png", "audio/wav")]}, REFUSED),
        ("/rerank", {**rerank, "return_documents": True}, OK),
        ("/rerank", {**rerank, "documents": [TEXT, {"text": TEXT}]}, OK),
        ("/v1/classify", {"model": classifier, "input": [TEXT]}, OK),
        ("/classify", {"model": classifier, "input": [TEXT, None]}, REFUSED),
        # Cohere
        ("/v1/embed", {"model": embedder, "texts": [TEXT]}, OK),
        (
            "/v2/embed",
            {"model": embedder, "texts": [TEXT], "input_type": "search_query", "embedding_types": ["int8"]},
            OK,
        ),
        ("/v2/embed", {"model": image_model, "images": [NOT_AN_IMAGE], "input_type": "image"}, REFUSED),
        ("/v2/embed", {"texts": [TEXT], "input_type": "search_query"}, REFUSED),
        ("/v1/rerank", rerank, OK),
        ("/v1/rerank", {**rerank, "top_n": TEXT}, REFUSED),
        ("/v2/rerank", rerank, OK),
        ("/v2/rerank", {**rerank, "documents": [{"text": TEXT}, TEXT]}, OK),
        # TEI
        ("/embed", {"inputs": TEXT}, OK),
        ("/embed", {"inputs": [TEXT], "truncate": TEXT}, REFUSED),
        ("/embed_sparse", {"model": sparse, "inputs": [TEXT]}, OK),
        ("/predict", {"model": classifier, "inputs": TEXT}, OK),
        ("/predict", {"model": classifier, "inputs": [[TEXT, TEXT, TEXT]]}, REFUSED),
        ("/rerank", {"model": reranker, "query": TEXT, "texts": [TEXT], "return_text": True}, OK),
        ("/similarity", {"model": embedder, "inputs": {"source_sentence": TEXT, "sentences": [TEXT]}}, OK),
        ("/tokenize", {"model": embedder, "inputs": TEXT}, OK),
        ("/decode", {"model": embedder, "ids": TOKEN_IDS}, OK),
        ("/decode", {"model": embedder, "ids": [TEXT]}, REFUSED),
        ("/", {"model": embedder, "inputs": TEXT}, OK),
        ("/", {"inputs": {"source_sentence": TEXT}}, REFUSED),
        # Voyage
        ("/v1/contextualizedembeddings", {"model": embedder, "inputs": [[TEXT, TEXT]], "input_type": "document"}, OK),
        ("/v1/contextualizedembeddings", {"model": embedder, "inputs": [[TEXT, 3]]}, REFUSED),
        (
            "/v1/multimodalembeddings",
            {"model": image_model, "inputs": [{"content": [{"type": "text", "text": TEXT}]}]},
            OK,
        ),
        (
            "/v1/multimodalembeddings",
            {"model": image_model, "inputs": [{"content": [{"type": "image_base64", "image_base64": NOT_AN_IMAGE}]}]},
            REFUSED,
        ),
    ]


def run_a_marked_batch(url: str) -> None:
    """A bulk job of one good line and one whose body fails, run to its end in the model services."""
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    lines = [
        request_line("good", {"model": MINILM, "input": [TEXT]}),
        request_line("bad", {"model": MINILM, "input": [{"x": TEXT}]}),
    ]
    finished(client, submitted(client, lines).id)


def send_everything(url: str, cases: list[Case]) -> None:
    """Every body, each route family's, answered as its case says (the content went the whole way, or was
    refused); then a bulk job of marked lines."""
    wrong = []
    with httpx.Client(base_url=url, timeout=120) as http:
        for path, body, answered in cases:
            if isinstance(body, bytes):
                response = http.post(path, content=body, headers={"Content-Type": "application/json"})
            else:
                response = http.post(path, json=body)
            if (response.status_code == 200) is not answered or response.status_code >= 500:
                wrong.append(f"{path} {str(body)[:80]}: {response.status_code} {response.text[:200]}")
    assert not wrong, "\n".join(wrong)
    run_a_marked_batch(url)


def assert_no_content(log: str, what: str) -> None:
    for needle in (MARKER, MARKER_B64[:24], PNG_WITH_MARKER[-40:], TOKEN_RUN, str(TOKEN_IDS)):
        lines = [line for line in log.splitlines() if needle in line]
        assert not lines, f"{what}: request content ({needle!r}) in the log:\n" + "\n".join(lines[:5])


def assert_client_errors_unlogged(log: str, what: str) -> None:
    assert "Traceback" not in log and "[ERROR]" not in log, f"{what}: a client's mistake was logged:\n{log[-3000:]}"


def test_the_session_server_logs_no_request_content(server: str, server_folder: Path) -> None:
    log_path = server_folder / "server.log"
    before = log_path.stat().st_size
    other_kinds = [  # ColPali's queries, a decoder embedder's texts, CLAP's audio
        ("/v1/embeddings", {"model": TINY_COLPALI, "input": [TEXT]}, OK),
        ("/v1/embeddings", {"model": QWEN3_EMBEDDER, "input": [TEXT]}, OK),
        ("/embeddings_audio", {"model": TINY_CLAP, "input": [WAV]}, OK),
    ]
    send_everything(server, bodies(MINILM, TINY_RERANKER, TINY_CLASSIFIER, TINY_CLIP, TINY_SPLADE) + other_kinds)
    assert_no_content(log_path.read_text(errors="replace"), "default level")
    with open(log_path, "rb") as log:
        log.seek(before)
        assert_client_errors_unlogged(log.read().decode(errors="replace"), "default level")


@pytest.fixture(scope="module")
def debug_server(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_reranker_path: Path,
    tiny_classifier_path: Path,
    tiny_clip_path: Path,
    splade_path: Path,
) -> Iterator[tuple[str, Path]]:
    """`bentoml serve --debug` (what `embento serve --log-level debug` runs), with the access log on: an
    embedder, a reranker, a classifier, CLIP and SPLADE."""
    folder = tmp_path_factory.mktemp("debug-log")
    config = {
        "models": [
            {"model_id": MINILM},
            {"model_id": str(tiny_reranker_path), "served_model_name": TINY_RERANKER},
            {"model_id": str(tiny_classifier_path), "served_model_name": TINY_CLASSIFIER},
            {"model_id": str(tiny_clip_path), "served_model_name": TINY_CLIP},
            {"model_id": str(splade_path), "served_model_name": TINY_SPLADE},
        ],
        "jobs": {"data_dir": str(folder / "jobs")},
        "log": {"access": "json"},
    }
    (folder / "embento.yaml").write_text(json.dumps(in_session_cache(config)))
    port = free_port()
    env = server_env(folder / "bentoml", EMBENTO_CONFIG=str(folder / "embento.yaml"))
    command = [sys.executable, "-m", "bentoml", "serve", "service:Gateway", "--port", str(port), "--debug"]
    log_path = folder / "server.log"
    with background([*command, "--host", "127.0.0.1"], env, log_path) as process:
        wait_listening(port, process, log_path)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process, log_path)
        yield url, log_path


def test_a_debug_level_server_logs_no_request_content(debug_server: tuple[str, Path]) -> None:
    url, log_path = debug_server
    send_everything(url, bodies(MINILM, TINY_RERANKER, TINY_CLASSIFIER, TINY_CLIP, TINY_SPLADE))
    log = log_path.read_text(errors="replace")
    assert "[DEBUG]" in log, "the server did not run at debug level"
    assert '"route": "/v1/embeddings"' in log, "the access log did not run"
    assert_no_content(log, "debug level")
    assert_client_errors_unlogged(log, "debug level")
