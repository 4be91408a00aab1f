"""In-process ceilings: the model called directly on the load generator's corpora, same thread count.

No HTTP, no queue, no serialization: what the model alone does on this machine, handed every in-flight
request's items at once (what a perfect batcher could gather).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from load import Scenario, corpus

Encode = Callable[[list[str]], object]


def measure(encode: Encode, scenario: Scenario, seconds: float) -> float:
    """Items per second, encoding `in_flight x per request` items per call, for `seconds`."""
    texts = corpus(2000, scenario.min_words, scenario.max_words)
    batch = scenario.in_flight * scenario.sentences_per_request
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        encode([texts[(done + i) % len(texts)] for i in range(batch)])
        done += batch
    return done / (time.perf_counter() - started)


def sentence_transformers_encoder(model_path: str, threads: int) -> Encode:
    """sentence-transformers' `encode`: length-sorted, 32 per pass."""
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(model_path, device="cpu")
    return model.encode


def engine_encoder(model_path: str, backend: str, dtype: str, threads: int) -> Encode:
    """Embento's own tokenizer and encoder for this backend: each call tokenized, sorted by length, shared
    across the cores and cut into passes exactly as the model service does it."""
    import torch

    from config.settings import ModelConfig
    from models.base import TokenizedText
    from models.batching import pass_overhead_tokens, plan_batches
    from models.inference.lanes import Lanes, shares_cores
    from models.inference.text_encoder import TextEncoder
    from models.preprocessing.text_tokenizer import TextTokenizer
    from runners.pool import pass_limits

    torch.set_num_threads(threads)
    cfg = ModelConfig(model_id=model_path, backend=backend, dtype=dtype)
    tokenizer, encoder = TextTokenizer(Path(model_path), cfg), TextEncoder(Path(model_path), cfg)
    overhead = pass_overhead_tokens(encoder.info.device)
    limits = pass_limits(cfg, Path(model_path), encoder.info)
    lanes = Lanes(threads if shares_cores(encoder.info) else 1)

    def encode(texts: list[str]) -> None:
        ids = tokenizer.encode_texts(texts)

        def run_part(part: list[int]) -> None:
            for chunk in plan_batches(
                [len(ids[i]) for i in part], limits.batch_size, limits.max_batch_tokens, overhead
            ):
                encoder.forward(TokenizedText.rows("m", [ids[part[i]] for i in chunk]))

        lanes.run(run_part, [len(i) for i in ids])

    return encode
