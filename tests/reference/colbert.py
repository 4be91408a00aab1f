"""Runs in the reference venv (.venv-reference), not in .venv: PyLate builds a ColBERT checkpoint with its own save
path from a tiny BERT folder, loads it back from disk, and writes its query and document vectors and its MaxSim
scores. Standalone: imports nothing of the project (this venv has none of it).

    python tests/reference/colbert.py BERT_FOLDER CHECKPOINT_OUT TEXTS_JSON RESULT_NPZ
        [--embedding-size 16] [--query-length 12] [--document-length 24] [--seed 0]

TEXTS_JSON holds {"queries": [...], "documents": [...]}. RESULT_NPZ gets `query_<i>` (query_length, dim) and
`document_<j>` (tokens, dim) float32 arrays and `scores` (queries, documents).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from pylate import models, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="a plain transformers BERT folder (random weights)")
    parser.add_argument("checkpoint", type=Path, help="where PyLate saves the ColBERT checkpoint")
    parser.add_argument("texts", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--embedding-size", type=int, default=16)
    parser.add_argument("--query-length", type=int, default=12)
    parser.add_argument("--document-length", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    texts = json.loads(args.texts.read_text())

    # PyLate draws the Dense projection and the rows of its added [Q]/[D] tokens at random: seeded, so the
    # checkpoint is the same every session.
    torch.manual_seed(args.seed)
    models.ColBERT(
        str(args.base),
        embedding_size=args.embedding_size,
        query_length=args.query_length,
        document_length=args.document_length,
        device="cpu",
    ).save(str(args.checkpoint))
    # The reference reads the saved files, the same ones the server loads.
    model = models.ColBERT(str(args.checkpoint), device="cpu")
    queries = [np.asarray(v, dtype=np.float32) for v in model.encode(texts["queries"], is_query=True)]
    documents = [np.asarray(v, dtype=np.float32) for v in model.encode(texts["documents"], is_query=False)]
    # One pair a call: colbert_scores takes equal-length stacks only, and zero rows padded in would enter the max.
    matrix = np.array(
        [[float(scores.colbert_scores(q[None], d[None])[0, 0]) for d in documents] for q in queries], dtype=np.float32
    )
    np.savez(
        args.result,
        scores=matrix,
        **{f"query_{i}": v for i, v in enumerate(queries)},
        **{f"document_{j}": v for j, v in enumerate(documents)},
    )


if __name__ == "__main__":
    main()
