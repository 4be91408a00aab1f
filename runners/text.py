"""TextEmbedder: one BentoML model service for every configured text-embedding model.

The gateway sends token ids; BentoML's adaptive batching gathers rows from concurrent requests; this
service groups them by model, sorts by length, cuts passes by count and token budget, and answers in
request order. A pass that fails is bisected, so one bad input never fails the rows it shared a batch with.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import bentoml
import numpy as np
from pydantic import BaseModel

from models.base import Embedder
from models.batching import plan_batches, run_isolated
from models.config import get_config
from models.resolve import resolve_model
from models.text_encoder import TextEncoder
from runners.dispatch import make_work_conserving
from runners.settings import DISPATCH_MAX_LATENCY_MS, MODEL_SERVICE_CONFIG, dispatch_max_rows

logger = logging.getLogger(__name__)
FAILED = np.empty(0, dtype=np.float32)  # an input the model could not embed; the gateway reports it
make_work_conserving()


class TokenizedText(BaseModel):
    """One input row: which model, and the token ids to embed."""

    model: str
    input_ids: list[int]


@bentoml.service(name="TextEmbedder", **MODEL_SERVICE_CONFIG)
class TextEmbedder:
    def __init__(self) -> None:
        # All torch work happens on this one thread. OpenMP gives every calling thread its own team of
        # workers; a second team (say, warm-up on the main thread, forwards on BentoML's worker threads)
        # oversubscribes the cores, and libgomp then stops spinning: a MiniLM forward took 2x as long.
        self._torch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch")
        self.encoders: dict[str, Embedder] = self._torch_thread.submit(self._load).result()
        self.limits = {m.served_model_name: (m.batch_size, m.max_batch_tokens) for m in get_config().models}

    @staticmethod
    def _load() -> dict[str, Embedder]:
        encoders = {}
        for cfg in get_config().models:
            logger.info("loading %s as '%s'", cfg.model_id, cfg.served_model_name)
            encoder = TextEncoder(resolve_model(cfg.model_id, cfg.revision), cfg)
            encoder.embed([[0, 0]])  # fail at startup, not on the first request
            logger.info("model '%s' is warm: %s", cfg.served_model_name, encoder.info)
            encoders[cfg.served_model_name] = encoder
        return encoders

    @bentoml.api(batchable=True, max_batch_size=dispatch_max_rows(), max_latency_ms=DISPATCH_MAX_LATENCY_MS)
    async def embed(self, rows: list[TokenizedText]) -> list[np.ndarray]:
        return await asyncio.get_running_loop().run_in_executor(self._torch_thread, self._embed_rows, rows)

    def _embed_rows(self, rows: list[TokenizedText]) -> list[np.ndarray]:
        results: list[np.ndarray] = [FAILED] * len(rows)
        by_model: dict[str, list[int]] = defaultdict(list)
        for index, row in enumerate(rows):
            by_model[row.model].append(index)
        for name, indices in by_model.items():
            outputs = self._embed_for_model(name, [rows[i].input_ids for i in indices])
            for index, output in zip(indices, outputs):
                results[index] = FAILED if isinstance(output, Exception) else output
        return results

    def _embed_for_model(self, name: str, inputs: list[list[int]]) -> list[np.ndarray | Exception]:
        """One model's rows: passes cut by count and token budget, each bisected if it fails."""
        encoder = self.encoders.get(name)
        if encoder is None:
            logger.error("rows for unknown model '%s' reached the runner", name)
            return [LookupError(name)] * len(inputs)
        batch_size, max_tokens = self.limits[name]
        outputs: list[np.ndarray | Exception] = [FAILED] * len(inputs)
        for chunk in plan_batches([len(ids) for ids in inputs], batch_size, max_tokens):
            done = run_isolated(lambda part: encoder.embed([inputs[i] for i in part]), chunk)
            for index, output in zip(chunk, done):
                outputs[index] = output
        return outputs

    @bentoml.api
    def model_info(self) -> list[dict]:
        return [encoder.info.to_dict() for encoder in self.encoders.values()]
