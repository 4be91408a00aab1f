"""Each kind served alone, in a server of its own: it becomes ready and answers one request on its route.

The session's main server serves every kind at once, so it cannot see what one kind alone lacks: a CLAP
model without a ColPali model once could not start, because the gateway ran without torch and CLAP's feature
extractor needs it. The servers start one after another, each production `bentoml serve` with its gateway
and its one model service. Each case's server starts once the one before it listens, so that two starts
(mostly imports) overlap: two side by side took 13 s here, one after the other 18 s.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from models.scores import late_interaction
from testkit.media import audio_bytes, data_uri, image_bytes
from testkit.sentences import WORDS
from tests.conftest import CLASSIFIER_LABELS, MINILM, listening_server, wait_ready
from tests.servers import SharedServer
from tests.tolerance import assert_close

pytestmark = pytest.mark.server

NAME = "alone"
DOCUMENTS = ["a bear eats bamboo in the forest", "a car drives on the road", "pandas are bears from china"]
LONG_TEXT = " ".join(WORDS * 4)  # 128 words: past every tiny text tower's positions
IMAGE = {"image": data_uri(image_bytes(seed=1), "image/png")}
PAGES = [IMAGE, {"image": data_uri(image_bytes(160, 36, seed=2), "image/png")}]
AUDIO = {"audio": data_uri(audio_bytes(rate=48000, seed=1), "audio/wav")}
UNIT = 1e-4  # float32 vectors normalized by the model service: 1 within a few ulps times the dimension


def embeddings(http: httpx.Client, card: dict, inputs: list) -> list:
    response = http.post("/v1/embeddings", json={"model": card["id"], "input": inputs})
    assert response.status_code == 200, response.text
    return [item["embedding"] for item in response.json()["data"]]


def check_unit_vectors(http: httpx.Client, card: dict, inputs: list) -> None:
    vectors = np.array(embeddings(http, card, inputs))
    assert vectors.shape == (len(inputs), card["dimension"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=UNIT)


def check_embed(http: httpx.Client, card: dict) -> None:
    check_unit_vectors(http, card, ["a sentence about embeddings", LONG_TEXT])


def check_rerank(http: httpx.Client, card: dict) -> None:
    response = http.post("/v1/rerank", json={"model": card["id"], "query": "what is a panda?", "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    scores = [r["relevance_score"] for r in results]
    assert sorted(r["index"] for r in results) == [0, 1, 2]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)  # a sigmoid or P(yes)


def check_classify(http: httpx.Client, card: dict) -> None:
    response = http.post("/v1/classify", json={"model": card["id"], "input": ["great product", LONG_TEXT]})
    assert response.status_code == 200, response.text
    for row in response.json()["data"]:
        assert sorted(item["label"] for item in row) == sorted(CLASSIFIER_LABELS)
        assert sum(item["score"] for item in row) == pytest.approx(1.0, abs=1e-5)  # softmax probabilities


def check_sparse(http: httpx.Client, card: dict) -> None:
    for vector in embeddings(http, card, ["a sentence about embeddings", LONG_TEXT]):
        indices, values = np.array(vector["indices"]), np.array(vector["values"])
        assert 0 < len(indices) < card["dimension"] and np.all(np.diff(indices) > 0)
        assert indices[-1] < card["dimension"] and np.all(values > 0)  # SPLADE: log(1 + relu(logits))


def check_clip(http: httpx.Client, card: dict) -> None:
    check_unit_vectors(http, card, [{"text": "a photo of a red square"}, {"text": LONG_TEXT}, IMAGE])


def check_clap(http: httpx.Client, card: dict) -> None:
    check_unit_vectors(http, card, [{"text": "a bird singing in the rain"}, {"text": LONG_TEXT}, AUDIO])
    # The checkpoint's tokenizer names no limit: its 80 positions, less RoBERTa's 2, bound the text.
    assert card["max_input_tokens"] == 78
    response = http.post("/v1/embeddings", json={"model": card["id"], "input": [{"text": LONG_TEXT}]})
    assert response.status_code == 200 and response.json()["usage"]["prompt_tokens"] == 78, response.text


def check_colpali(http: httpx.Client, card: dict) -> None:
    """Text and image multi-vectors of unit rows, and image pages ranked by their MaxSim with the query's."""
    query, *pages = [np.array(m) for m in embeddings(http, card, [{"text": "what does the chart show"}, *PAGES])]
    for matrix in (query, *pages):
        assert matrix.ndim == 2 and matrix.shape[1] == card["dimension"] and len(matrix) > 1
        np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=UNIT)
    body = {"model": card["id"], "query": "what does the chart show", "documents": [page["image"] for page in PAGES]}
    response = http.post("/v1/rerank", json=body)
    assert response.status_code == 200, response.text
    got = {r["index"]: r["relevance_score"] for r in response.json()["results"]}
    assert_close([got[i] for i in range(len(PAGES))], [late_interaction(query, page) for page in pages])


