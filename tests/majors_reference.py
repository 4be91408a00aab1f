"""Checkpoints saved by each library major users have: transformers 4 with sentence-transformers 5 (saved in
the reference venv, tests/reference/majors.py) and transformers 5 with sentence-transformers 6 (saved here),
with what the saving libraries themselves answer for them. The Qwen3 embedders of both majors hold the same
weights and RoPE base (1e6): transformers 4 writes it as a top-level `rope_theta`, 5 in `rope_parameters`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from testkit.checkpoints import build_saved_qwen3_embedder
from testkit.sentences import make_sentences
from tests.hybrid_reference import run_reference

# Up to the embedder's 48 tokens: RoPE turns each position by base^(-2i/d), so the base shows most at the far
# positions, and a misread base would move every vector here.
TEXTS = make_sentences(10, seed=48)
PAIRS = [("how do teams keep data private", text) for text in TEXTS[:6]]
MAX_SEQ_LENGTH = 48


@dataclass(frozen=True)
class Majors:
    """The folders and the saving libraries' answers for TEXTS (vectors, SPLADE weights) and PAIRS (logits)."""

    qwen3_st6: Path
    qwen3_st6_vectors: np.ndarray
    qwen3_st5: Path
    qwen3_st5_vectors: np.ndarray
    reranker_st5: Path
    reranker_st5_logits: np.ndarray
    splade_st5: Path
    splade_st5_weights: np.ndarray


def build_majors(folder: Path, minilm: Path) -> Majors:
    from sentence_transformers import SentenceTransformer

    qwen3_st6 = build_saved_qwen3_embedder(folder / "st6")
    st6_vectors = SentenceTransformer(str(qwen3_st6), device="cpu", local_files_only=True).encode(TEXTS)
    spec = {
        "qwen3_source": str(qwen3_st6),
        "qwen3_target": str(folder / "st5" / "qwen3-embedder"),
        "max_seq_length": MAX_SEQ_LENGTH,
        "bert_vocab": str(minilm),
        "reranker_target": str(folder / "st5" / "reranker"),
        "splade_target": str(folder / "st5" / "splade"),
        "seed": 48,
        "texts": TEXTS,
        "pairs": PAIRS,
        "result": str(folder / "st5-reference.npz"),
    }
    (folder / "st5").mkdir()
    (folder / "majors.json").write_text(json.dumps(spec))
    run_reference("majors.py", folder / "majors.json")
    with np.load(spec["result"]) as answers:
        return Majors(
            qwen3_st6,
            st6_vectors,
            Path(spec["qwen3_target"]),
            answers["qwen3"],
            Path(spec["reranker_target"]),
            answers["reranker"],
            Path(spec["splade_target"]),
            answers["splade"],
        )
