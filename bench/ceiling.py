"""In-process ceiling: sentence-transformers `encode` on the load generator's corpora, same thread count.

    python bench/ceiling.py [--threads N] [--model-path PATH]

No HTTP, no queue, no serialization: what the model alone does on this machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from load import SCENARIOS, Scenario, corpus


def measure(encode: Callable[[list[str]], object], scenario: Scenario, seconds: float) -> float:
    """Items per second when every in-flight request's items are encoded at once (what a perfect batcher
    could gather), on the scenario's corpus, for `seconds`."""
    texts = corpus(2000, scenario.min_words, scenario.max_words)
    batch = scenario.in_flight * scenario.sentences_per_request
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        encode([texts[(done + i) % len(texts)] for i in range(batch)])
        done += batch
    return done / (time.perf_counter() - started)


def run_backend(model_path: str, backend: str, dtype: str, threads: int, seconds: float,
                scenarios: tuple[Scenario, ...]) -> dict[str, float]:
    """The same engine the server runs (Embento's tokenizer and encoder for this backend), in-process:
    each batch tokenized, sorted by length and cut into passes exactly as the model service cuts them."""
    from pathlib import Path

    import torch

    from models.base import TokenizedText
    from models.batching import pass_overhead_tokens, plan_batches
    from models.config import ModelConfig
    from models.text_encoder import TextEncoder
    from models.text_tokenizer import TextTokenizer

    torch.set_num_threads(threads)
    cfg = ModelConfig(model_id=model_path, backend=backend, dtype=dtype)
    tokenizer, encoder = TextTokenizer(Path(model_path), cfg), TextEncoder(Path(model_path), cfg)

    def encode(texts: list[str]) -> None:
        ids = tokenizer.encode_texts(texts)
        for part in plan_batches([len(i) for i in ids], cfg.batch_size, cfg.max_batch_tokens,
                                 pass_overhead_tokens(encoder.info.device)):
            encoder.forward(TokenizedText.rows("m", [ids[i] for i in part]))

    encode(corpus(64, 5, 40))  # warm-up
    figures = {}
    for scenario in scenarios:
        figures[scenario.name] = measure(encode, scenario, seconds)
        print(f"ceiling {scenario.name:40s} {figures[scenario.name]:9.1f} sent/s  "
              f"({backend}, {dtype}, threads {threads})")
    return figures


def run(model_path: str, threads: int, seconds: float, scenarios: tuple[Scenario, ...] = SCENARIOS) -> dict[str, float]:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(model_path, device="cpu")
    model.encode(corpus(64, 5, 40), batch_size=32)  # warm-up
    figures = {}
    for scenario in scenarios:
        rate = measure(model.encode, scenario, seconds)  # length-sorted, 32 per pass
        figures[scenario.name] = rate
        print(f"ceiling {scenario.name:40s} {rate:9.1f} sent/s  (threads {threads})")
    return figures


def main() -> None:
    from models.resolve import packaged_model_path

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    import torch

    path = args.model_path or str(packaged_model_path("sentence-transformers/all-MiniLM-L6-v2"))
    run(path, args.threads or torch.get_num_threads(), args.seconds)


if __name__ == "__main__":
    main()
