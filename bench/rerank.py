"""Rerank throughput: the pieces the benchmark matrix needs (checkpoint, requests, in-process ceiling).

The model has the shape of cross-encoder/ms-marco-MiniLM-L-6-v2 (the common small reranker): the packaged
all-MiniLM-L6-v2 encoder under a fresh one-logit head, built here because the Hub is out of reach. Scores
are meaningless; the compute is a real reranker's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

NAME = "minilm-l6-reranker"
QUERY = "how do platform teams keep embedding data private and costs fixed"


def build_reranker(folder: Path) -> Path:
    import shutil

    from transformers import BertForSequenceClassification

    from models.resolve import packaged_model_path

    minilm = packaged_model_path("sentence-transformers/all-MiniLM-L6-v2")
    BertForSequenceClassification.from_pretrained(str(minilm), num_labels=1).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm / name, folder / name)
    return folder


def ceiling_encoder(folder: Path, threads: int) -> Callable[[list[str]], object]:
    """CrossEncoder.predict with its defaults (length-sorted, 32 pairs per pass) on every in-flight
    request's pairs at once."""
    import torch
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(threads)
    model = CrossEncoder(str(folder), device="cpu", local_files_only=True)
    return lambda documents: model.predict([(QUERY, d) for d in documents])


def rerank_body(documents: list[str]) -> dict:
    return {"model": NAME, "query": QUERY, "documents": documents}
