"""The fake-service engine's fixtures (`fake_engine.py`): MiniLM's real tokenizer, and a fresh warm engine per call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from config.settings import EmbentoConfig, ModelConfig
from gateway.cache.tiers import EmbeddingCache
from gateway.engine import Engine
from gateway.inputs.preprocessors import Preprocessors
from gateway.queue.model_calls import ModelCalls
from gateway.served.registry import ModelRegistry
from gateway.served.warmup import Warming
from models.preprocessing.text_tokenizer import TextTokenizer
from tests.unit.gateway.fake_engine import EMBEDDER, INFOS, TEXT_MODELS, Call, FakeModelService, Serve


@pytest.fixture(scope="session")
def tokenizers(minilm_path: Path) -> dict[str, TextTokenizer]:
    cfg = ModelConfig(model_id=str(minilm_path))
    return {name: TextTokenizer(minilm_path, cfg, INFOS[name].kind) for name in TEXT_MODELS}  # one checkpoint's


@pytest.fixture
def serve(tokenizers: dict[str, TextTokenizer]) -> Serve:
    """Runs `call(engine)` on a fresh engine, warm (MiniLM calibrated through the fake service); returns its
    answer and the service, whose rows are those the call sent."""

    def run(call: Call) -> tuple[Any, FakeModelService]:
        async def scenario() -> tuple[Any, FakeModelService]:
            config = EmbentoConfig(models=[ModelConfig(model_id=name) for name in INFOS])
            service = FakeModelService()
            registry = ModelRegistry({name: info.kind for name, info in INFOS.items()}, infos=dict(INFOS), done=True)
            calls = ModelCalls(config, registry.kinds.values(), {"TextEmbedder": service, "Reranker": service}, 64)
            preprocessors, cache = Preprocessors(by_model=dict(tokenizers)), EmbeddingCache(config.cache)
            engine = Engine(config, registry, calls, preprocessors, fetcher=None, cache=cache)
            warming = Warming(calls, preprocessors, cache, engine.limits, config.model)
            registry.served(EMBEDDER, INFOS[EMBEDDER], await warming(INFOS[EMBEDDER]))  # as the reconciler serves it
            service.rows.clear()
            return await call(engine), service

        return asyncio.run(scenario())

    return run
