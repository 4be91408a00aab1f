"""The model-running core every runner shares.

A runner's batch holds rows from many requests and several models. `ModelPool` groups them by model,
sorts by length, cuts passes by count and token budget, and answers in request order. A pass that fails
is bisected, so one bad input never fails the rows it shared a batch with.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from models.base import Row, TokenModel
from models.batching import plan_batches, run_isolated
from models.config import ModelConfig
from models.errors import EmbentoError
from models.resolve import resolve_model
from runners.settings import stop_server

logger = logging.getLogger(__name__)
FAILED = np.empty(0, dtype=np.float32)  # an input the model could not run; the gateway reports it
Loader = Callable[[Path, ModelConfig], TokenModel]


class ModelPool:
    def __init__(self, load: Loader, configs: list[ModelConfig]) -> None:
        # All torch work happens on this one thread. OpenMP gives every calling thread its own team of
        # workers; a second team (say, warm-up on the main thread, forwards on BentoML's worker threads)
        # oversubscribes the cores, and libgomp then stops spinning: a MiniLM forward took 2x as long.
        self._torch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch")
        try:
            self.models: dict[str, TokenModel] = self._torch_thread.submit(self._load_all, load, configs).result()
        except Exception as exc:  # any cause: loading again would meet it again
            stop_server(exc.message if isinstance(exc, EmbentoError) else f"a model failed to load: {exc!r}")
            raise
        self._limits = {c.served_model_name: (c.batch_size, c.max_batch_tokens) for c in configs}

    @staticmethod
    def _load_all(load: Loader, configs: list[ModelConfig]) -> dict[str, TokenModel]:
        models = {}
        for cfg in configs:
            logger.info("loading %s as '%s'", cfg.model_id, cfg.served_model_name)
            model = load(resolve_model(cfg.model_id, cfg.revision), cfg)
            logger.info("model '%s' is warm: %s", cfg.served_model_name, model.info)
            models[cfg.served_model_name] = model
        return models

    def infos(self) -> list[dict]:
        return [model.info.to_dict() for model in self.models.values()]

    async def run(self, rows: list[Row]) -> list[np.ndarray]:
        return await asyncio.get_running_loop().run_in_executor(self._torch_thread, self._run_rows, rows)

    def _run_rows(self, rows: list[Row]) -> list[np.ndarray]:
        results: list[np.ndarray] = [FAILED] * len(rows)
        by_model: dict[str, list[int]] = defaultdict(list)
        for index, row in enumerate(rows):
            by_model[row.model].append(index)
        for name, indices in by_model.items():
            outputs = self._run_model(name, [rows[i] for i in indices])
            for index, output in zip(indices, outputs):
                results[index] = FAILED if isinstance(output, Exception) else output
        return results

    def _run_model(self, name: str, rows: list[Row]) -> list[np.ndarray | Exception]:
        """One model's rows: passes cut by count and token budget, each bisected if it fails."""
        model = self.models.get(name)
        if model is None:
            logger.error("rows for unknown model '%s' reached the runner", name)
            return [LookupError(name)] * len(rows)
        batch_size, max_tokens = self._limits[name]
        outputs: list[np.ndarray | Exception] = [FAILED] * len(rows)
        for chunk in plan_batches([row.length for row in rows], batch_size, max_tokens):
            done = run_isolated(lambda part: model.forward([rows[i] for i in part]), chunk)
            for index, output in zip(chunk, done):
                outputs[index] = output
        return outputs
