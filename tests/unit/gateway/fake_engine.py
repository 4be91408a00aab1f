"""A real `Engine` over fake model services: the served models' facts, a service that answers every kind, and
how a route answers a body (its status, JSON body and the rows it sent). The fixtures that build it are in
`conftest.py`; the wire adapters' tests and the engine's own use them."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from gateway.answering import answered
from gateway.engine import Engine
from models.base import ModelInfo, TokenizedText

EMBEDDER, RERANKER, CLASSIFIER, CLIP, SPLADE, COLPALI = "minilm", "reranker", "classifier", "clip", "splade", "colpali"
LABELS = ["negative", "neutral", "positive"]
DIMENSION = 384
VOCABULARY = 30522


def model(name: str, kind: str, **fields: Any) -> ModelInfo:
    facts = {
        "modalities": ["text"],
        "backend": "torch",
        "dimension": DIMENSION,
        "max_input_tokens": 256,
        "normalized": True,
        "device": "cpu",
        "dtype": "float32",
        **fields,
    }
    return ModelInfo(served_model_name=name, model_id=name, kind=kind, **facts)  # type: ignore[arg-type]


# In configuration order: the first is the default. CLIP's and ColPali's processors are not here: their
# requests are only ever refused before any work.
INFOS = {
    EMBEDDER: model(EMBEDDER, "embed"),
    RERANKER: model(RERANKER, "rerank", dimension=1, labels=["relevance"], activation="sigmoid"),
    CLASSIFIER: model(CLASSIFIER, "classify", dimension=3, labels=LABELS, activation="softmax"),
    CLIP: model(CLIP, "clip", modalities=["text", "image"], dimension=8),
    SPLADE: model(SPLADE, "sparse", dimension=VOCABULARY, normalized=False),
    COLPALI: model(COLPALI, "colpali", modalities=["text", "image"], dimension=8),
}
TEXT_MODELS = (EMBEDDER, RERANKER, CLASSIFIER, SPLADE)  # MiniLM's tokenizer serves them all


class FakeModelService:
    """Every model service at once: a vector per row for embedders (seeded by its tokens; a sparse model's
    entries are the row's token ids, weighted by their count), logits for scorers (one per label, from the
    row's length); it records every row it is sent."""

    def __init__(self) -> None:
        self.rows: list[TokenizedText] = []
        self.to_async = self

    async def embed(self, rows: list[TokenizedText]) -> list[np.ndarray]:
        self.rows += rows
        return [fake_output(row) for row in rows]

    async def score(self, rows: list[TokenizedText]) -> list[np.ndarray]:
        self.rows += rows
        return [(np.arange(len(INFOS[row.model].labels), dtype=np.float32) + 1) * row.length / 100 for row in rows]

    async def cancel(self, request_ids: list[str]) -> None:
        pass


def fake_output(row: TokenizedText) -> np.ndarray:
    """An embedder's output for a row: its vector (seeded by its tokens), a sparse model's entries, or for a
    row with spans (late chunking) one vector per span."""
    if INFOS[row.model].sparse:
        return _sparse(row)
    generator = np.random.default_rng(sum(row.input_ids))
    shape = DIMENSION if row.spans is None else (len(row.spans), DIMENSION)
    return generator.standard_normal(shape).astype(np.float32)


def _sparse(row: TokenizedText) -> np.ndarray:
    ids, counts = np.unique(row.input_ids, return_counts=True)
    return np.stack([ids, counts]).astype(np.float32)


Call = Callable[[Engine], Awaitable[Any]]
Serve = Callable[[Call], tuple[Any, FakeModelService]]


def answer(
    serve: Serve, adapter: Callable[[Engine, Any], Awaitable[Any]], body_model: type[BaseModel], body: Any
) -> tuple[int, Any, FakeModelService | None]:
    """What the route answers: its status and JSON body (the framework refuses a body its model rejects, with
    a 400 naming the field, `gateway.http.errors`), and the fake service if the body got that far."""
    try:
        request = body_model.model_validate(body)
    except ValidationError as exc:
        location = exc.errors()[0]["loc"]
        return 400, {"error": {"param": str(location[0]) if location else None}}, None
    result, service = serve(lambda engine: answered(adapter, engine, request))
    if isinstance(result, Response):  # an error, or an answer written straight to JSON
        return result.status_code, json.loads(result.body), service
    return 200, result.model_dump() if isinstance(result, BaseModel) else result, service


def assert_refused(outcome: tuple[int, Any, FakeModelService | None], status: int, param: str | None) -> str:
    """Refused with `status`, naming `param`, and no row sent: the message."""
    got, body, service = outcome
    assert got == status, body
    assert body["error"]["param"] == param, body
    assert service is None or not service.rows, "a refused request reached the model service"
    return body["error"].get("message", "")


class Passthrough(BaseModel):
    """For calls that take a query, not a body: `model_validate` hands the value through."""

    @classmethod
    def model_validate(cls, value: Any, **_: Any) -> Any:  # type: ignore[override]
        return value
