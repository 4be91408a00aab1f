"""A small query/document set for checks that a lossy path (int8 weights, int8 codes) keeps retrieval, and the
measure they use: how many of each query's ten nearest documents it keeps.

The twelve natural pairs have one right answer each (float32 finds them all). The corpus adds the calibration
texts (short, on many topics) and mixed-length sentences over a 30-word vocabulary, from one word to past
MiniLM's 256-token window: near neighbours that differ by little, the hard case for a ranking."""

from __future__ import annotations

import numpy as np

from models.quantization import CALIBRATION_TEXTS
from testkit.sentences import make_sentences, short_sentences

DOCUMENTS = [
    "The cat sat on the warm windowsill all afternoon.",
    "Quarterly revenue grew by twelve percent thanks to cloud sales.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Our Kubernetes cluster autoscales GPU nodes during peak traffic.",
    "The museum opens a new exhibition of impressionist paintings.",
    "Regular exercise lowers the risk of heart disease.",
    "The train to Berlin was delayed by forty minutes.",
    "Quantum computers use qubits that can be in superposition.",
    "She planted tomatoes and basil in the community garden.",
    "The central bank raised interest rates to fight inflation.",
    "Embedding models map sentences to vectors for semantic search.",
    "The hiking trail climbs steeply to a glacier lake.",
]
QUERIES = [
    "Where did the cat rest?",
    "How much did sales increase?",
    "What ingredients does the baking recipe need?",
    "When does Kubernetes add GPU nodes?",
    "What is on show at the art museum?",
    "Why is working out healthy?",
    "Was the train to Germany on time?",
    "What do quantum machines compute with?",
    "What did she grow?",
    "What did the bank do about prices?",
    "How does semantic search work?",
    "Where does the mountain path lead?",
]
CORPUS = DOCUMENTS + CALIBRATION_TEXTS + make_sentences(60, seed=23)  # 166 documents, 1 to 700 words
CORPUS_QUERIES = QUERIES + [" ".join(s.split()[:6]) for s in make_sentences(40, seed=31)[5:33]]  # 40 queries
# The quantized-codes set (tests/unit/models/test_quantized_retrieval.py): 500 documents of 3 to 20 words and 60
# queries of 2 to 10 over the 30-word vocabulary, so that near neighbours differ by little: the hard case for a ranking.
SHORT_DOCUMENTS = short_sentences(500, seed=1, shortest=3, longest=20)
SHORT_QUERIES = short_sentences(60, seed=101, shortest=2, longest=10)
K = 10


def nearest(scores: np.ndarray, k: int = K) -> np.ndarray:
    """Each query's k best documents by a (queries, documents) score (higher is nearer), as (queries, k) indices."""
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def top_k_agreement(ours: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per query, the share of the reference's k nearest documents that ours also has among its k nearest."""
    return np.array([len(set(a) & set(b)) / len(b) for a, b in zip(ours, reference)])
