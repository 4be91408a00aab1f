"""The real `Engine` with a fake model service and MiniLM's real tokenizer, called with queries rather than a wire
family's bodies: what it refuses before any row reaches a model service, tokenize and decode. Each wire family's
adapter has its own file in tests/unit/gateway/wire/ over the same engine; the real server keeps one smoke test
per route family."""

from __future__ import annotations

import pytest

from gateway.queries import DecodeQuery, EmbedQuery, InputItem, RankQuery, TokenizeQuery, mixed_input
from tests.unit.gateway.fake_engine import (
    CLIP,
    EMBEDDER,
    Passthrough,
    answer,
    assert_refused,
)


def test_a_route_without_room_for_the_shape_refuses_before_any_work(serve):
    query = EmbedQuery(items=(InputItem("text", "a"),), model=EMBEDDER, shapes=frozenset({"sparse"}))
    outcome = answer(serve, lambda engine, q: engine.embed(q), Passthrough, query)
    assert "which this route cannot answer" in assert_refused(outcome, 400, "model")


def test_a_mixed_input_is_refused_by_a_model_that_embeds_one_part_per_input(serve):
    parts = (InputItem("text", "a red square"), InputItem("image", "data:image/png;base64,AAAA"))
    query = EmbedQuery(items=(InputItem("text", "a"), mixed_input(parts)), model=CLIP)
    outcome = answer(serve, lambda engine, q: engine.embed(q), Passthrough, query)
    message = assert_refused(outcome, 400, "input")
    assert "input[1] holds 2 parts" in message and "one text or one image per input" in message
    assert mixed_input(parts[:1]) == parts[0]  # one part is a plain input


# Tokenize and decode: through the engine, checked like the other text lists
def test_tokenize_and_decode(serve):
    tokens, _ = serve(lambda engine: engine.tokenize(TokenizeQuery(texts=("a fox",))))
    assert [t.text for t in tokens.tokens[0]] == ["[CLS]", "a", "fox", "[SEP]"]
    texts, _ = serve(lambda engine: engine.decode(DecodeQuery(ids=((101, 1037, 4419, 102),))))
    assert texts == ["a fox"]


@pytest.mark.parametrize(
    ("call", "param"),
    [
        (lambda engine: engine.tokenize(TokenizeQuery(texts=())), "inputs"),
        (
            lambda engine: engine.tokenize(
                TokenizeQuery(texts=("a", "")),
            ),
            "inputs",
        ),
        (lambda engine: engine.tokenize(TokenizeQuery(texts=("a",), model=CLIP)), "model"),
        (lambda engine: engine.decode(DecodeQuery(ids=())), "ids"),
        (lambda engine: engine.decode(DecodeQuery(ids=((1,),) * 2049)), "ids"),
    ],
)
def test_bad_tokenize_and_decode_queries(serve, call, param):
    outcome = answer(serve, lambda engine, _: call(engine), Passthrough, None)
    assert_refused(outcome, 400, param)


def test_rank_query_checks_the_instruction_length(serve):
    query = RankQuery(query="q", documents=("a",), instruction="i" * 200_001)
    outcome = answer(serve, lambda engine, q: engine.rank(q), Passthrough, query)
    assert_refused(outcome, 400, "instruction")