def check_colbert(http: httpx.Client, card: dict) -> None:
    response = http.post(
        "/v1/embeddings", json={"model": card["id"], "input": ["what is a panda?"], "input_type": "search_query"}
    )
    assert response.status_code == 200, response.text
    (query,) = [np.array(item["embedding"]) for item in response.json()["data"]]
    documents = [np.array(matrix) for matrix in embeddings(http, card, [*DOCUMENTS, LONG_TEXT])]
    for matrix in (query, *documents):
        assert matrix.ndim == 2 and matrix.shape[1] == card["dimension"] and len(matrix) > 1
        np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=UNIT)
    assert len({len(matrix) for matrix in documents}) > 1  # a vector per token: documents differ in count
    check_ranked_by_own_vectors(http, card)


def check_hybrid(http: httpx.Client, card: dict) -> None:
    check_embed(http, card)
    response = http.post(
        "/v1/embeddings", json={"model": card["id"], "input": DOCUMENTS, "output_types": ["dense", "sparse", "colbert"]}
    )
    assert response.status_code == 200, response.text
    for item in response.json()["data"]:
        assert {"embedding", "sparse", "multi_vector"} <= set(item)
        assert len(item["sparse"]["indices"]) > 0 and np.array(item["multi_vector"]).shape[1] == card["dimension"]
    check_ranked_by_own_vectors(http, card)


def check_ranked_by_own_vectors(http: httpx.Client, card: dict) -> None:
    response = http.post("/v1/rerank", json={"model": card["id"], "query": "what is a panda?", "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    scores = [r["relevance_score"] for r in response.json()["results"]]
    assert sorted(r["index"] for r in response.json()["results"]) == [0, 1, 2]
    assert scores == sorted(scores, reverse=True)


# case -> (checkpoint fixture, or a packaged model id; the capabilities /v1/models reports; its check)
CASES: dict[str, tuple[str, list[str], Callable[[httpx.Client, dict], None]]] = {
    "embed-encoder": (MINILM, ["embed"], check_embed),
    "embed-decoder": ("qwen3_embedder_path", ["embed"], check_embed),
    "rerank-cross-encoder": ("tiny_reranker_path", ["rerank"], check_rerank),
    "rerank-causal-lm": ("qwen3_reranker_path", ["rerank"], check_rerank),
    "classify": ("tiny_classifier_path", ["classify"], check_classify),
    "sparse": ("splade_path", ["embed_sparse", "embed"], check_sparse),
    "clip": ("tiny_clip_path", ["embed", "rerank"], check_clip),
    # Its tokenizer names no length limit and its text tower has 80 positions (78 tokens): the long text is cut.
    "clap": ("silent_clap_path", ["embed"], check_clap),
    "colpali": ("tiny_colpali_path", ["embed", "rerank"], check_colpali),
    "colmodernvbert": ("tiny_colmodernvbert_path", ["embed", "rerank"], check_colpali),
    "colbert": ("colbert_path", ["embed", "rerank"], check_colbert),
    "hybrid": ("bge_m3_path", ["embed", "embed_sparse", "rerank"], check_hybrid),
}


# case -> the server of tests/servers.py that serves its model alone, by its own id, for other files' tests too
SHARED = {"embed-encoder": "minilm_alone_server"}


@pytest.fixture(scope="module")
def ready_alone(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, minilm_alone_server: SharedServer
) -> Iterator[Callable[[str], str]]:
    """case -> the URL of its own server, once ready. Asking for a case starts the next one too, and stops
    the ones before it (but a shared one, which stops after the last test that uses it)."""
    stacks: dict[str, contextlib.ExitStack] = {}
    servers: dict[str, tuple[str, subprocess.Popen, Path]] = {}
    shared = {"embed-encoder": minilm_alone_server}  # SHARED's

    def start(case: str) -> None:
        if case in shared:
            shared[case].listen()
            return
        if case in servers:
            return
        checkpoint = CASES[case][0]
        model_id = str(request.getfixturevalue(checkpoint)) if checkpoint.endswith("_path") else checkpoint
        folder = tmp_path_factory.mktemp(case)
        config = {"models": [{"model_id": model_id, "served_model_name": NAME}]}
        stacks[case] = contextlib.ExitStack()
        url, process = stacks[case].enter_context(listening_server(folder, config))
        servers[case] = (url, process, folder / "server.log")

    def ready(case: str) -> str:
        order = list(CASES)
        for earlier in order[: order.index(case)]:
            if earlier in stacks:
                stacks.pop(earlier).close()
        start(case)
        if case != order[-1]:
            start(order[order.index(case) + 1])
        if case in shared:
            return shared[case].url
        url, process, log = servers[case]
        wait_ready(url, process, log)
        return url

    try:
        yield ready
    finally:
        for stack in stacks.values():
            stack.close()


@pytest.mark.parametrize("case", list(CASES))
def test_each_kind_served_alone_becomes_ready_and_answers(case, ready_alone):
    checkpoint, capabilities, check = CASES[case]
    with httpx.Client(base_url=ready_alone(case), timeout=120) as http:
        (card,) = http.get("/v1/models").json()["data"]
        assert (card["id"], card["capabilities"]) == (checkpoint if case in SHARED else NAME, capabilities)
        check(http, card)
