"""The tokenizer under the wire formats (models/preprocessing/text_tokenizer.py), against transformers: Cohere's
input types onto prompts, the token-id refusal, pairs for TEI's /predict and tokens for /tokenize."""

from __future__ import annotations

import pytest

from config.errors import ConfigError, InvalidRequest
from config.settings import ModelConfig
from models.preprocessing.text_tokenizer import TextTokenizer
from tests.conftest import MINILM


@pytest.mark.parametrize(
    ("prompts", "expected"),
    [
        ({"query": "query: ", "passage": "passage: "}, {"search_query": "query", "search_document": "passage"}),
        (
            {
                "search_query": "search_query: ",
                "search_document": "search_document: ",
                "classification": "c: ",
                "clustering": "k: ",
            },
            {
                "search_query": "search_query",
                "search_document": "search_document",
                "classification": "classification",
                "clustering": "clustering",
            },
        ),
        ({}, {}),
    ],
)
def test_input_types_follow_the_prompt_names(minilm_path, prompts, expected):
    tokenizer = TextTokenizer(minilm_path, ModelConfig(model_id=MINILM, prompts=prompts))
    assert tokenizer.settings.input_type_prompts == expected
    for input_type, name in expected.items():
        assert tokenizer.prompt(None, input_type=input_type) == prompts[name]
    if "query" in prompts:  # prompt_name wins
        assert tokenizer.prompt("query", input_type="search_document") == prompts["query"]
    else:
        assert tokenizer.prompt(None, input_type="image") == ""  # no prompt of its own: the default (none)


def test_input_type_prompts_are_configurable_and_checked(minilm_path):
    cfg = ModelConfig(model_id=MINILM, prompts={"q": "Q: "}, input_type_prompts={"search_query": "q"})
    assert TextTokenizer(minilm_path, cfg).prompt(None, input_type="search_query") == "Q: "
    with pytest.raises(ConfigError, match="names prompts it lacks"):
        TextTokenizer(minilm_path, ModelConfig(model_id=MINILM, input_type_prompts={"search_query": "nope"}))


def test_token_ids_can_be_refused_and_the_error_names_tiktoken(minilm_path):
    tokenizer = TextTokenizer(minilm_path, ModelConfig(model_id=MINILM))
    with pytest.raises(InvalidRequest, match="check_embedding_ctx_length=False"):
        tokenizer.encode_ids([[100263]])
    refusing = TextTokenizer(minilm_path, ModelConfig(model_id=MINILM, allow_token_ids=False))
    with pytest.raises(InvalidRequest, match="allow_token_ids is false.*tiktoken"):
        refusing.encode_ids([[101, 7592, 102]])


def test_pair_lists_tokenize_as_cross_encoder(minilm_path):
    from transformers import AutoTokenizer

    tokenizer = TextTokenizer(minilm_path, ModelConfig(model_id=MINILM))
    reference = AutoTokenizer.from_pretrained(str(minilm_path))
    long = " ".join(["word"] * 300)
    ids, segments = tokenizer.encode_pair_list(["a question", long, "alone"], ["an answer", long, None])
    expected = [
        reference("a question", "an answer"),
        reference(long, long, truncation=True, max_length=256),
        reference("alone"),
    ]
    assert ids == [e["input_ids"] for e in expected]
    assert segments == [e["token_type_ids"] for e in expected]
    assert len(ids[1]) == 256


def test_tokens_carry_the_tokenizers_offsets(minilm_path):
    from transformers import AutoTokenizer

    tokenizer = TextTokenizer(minilm_path, ModelConfig(model_id=MINILM))
    reference = AutoTokenizer.from_pretrained(str(minilm_path))
    text = "Ünïcode, offsets!"
    encoded = reference(text, return_offsets_mapping=True)
    tokens = tokenizer.tokens(text)
    assert [t.id for t in tokens] == encoded["input_ids"]
    assert [(t.start, t.stop) for t in tokens[1:-1]] == encoded["offset_mapping"][1:-1]
    assert tokens[0].special and tokens[0].start is None and tokens[0].text == "[CLS]"
    decoded = reference.decode(encoded["input_ids"], skip_special_tokens=True)
    assert tokenizer.decode([encoded["input_ids"]]) == [decoded]
