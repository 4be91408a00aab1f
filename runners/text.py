"""TextEmbedder: one BentoML model service for every configured text-embedding model.

The gateway sends token ids; BentoML's adaptive batching gathers rows from concurrent requests; this
service groups them by model, sorts by length, cuts passes by count and token budget, and answers in
request order. A pass that fails is bisected, so one bad input never fails the rows it shared a batch with.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import bentoml
import numpy as np
from pydantic import BaseModel

from models.batching import plan_batches, run_isolated
from models.config import get_config
from models.resolve import resolve_model
from models.text_encoder import TextEncoder
from runners.settings import DISPATCH_MAX_LATENCY_MS, MODEL_SERVICE_CONFIG, dispatch_max_rows

logger = logging.getLogger(__name__)
FAILED = np.empty(0, dtype=np.float32)  # an input the model could not embed; the gateway reports it


class TokenizedText(BaseModel):
    """One input row: which model, and the token ids to embed."""

    model: str
    input_ids: list[int]


@bentoml.service(name="TextEmbedder", **MODEL_SERVICE_CONFIG)
class TextEmbedder:
    def __init__(self) -> None:
        self.encoders: dict[str, TextEncoder] = {}
        for cfg in get_config().models:
            logger.info("loading %s as '%s'", cfg.model_id, cfg.served_model_name)
            self.encoders[cfg.served_model_name] = TextEncoder(resolve_model(cfg.model_id, cfg.revision), cfg)
        self.limits = {m.served_model_name: (m.batch_size, m.max_batch_tokens) for m in get_config().models}
        for name, encoder in self.encoders.items():  # fail at startup, not on the first request
            encoder.embed([[0, 0]])
            logger.info("model '%s' is warm: %s", name, encoder.info)

    @bentoml.api(batchable=True, max_batch_size=dispatch_max_rows(), max_latency_ms=DISPATCH_MAX_LATENCY_MS)
    def embed(self, rows: list[TokenizedText]) -> list[np.ndarray]:
        results: list[np.ndarray] = [FAILED] * len(rows)
        by_model: dict[str, list[int]] = defaultdict(list)
        for index, row in enumerate(rows):
            by_model[row.model].append(index)
        for name, indices in by_model.items():
            encoder = self.encoders.get(name)
            if encoder is None:
                logger.error("rows for unknown model '%s' reached the runner", name)
                continue
            batch_size, max_tokens = self.limits[name]
            lengths = [len(rows[i].input_ids) for i in indices]
            for chunk in plan_batches(lengths, batch_size, max_tokens):
                members = [indices[i] for i in chunk]
                outputs = run_isolated(lambda part: encoder.embed([rows[i].input_ids for i in part]), members)
                for index, output in zip(members, outputs):
                    results[index] = FAILED if isinstance(output, Exception) else output
        return results

    @bentoml.api
    def model_info(self) -> list[dict]:
        return [encoder.info.to_dict() for encoder in self.encoders.values()]
