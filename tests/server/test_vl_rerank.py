"""Issue 50 through a server of its own serving a tiny Qwen3-VL-Reranker: Cohere's SDK (v2) ranks a text document
and an image's data URI, Jina's `{"image": …}` document ranks as the image it holds, an instruction reaches the
model, and each score equals sentence-transformers 6's `CrossEncoder.predict` (the reference venv's) within 1e-4
relative. A corrupt image document is a 400 naming it, while a concurrent request sharing its batch is answered."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from testkit.media import data_uri
from tests.asserts import assert_openai_error
from tests.conftest import running_server
from tests.tolerance import assert_close
from tests.vl_reference import RERANK_INSTRUCTION, RERANK_QUERY, RERANK_TEXT

pytestmark = pytest.mark.server

VL = "tiny-qwen3-vl-reranker"
SCORE_RTOL = 1e-4


@pytest.fixture(scope="module")
def vl_server(tmp_path_factory: pytest.TempPathFactory, vl_rerank_reference) -> Iterator[str]:
    config = {"models": [{"model_id": str(vl_rerank_reference.folder), "served_model_name": VL, "cache": True}]}
    with running_server(tmp_path_factory.mktemp("vl-rerank"), config) as (url, _):
        yield url


def png(data: bytes) -> str:
    return data_uri(data, "image/png")


def by_index(results: list[dict]) -> list[float]:
    scores = {r["index"]: r["relevance_score"] for r in results}
    return [scores[i] for i in range(len(scores))]


def test_cohere_sdk_ranks_a_text_and_an_image(vl_server, vl_rerank_reference) -> None:
    import cohere

    co = cohere.ClientV2(api_key="unused", base_url=vl_server)
    documents = [RERANK_TEXT, png(vl_rerank_reference.images["wide"])]
    result = co.rerank(model=VL, query=RERANK_QUERY, documents=documents)
    got = {r.index: r.relevance_score for r in result.results}
    assert_close([got[0], got[1]], vl_rerank_reference.scores[:2, 0], rtol=SCORE_RTOL)
    assert [r.index for r in result.results] == sorted(got, key=lambda i: -got[i])
    with httpx.Client(base_url=vl_server) as http:
        (card,) = http.get("/v1/models").json()["data"]
    assert (card["capabilities"], card["modalities"]) == (["rerank"], ["text", "image"])


def test_jinas_image_document_and_an_instruction(vl_server, vl_rerank_reference) -> None:
    image = {"image": png(vl_rerank_reference.images["wide"])}
    with httpx.Client(base_url=vl_server, timeout=120) as http:
        body = {"model": VL, "query": RERANK_QUERY, "documents": [RERANK_TEXT, image], "return_documents": True}
        response = http.post("/v1/rerank", json=body)
        assert response.status_code == 200, response.text
        assert_close(by_index(response.json()["results"]), vl_rerank_reference.scores[:2, 0], rtol=SCORE_RTOL)
        assert {r["index"]: r["document"] for r in response.json()["results"]}[1] == image
        body = {"model": VL, "query": RERANK_QUERY, "documents": [RERANK_TEXT], "instruction": RERANK_INSTRUCTION}
        response = http.post("/v1/rerank", json=body)
        assert response.status_code == 200, response.text
        assert_close(by_index(response.json()["results"]), vl_rerank_reference.instructed[:1], rtol=SCORE_RTOL)


def test_a_corrupt_image_document_fails_its_own_request_only(vl_server, vl_rerank_reference) -> None:
    broken = png(vl_rerank_reference.images["wide"][:60])
    good = {"model": VL, "query": RERANK_QUERY, "documents": [RERANK_TEXT, png(vl_rerank_reference.images["wide"])]}
    bad = {"model": VL, "query": RERANK_QUERY, "documents": [RERANK_TEXT, broken]}
    with httpx.Client(base_url=vl_server, timeout=120) as http, ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda body: http.post("/v1/rerank", json=body), [good, bad, good, bad]))
    for response in answers[0::2]:
        assert response.status_code == 200, response.text
        assert_close(by_index(response.json()["results"]), vl_rerank_reference.scores[:2, 0], rtol=SCORE_RTOL)
    for response in answers[1::2]:
        error = assert_openai_error(response, 400, "documents")
        assert "documents[1]" in error["message"], error
