"""Padding and truncation that a `tokenizer.json` declares never reach Embento's calls of the Rust tokenizer.

all-MiniLM-L6-v2's own `tokenizer.json` pads and truncates every text to 128 tokens, and so does every
checkpoint saved from it. transformers resets both on each call; a direct call of the Rust tokenizer would
apply them. Every way text becomes token ids here (texts, pairs, counts, ids) must give what transformers'
tokenizer call gives, for an embedder, a reranker and a classifier built from those unmodified files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.errors import InvalidRequest
from config.settings import ModelConfig
from models.preprocessing.text_tokenizer import TextTokenizer
from testkit.sentences import make_sentences

CHECKPOINTS = ["minilm_path", "minilm_reranker_path", "minilm_classifier_path"]
TEXTS = ["hello", "Hello World, again!", "<unk> stays text", "é ü 漢字"] + make_sentences(12, seed=31)
QUERY = "how do platform teams keep their embeddings private"


@pytest.fixture(params=CHECKPOINTS)
def checkpoint(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(request.param)


@pytest.fixture
def tokenizers(checkpoint: Path):  # -> (TextTokenizer, the transformers tokenizer)
    from transformers import AutoTokenizer

    ours = TextTokenizer(checkpoint, ModelConfig(model_id=str(checkpoint)))
    return ours, AutoTokenizer.from_pretrained(str(checkpoint))


def test_the_checkpoints_declare_fixed_padding_and_truncation(checkpoint):
    declared = json.loads((checkpoint / "tokenizer.json").read_text())
    assert declared["padding"]["strategy"] == {"Fixed": 128}
    assert declared["truncation"]["max_length"] == 128
    assert max(len(text.split()) for text in TEXTS) > 300  # texts past 128 tokens, and past the model's limit


def test_texts_and_prompts(tokenizers):
    ours, reference = tokenizers
    limit = ours.max_input_tokens
    expected = reference(TEXTS, truncation=True, max_length=limit)["input_ids"]
    assert ours.encode_texts(TEXTS) == expected
    assert {len(ids) for ids in expected} >= {4, limit}  # short texts stay short; long ones are cut at the limit
    assert (
        ours.encode_texts(TEXTS, "query: ")
        == reference(["query: " + text for text in TEXTS], truncation=True, max_length=limit)["input_ids"]
    )


def test_token_counts(tokenizers):
    ours, reference = tokenizers
    counts = [ours.count_tokens(text) for text in TEXTS]
    assert counts == [len(ids) for ids in reference(TEXTS, add_special_tokens=False)["input_ids"]]
    assert min(counts) < 128 < max(counts)


def test_pairs(tokenizers):
    ours, reference = tokenizers
    limit = ours.max_input_tokens
    ids, segments = ours.encode_pairs(QUERY, TEXTS)
    expected = reference([QUERY] * len(TEXTS), TEXTS, truncation="only_second", max_length=limit)
    assert ids == expected["input_ids"] and segments == expected["token_type_ids"]
    longest = " ".join(["query"] * (limit - 4))  # [CLS] query [SEP] at least one document token [SEP]
    assert len(ours.encode_pairs(longest, ["a document"])[0][0]) == limit
    with pytest.raises(InvalidRequest, match=f"at most {limit - 4} tokens"):
        ours.encode_pairs(longest + " query", ["a document"])


def test_token_ids(tokenizers):
    ours, reference = tokenizers
    limit = ours.max_input_tokens
    bare = reference(TEXTS, add_special_tokens=False)["input_ids"]
    assert ours.encode_ids(bare) == reference(TEXTS, truncation=True, max_length=limit)["input_ids"]
