"""Does quantized output cost the server anything? MiniLM on `/v1/embeddings` at 8 requests in flight × 10
sentences, `encoding_format` float, base64, int8 and binary, and Cohere's `/v2/embed` with int8 + ubinary:
sentences per second and response bytes, each format measured in alternating rounds of the same run.

    python bench/quantized.py [--seconds 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.server import closed_loop, free_port, start_server, stop_server  # noqa: E402
from testkit.sentences import make_sentences  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
IN_FLIGHT = 8
PER_REQUEST = 10
FORMATS = {
    "float": ("/v1/embeddings", {"encoding_format": "float"}),
    "base64": ("/v1/embeddings", {"encoding_format": "base64"}),
    "int8": ("/v1/embeddings", {"encoding_format": "int8"}),
    "binary": ("/v1/embeddings", {"encoding_format": "binary"}),
    "cohere int8+ubinary": ("/v2/embed", {"embedding_types": ["int8", "ubinary"]}),
}


def body(path: str, extra: dict, batch: list[str]) -> dict:
    if path == "/v2/embed":
        return {"model": MODEL, "texts": batch, "input_type": "search_document", **extra}
    return {"model": MODEL, "input": batch, **extra}


async def measure(url: str, path: str, extra: dict, corpus: list[str], seconds: float) -> tuple[float, float]:
    """(sentences per second, mean response bytes) with IN_FLIGHT closed-loop clients."""
    rate, sizes = await closed_loop(
        url, lambda batch: (path, body(path, extra, batch)), corpus, seconds, IN_FLIGHT, PER_REQUEST
    )
    return rate, statistics.fmean(sizes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    corpus = make_sentences(200, seed=3)[:190]
    port = free_port()
    server = start_server(port, EMBENTO_MODEL_ID=MODEL)
    try:
        url = f"http://127.0.0.1:{port}"
        asyncio.run(measure(url, *FORMATS["float"], corpus, 3.0))  # warm
        rates: dict[str, list[float]] = {name: [] for name in FORMATS}
        sizes: dict[str, float] = {}
        for _ in range(args.rounds):
            for name, (path, extra) in FORMATS.items():
                rate, size = asyncio.run(measure(url, path, extra, corpus, args.seconds))
                rates[name].append(rate)
                sizes[name] = size
        base = statistics.median(rates["float"])
        for name in FORMATS:
            rate = statistics.median(rates[name])
            print(
                f"{name:20s} {rate:8.1f} sent/s (median of {args.rounds})  x{rate / base:.2f} of float   "
                f"{sizes[name] / 1024:7.1f} KiB per response  x{sizes[name] / sizes['float']:.2f} of float"
            )
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
