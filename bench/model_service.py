"""The text model service alone, without the gateway: what the hop and BentoML's serving cost.

    python bench/model_service.py [--calls 16 32] [--seconds 8]

Starts TextEmbedder (all-MiniLM-L6-v2) as its own server and sends it calls of N tokenized sentences, one
in flight, with the gateway's client and encoding (BentoML's pickle media type). Each call size is compared
with the in-process engine on the same calls, and with the matrix's 32-per-call ceiling. Under a closed
loop of 32 single-sentence clients the gateway sends calls of about 16.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ceiling  # noqa: E402
import load  # noqa: E402
from server import free_port, start_server, stop_server  # noqa: E402

from config.settings import ModelConfig  # noqa: E402
from models.base import TokenizedText  # noqa: E402
from models.preprocessing.text_tokenizer import TextTokenizer  # noqa: E402
from models.resolve import packaged_model_path  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


async def rows_per_second(url: str, token_ids: list[list[int]], per_call: int, seconds: float) -> float:
    from _bentoml_impl.client.http import AsyncHTTPClient

    from runners.model_services import TextEmbedder

    async with AsyncHTTPClient(
        url, media_type="application/vnd.bentoml+pickle", service=TextEmbedder, server_ready_timeout=0
    ) as client:
        sent, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            rows = [
                TokenizedText(model=MINILM, input_ids=token_ids[(sent + i) % len(token_ids)]) for i in range(per_call)
            ]
            await client.embed(rows=rows)
            sent += per_call
        return sent / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, nargs="+", default=[16, 32], help="sentences per call")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    path = packaged_model_path(MINILM)
    token_ids = TextTokenizer(path, ModelConfig(model_id=str(path))).encode_texts(load.corpus(2000, 8, 20))
    encode = ceiling.engine_encoder(str(path), "torch", "auto", len(os.sched_getaffinity(0)))
    port = free_port()
    server = start_server(port, service_name="TextEmbedder")
    try:
        url = f"http://127.0.0.1:{port}"
        asyncio.run(rows_per_second(url, token_ids, args.calls[0], 2.0))  # warm-up
        for per_call in args.calls:
            in_process = ceiling.measure(encode, load.Scenario("calls", per_call, 1, 8, 20), args.seconds / 2)
            served = asyncio.run(rows_per_second(url, token_ids, per_call, args.seconds))
            print(
                f"calls of {per_call:3d}: model service {served:6.1f} sent/s, in-process on the same calls "
                f"{in_process:6.1f}: {served / in_process:4.0%}",
                flush=True,
            )
        full = ceiling.measure(encode, load.Scenario("ceiling", 32, 1, 8, 20), args.seconds / 2)
        print(f"the matrix's ceiling (32 per call): {full:.1f} sent/s")
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
