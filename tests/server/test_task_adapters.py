"""Task adapters through a real server (issue 50, deliverable 4): one base embedder and two peft LoRA adapters
(`testkit.adapters`), each request embedding through its own task in one process.

The same input under two tasks gives two different vectors, each equal to the reference (`tests.adapter_reference`:
the adapter merged into the base by peft) at cosine >= 0.9999, with the cache on (a task is part of the key);
concurrent requests of different tasks each get their own; Cohere's `input_type` and Jina's role-named
`retrieval.query` pick the `retrieval` adapter and its prompt; an unknown task is a 400 in OpenAI's shape
naming the valid ones while other requests are answered; GET /v1/models lists the tasks.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from testkit.adapters import V5_PROMPTS
from testkit.sentences import make_sentences
from tests.adapter_reference import adapter_vectors
from tests.asserts import assert_openai_error
from tests.conftest import MINILM
from tests.servers import TASKS_MODEL, SharedServer
from tests.tolerance import cosines

pytestmark = pytest.mark.server

MIN_COSINE = 0.9999
TEXTS = make_sentences()[:4]
# A request's task -> the adapter it runs through and the prompt that frames its texts.
REQUESTED = {
    "text-matching": ("text-matching", ""),
    "retrieval": ("retrieval", ""),
    "retrieval.query": ("retrieval", V5_PROMPTS["query"]),
    "retrieval.passage": ("retrieval", V5_PROMPTS["document"]),
}


@pytest.fixture(scope="module")
def server(kinds_and_dtypes_server: SharedServer) -> str:
    """The embedder with its adapters as TASKS_MODEL (cache on, `backend: auto`) and MiniLM, beside other files'
    models (tests/servers.py)."""
    return kinds_and_dtypes_server.url


@pytest.fixture(scope="module")
def http(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=120) as client:
        yield client


def embed(http: httpx.Client, texts: list[str], **fields: object) -> httpx.Response:
    return http.post("/v1/embeddings", json={"input": texts, "model": TASKS_MODEL, **fields})


def vectors(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([item["embedding"] for item in response.json()["data"]])


def expected(folder: Path, task: str, texts: list[str]) -> np.ndarray:
    adapter, prompt = REQUESTED[task]
    return adapter_vectors(folder, adapter, texts, prompt)


def test_the_same_input_under_two_tasks_gives_two_vectors_each_its_references(http, task_adapter_path):
    for _ in range(2):  # the second time from the cache: a task never shares another's cached vector
        matching = vectors(embed(http, TEXTS, task="text-matching"))
        retrieval = vectors(embed(http, TEXTS, task="retrieval"))
        assert cosines(matching, expected(task_adapter_path, "text-matching", TEXTS)).min() >= MIN_COSINE
        assert cosines(retrieval, expected(task_adapter_path, "retrieval", TEXTS)).min() >= MIN_COSINE
        assert cosines(matching, retrieval).max() < 0.99


def test_role_named_tasks_and_input_types_pick_the_adapter_and_its_prompt(http, task_adapter_path):
    query = vectors(embed(http, TEXTS, task="retrieval.query"))
    assert cosines(query, expected(task_adapter_path, "retrieval.query", TEXTS)).min() >= MIN_COSINE
    passage = vectors(embed(http, TEXTS, input_type="document"))  # Voyage's name, mapped as Jina's cards map it
    assert cosines(passage, expected(task_adapter_path, "retrieval.passage", TEXTS)).min() >= MIN_COSINE
    cohere = http.post(
        "/v2/embed",
        json={"texts": TEXTS, "model": TASKS_MODEL, "input_type": "search_query", "embedding_types": ["float"]},
    )
    assert cohere.status_code == 200, cohere.text
    got = np.array(cohere.json()["embeddings"]["float"])
    assert cosines(got, expected(task_adapter_path, "retrieval.query", TEXTS)).min() >= MIN_COSINE


def test_concurrent_requests_of_different_tasks_each_get_their_own(http, task_adapter_path):
    tasks = [*REQUESTED] * 4
    unknown = 5  # one request among them names a task the model lacks: refused alone

    def send(index: int) -> httpx.Response:
        texts = [f"{TEXTS[index % len(TEXTS)]} {index}", TEXTS[(index + 1) % len(TEXTS)]]
        task = "no-such-task" if index == unknown else tasks[index]
        return embed(http, texts, task=task)

    with ThreadPoolExecutor(len(tasks)) as pool:
        responses = list(pool.map(send, range(len(tasks))))
    for index, response in enumerate(responses):
        if index == unknown:
            error = assert_openai_error(response, 400, param="task")
            assert "no-such-task" in error["message"] and all(task in error["message"] for task in REQUESTED)
            continue
        texts = [f"{TEXTS[index % len(TEXTS)]} {index}", TEXTS[(index + 1) % len(TEXTS)]]
        assert cosines(vectors(response), expected(task_adapter_path, tasks[index], texts)).min() >= MIN_COSINE


def test_refusals_name_the_valid_tasks(http):
    error = assert_openai_error(embed(http, TEXTS, task="separation"), 400, param="task")
    assert "unknown task 'separation'" in error["message"] and "text-matching" in error["message"]
    error = assert_openai_error(embed(http, TEXTS), 400, param="task")
    assert "give task" in error["message"] and "retrieval.query" in error["message"]
    error = assert_openai_error(embed(http, TEXTS, input_type="clustering"), 400, param="task")
    assert "input_type 'clustering' names none of them" in error["message"]
    error = assert_openai_error(embed(http, TEXTS, task="retrieval.query", input_type="document"), 400)
    assert error["param"] == "input_type"
    plain = http.post("/v1/embeddings", json={"input": TEXTS, "model": MINILM, "task": "retrieval"})
    assert "has no task adapters" in assert_openai_error(plain, 400, param="task")["message"]


def test_the_model_list_names_the_tasks_and_why_torch_runs_them(http):
    cards = {card["id"]: card for card in http.get("/v1/models").json()["data"]}
    assert cards[TASKS_MODEL]["tasks"] == ["retrieval", "text-matching", "retrieval.query", "retrieval.passage"]
    assert cards[TASKS_MODEL]["backend"] == "torch"
    assert "task adapters" in cards[TASKS_MODEL]["backend_reason"]
    assert cards[MINILM]["tasks"] == []
