"""Runs in the reference venv (.venv-reference), not in .venv: FlagEmbedding's BGEM3FlagModel on a BGE-M3 folder
(built in .venv by testkit/checkpoints.py), writing its dense, sparse and ColBERT outputs and its `compute_score`
for every (query, document) pair. Standalone: imports nothing of the project (this venv has none of it).

    python tests/reference/bge_m3.py CHECKPOINT TEXTS_JSON RESULT_NPZ RESULT_JSON [--weights 0.4 0.2 0.4]

TEXTS_JSON holds {"queries": [...], "documents": [...]}; the texts encoded are queries then documents. RESULT_NPZ
gets `dense` (texts, hidden), `colbert_<i>` (tokens - 1, hidden) and `scores_<mode>` (queries, documents) for
mode in dense, sparse, colbert, hybrid. RESULT_JSON gets `sparse`, one {token id: weight} per text, and
`sparse_margin`, the smallest |sparse_linear(h)| over every token of every text that is not cls, eos, pad or unk:
how far the relu's decisions stand from a coin toss.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from FlagEmbedding import BGEM3FlagModel

SCORE_KEYS = {"dense": "dense", "sparse": "sparse", "colbert": "colbert", "hybrid": "colbert+sparse+dense"}


def sparse_margin(model: BGEM3FlagModel, texts: list[str], limit: int) -> float:
    """The sparse head's raw outputs, read from FlagEmbedding's own modules, one text at a time (no padding)."""
    tokenizer = model.tokenizer
    dropped = {tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}
    margins = []
    with torch.no_grad():
        for text in texts:
            inputs = tokenizer(text, truncation=True, max_length=limit, return_tensors="pt")
            states = model.model.model(**inputs).last_hidden_state
            raw = model.model.sparse_linear(states)[0, :, 0]
            kept = [i for i, token in enumerate(inputs["input_ids"][0].tolist()) if token not in dropped]
            margins.append(float(raw[kept].abs().min()))
    return min(margins)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("texts", type=Path)
    parser.add_argument("result_npz", type=Path)
    parser.add_argument("result_json", type=Path)
    parser.add_argument("--weights", type=float, nargs=3, default=[0.4, 0.2, 0.4])
    args = parser.parse_args()
    texts = json.loads(args.texts.read_text())
    queries, documents = texts["queries"], texts["documents"]
    # FlagEmbedding silently draws new heads when these are missing: a reference of random heads is no reference.
    for head in ("colbert_linear.pt", "sparse_linear.pt"):
        assert (args.checkpoint / head).is_file(), f"{args.checkpoint} has no {head}"

    # FlagEmbedding truncates at 512 tokens unless told; the tiny model has fewer positions. BAAI's tokenizer
    # limit (8192) is its model's, so truncating at the tokenizer's limit is what BGE-M3 itself does.
    config = json.loads((args.checkpoint / "tokenizer_config.json").read_text())
    limit = int(config["model_max_length"])
    model = BGEM3FlagModel(
        str(args.checkpoint), use_fp16=False, devices="cpu", query_max_length=limit, passage_max_length=limit
    )
    encoded = model.encode(queries + documents, return_dense=True, return_sparse=True, return_colbert_vecs=True)
    # One pair a call: in a batch, FlagEmbedding pads passages' ColBERT vectors with zero rows that enter its max.
    pair_scores = {key: np.zeros((len(queries), len(documents)), dtype=np.float64) for key in SCORE_KEYS}
    for i, query in enumerate(queries):
        for j, document in enumerate(documents):
            result = model.compute_score([(query, document)], weights_for_different_modes=args.weights)
            for key, name in SCORE_KEYS.items():
                pair_scores[key][i, j] = result[name][0]

    np.savez(
        args.result_npz,
        dense=np.asarray(encoded["dense_vecs"], dtype=np.float32),
        **{f"colbert_{i}": np.asarray(v, dtype=np.float32) for i, v in enumerate(encoded["colbert_vecs"])},
        **{f"scores_{key}": matrix for key, matrix in pair_scores.items()},
    )
    sparse = [{token: float(weight) for token, weight in weights.items()} for weights in encoded["lexical_weights"]]
    args.result_json.write_text(
        json.dumps({"sparse": sparse, "sparse_margin": sparse_margin(model, queries + documents, limit)})
    )


if __name__ == "__main__":
    main()
