"""What served answers are compared with, computed outside the server (a checkpoint run directly by
transformers, or by Embento's model classes alone), and the inputs that the model-family tests and their
server counterparts share."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from models.base import TokenizedText
from testkit.sentences import make_sentences

if TYPE_CHECKING:
    from models.inference.text_scorer import TextScorer
    from models.preprocessing.text_tokenizer import TextTokenizer

TEXTS = make_sentences(30, seed=19)  # one word to far past the tiny models' limits
QUERY = "quick brown fox"
INSTRUCTION = "Given a question about animals, find passages that answer it"


def transformers_embeddings(path: Path, texts: list[str], pooling: str, normalize: bool) -> np.ndarray:
    """A plain BERT checkpoint's embeddings by transformers alone: `cls` or mean pooling, unit length or not."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path)).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    if pooling == "cls":
        pooled = hidden[:, 0]
    else:
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
    if normalize:
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
    return pooled.numpy()


def pair_logits(
    tokenizer: TextTokenizer, scorer: TextScorer, documents: list[str], instruction: str | None = None
) -> np.ndarray:
    """A causal-LM reranker's raw scores of (QUERY, document) pairs, by Embento's scorer without the server."""
    ids, segments = tokenizer.encode_pairs(QUERY, documents, instruction)
    assert segments is None and max(map(len, ids)) <= scorer.info.max_input_tokens
    return scorer.forward(TokenizedText.rows("m", ids))[:, 0]
