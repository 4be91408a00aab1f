"""TEI's adapter without a server: each body's query, the root's dispatch, each answer written from a hand-built
result; and through the real engine over a fake model service (`tests/unit/gateway/fake_engine.py`) every bad body
the server's tests sent, refused with its status and the field it names before any row reaches a model service,
and the root answering as the route it dispatches to."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from config.errors import InvalidRequest
from config.settings import EmbentoConfig
from gateway.queries import ClassifyQuery, DecodeQuery, EmbedQuery, InputItem, RankQuery, TokenizeQuery
from gateway.results import Classified, Embeddings, Ranking, Tokens
from gateway.validation import check_embed
from gateway.wire import openai, tei
from gateway.wire.common import json_answer
from models.base import ModelInfo, Truncation
from models.kinds import spec
from models.preprocessing.text_tokenizer import Token
from tests.unit.gateway.fake_engine import (
    CLASSIFIER,
    CLIP,
    COLPALI,
    EMBEDDER,
    INFOS,
    LABELS,
    RERANKER,
    SPLADE,
    answer,
    assert_refused,
)


def info(name: str = "m", kind: str = "embed", dimension: int = 2, **fields) -> ModelInfo:
    return ModelInfo(
        served_model_name=name,
        model_id=name,
        kind=kind,  # type: ignore[arg-type]
        modalities=["text"],
        backend="torch",
        dimension=dimension,
        max_input_tokens=16,
        normalized=True,
        device="cpu",
        dtype="float32",
        **fields,
    )


# Body -> query
def test_embed_normalizes_by_default_and_takes_every_input_form():
    query = tei.embed_query(tei.TeiEmbedRequest(inputs="a"))
    assert query == EmbedQuery(
        items=(InputItem("text", "a"),),
        items_param="inputs",
        shapes=frozenset({"dense", "multi-vector"}),
        normalize=True,
        truncation=Truncation(True, None),
    )
    assert tei.embed_query(tei.TeiEmbedRequest(inputs=[[1, 2], [3]])).items == (
        InputItem("text", [1, 2]),
        InputItem("text", [3]),
    )
    assert tei.embed_query(tei.TeiEmbedRequest(inputs=[1, 2])).items == (InputItem("text", [1, 2]),)
    assert tei.embed_query(tei.TeiEmbedRequest(inputs=[{"image": "x"}, "b"])).items == (
        InputItem("image", "x"),
        InputItem("text", "b"),
    )
    kept = tei.embed_query(
        tei.TeiEmbedRequest.model_validate(
            {
                "inputs": [],
                "normalize": False,
                "dimensions": 64,
                "prompt_name": "query",
                "model": "m",
                "truncate": False,
                "truncation_direction": "Left",
            }
        )
    )
    assert kept == EmbedQuery(
        items=(),
        items_param="inputs",
        model="m",
        shapes=frozenset({"dense", "multi-vector"}),
        dimensions=64,
        normalize=False,
        prompt_name="query",
        truncation=Truncation(False, "left"),
    )


def test_sparse_query_asks_for_the_sparse_capability():
    query = tei.sparse_query(tei.SparseEmbeddingRequest(inputs="a fox", max_active_dims=5, instruction="find"))
    assert query == EmbedQuery(
        items=(InputItem("text", "a fox"),),
        items_param="inputs",
        capability="embed_sparse",
        representations=("sparse",),
        max_active_dims=5,
        instruction="find",
        truncation=Truncation(True, None),
    )


def test_rerank_query_ranks_the_texts_under_teis_controls():
    body = tei.TeiRerankRequest(
        query="q",
        texts=["a", "b"],
        top_n=1,
        raw_scores=True,
        return_text=True,
        truncation_direction="Left",
        model="r",
        instruction="find",
    )
    assert tei.rerank_query(body) == RankQuery(
        query="q",
        documents=("a", "b"),
        documents_param="texts",
        model="r",
        top_n=1,
        activation="identity",
        instruction="find",
        truncation=Truncation(True, "left"),
    )


@pytest.mark.parametrize(
    ("inputs", "texts", "pairs", "batch"),
    [
        ("a", ("a",), (None,), False),
        (["q", "d"], ("q",), ("d",), False),
        (["a"], ("a",), (None,), False),
        ([["q", "d"], ["e"]], ("q", "e"), ("d", None), True),
        ([], (), (), False),  # refused by the engine's check, which names `inputs`
        ("", (), (), False),
    ],
)
def test_predict_takes_a_text_a_pair_or_a_batch(inputs, texts, pairs, batch):
    body = tei.TeiPredictRequest(inputs=inputs, model="c")
    assert tei.predict_query(body) == ClassifyQuery(
        texts=texts, pairs=pairs, model="c", texts_param="inputs", truncation=Truncation(True, None)
    )
    assert body.is_batch() is batch


def test_raw_scores_win_over_the_tasks_activation():
    assert tei.predict_query(tei.TeiPredictRequest(inputs="a"), "softmax").activation == "softmax"
    assert tei.predict_query(tei.TeiPredictRequest(inputs="a", raw_scores=True), "softmax").activation == "identity"


@pytest.mark.parametrize("inputs", [["a", "b", "c"], [["a", "b", "c"]], [["a", ""]], [[]], [["a"], []]])
def test_predict_refuses_what_is_neither_a_text_nor_a_pair(inputs):
    with pytest.raises(InvalidRequest, match=r"inputs\[\d\] must be one non-empty text or a pair of them") as caught:
        tei.predict_query(tei.TeiPredictRequest(inputs=inputs))
    assert caught.value.param == "inputs"


def test_similarity_is_a_dense_only_embed_of_the_source_then_the_others():
    body = tei.TeiSimilarityRequest.model_validate(
        {
            "inputs": {"source_sentence": "s", "sentences": ["a", "b"]},
            "parameters": {"truncate": True, "prompt_name": "query"},
        }
    )
    assert tei.similarity_query(body) == EmbedQuery(
        items=tuple(InputItem("text", t) for t in "sab"),
        items_param="inputs",
        item_params=("inputs.source_sentence", "inputs.sentences[0]", "inputs.sentences[1]"),
        shapes=frozenset({"dense"}),
        prompt_name="query",
        truncation=Truncation(True, None),
    )
    with pytest.raises(InvalidRequest, match="inputs.sentences must not be empty"):
        tei.similarity_query(
            tei.TeiSimilarityRequest.model_validate({"inputs": {"source_sentence": "s", "sentences": []}})
        )


def test_tokenize_and_decode_queries():
    assert tei.tokenize_query(
        tei.TeiTokenizeRequest(inputs="a", add_special_tokens=False, prompt_name="q")
    ) == TokenizeQuery(texts=("a",), add_special_tokens=False, prompt_name="q", texts_param="inputs")
    assert tei.decode_query(tei.TeiDecodeRequest(ids=[101, 102])).ids == ((101, 102),)
    assert tei.decode_query(tei.TeiDecodeRequest(ids=[[1], [2, 3]], skip_special_tokens=False)) == DecodeQuery(
        ids=((1,), (2, 3)), skip_special_tokens=False
    )
    assert tei.decode_query(tei.TeiDecodeRequest(ids=[])).ids == ()  # refused by the engine's check


def test_a_bad_embed_input_gets_one_clear_message():
    with pytest.raises(ValidationError, match="inputs must be a string, a list of strings or typed items"):
        tei.TeiEmbedRequest.model_validate({"inputs": 5})


# The root: by the body first, then by the kind of the model asked for
@pytest.mark.parametrize(
    ("body", "kind", "task"),
    [
        ({"inputs": "a"}, "embed", "embed"),
        ({"inputs": "a", "normalize": True, "truncate": True}, "embed", "embed"),  # feature_extraction
        ({"query": "q", "texts": ["a"]}, "embed", "rerank"),
        ({"query": "q", "documents": ["a"]}, "embed", "rerank"),
        ({"texts": ["a"]}, "classify", "rerank"),
        ({"inputs": {"source_sentence": "a", "sentences": ["b"]}}, "classify", "similarity"),
        ({"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": {}}, "embed", "similarity"),
        ({"inputs": "a", "parameters": {}}, "embed", "text-classification"),
        ({"inputs": "a", "parameters": {"top_k": 2}}, "embed", "text-classification"),
        ({"inputs": "a", "parameters": {"top_k": 1, "function_to_apply": "none"}}, "embed", "text-classification"),
        ({"inputs": "a", "parameters": {"truncate": True}}, "embed", "embed"),  # not the classification task's
        ({"inputs": "a"}, "classify", "predict"),
        ({"inputs": "a"}, "sparse", "embed_sparse"),
        ({"inputs": "a"}, "clip", "embed"),
        ({"inputs": "a"}, None, "embed"),
    ],
)
def test_root_task(body, kind, task):
    assert tei.root_task(tei.TeiRootRequest.model_validate(body), spec(kind) if kind else None) == task


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"inputs": "a", "parameters": {"top_k": "two"}}, "top_k: Input should be a valid integer"),
        ({"inputs": {"source_sentence": 3}}, "inputs.source_sentence: Input should be a valid string"),
        ({"inputs": None}, "inputs: "),
    ],
)
def test_root_names_the_field_of_a_bad_body(body, message):
    root = tei.TeiRootRequest.model_validate(body)
    task = tei.root_task(root, spec("embed"))
    model = {
        "text-classification": tei.TextClassificationParameters,
        "similarity": tei.TeiSimilarityRequest,
        "embed": tei.TeiEmbedRequest,
    }[task]
    fields = root.model_dump(exclude_unset=True)
    with pytest.raises(InvalidRequest) as caught:
        tei.parsed(model, fields.get("parameters") if model is tei.TextClassificationParameters else fields)
    assert caught.value.message.startswith(message) and caught.value.param == message.split(".")[0].split(":")[0]


# Result -> answer
def embeddings(query: EmbedQuery, outputs: list[np.ndarray], model: ModelInfo | None = None) -> Embeddings:
    return Embeddings(query, model or info(dimension=outputs[0].shape[-1]), outputs, tokens=3)


def test_embed_answer_is_a_bare_list_of_vectors_or_of_token_vectors():
    vectors = [np.array([3.0, 4.0], dtype=np.float32)]
    assert json.loads(json_answer(tei.embed_answer(embeddings(EmbedQuery(items=()), vectors))).body) == [[3.0, 4.0]]
    tokens = [np.ones((3, 2), dtype=np.float32)]
    multi = embeddings(EmbedQuery(items=()), tokens, info(kind="colpali"))
    assert json.loads(json_answer(tei.embed_answer(multi)).body) == [[[1.0, 1.0]] * 3]


def test_sparse_answer_keeps_the_largest_entries():
    entries = np.array([[3, 7, 9], [0.5, 2.0, 1.0]], dtype=np.float32)
    result = embeddings(EmbedQuery(items=(), max_active_dims=2), [entries], info(kind="sparse", dimension=30))
    answer = json.loads(json_answer(tei.sparse_answer(result)).body)
    assert sorted(answer[0], key=lambda v: v["index"]) == [{"index": 7, "value": 2.0}, {"index": 9, "value": 1.0}]


def test_similarity_answer_is_the_cosine_with_the_source():
    vectors = [np.array(v, dtype=np.float32) for v in ([2.0, 0.0], [1.0, 1.0], [0.0, 3.0])]
    assert np.allclose(tei.similarity_answer(embeddings(EmbedQuery(items=()), vectors)), [0.5**0.5, 0.0])


def test_rerank_answer_best_first_with_texts_when_asked():
    ranking = Ranking(
        RankQuery(query="q", documents=("a", "b")), info("r", "rerank", 1), order=[1, 0], scores=[0.2, 0.7], tokens=4
    )
    assert tei.rerank_answer(ranking, return_text=False) == [{"index": 1, "score": 0.7}, {"index": 0, "score": 0.2}]
    assert tei.rerank_answer(ranking, return_text=True)[0] == {"index": 1, "score": 0.7, "text": "b"}


def test_label_scores_highest_first_and_top_k():
    classified = Classified(
        ClassifyQuery(texts=("a",)),
        info("c", "classify", 3, labels=["x", "y", "z"]),
        np.array([[0.2, 0.5, 0.3]]),
        tokens=2,
    )
    assert tei.label_scores(classified) == [
        [{"label": "y", "score": 0.5}, {"label": "z", "score": 0.3}, {"label": "x", "score": 0.2}]
    ]
    assert tei.label_scores(classified, top_k=1) == [[{"label": "y", "score": 0.5}]]


def test_tokens_answer():
    row = [Token(101, "[CLS]", True, None, None), Token(7, "hi", False, 0, 2)]
    tokens = Tokens(TokenizeQuery(texts=("hi",)), [row])
    assert tei.tokens_answer(tokens) == [
        [
            {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None},
            {"id": 7, "text": "hi", "special": False, "start": 0, "stop": 2},
        ]
    ]


# Through the engine
ROUTES = {
    "/embed": (tei.embed, tei.TeiEmbedRequest),
    "/embed_sparse": (tei.embed_sparse, tei.SparseEmbeddingRequest),
    "/rerank": (tei.rerank, tei.TeiRerankRequest),
    "/predict": (tei.predict, tei.TeiPredictRequest),
    "/similarity": (tei.similarity, tei.TeiSimilarityRequest),
    "/tokenize": (tei.tokenize, tei.TeiTokenizeRequest),
    "/decode": (tei.decode, tei.TeiDecodeRequest),
    "/": (tei.root, tei.TeiRootRequest),
}
BAD_BODIES = [
    pytest.param("/embed", {"inputs": 5}, 400, "inputs", id="embed-a-number"),
    pytest.param("/embed", {"inputs": []}, 400, "inputs", id="embed-nothing"),
    pytest.param("/embed", {"inputs": "a", "model": SPLADE}, 400, "model", id="embed-sparse-model"),
    pytest.param(
        "/embed",
        {"inputs": [" ".join(["word"] * 400)], "truncate": False},
        400,
        "inputs",
        id="embed-too-long-without-truncation",
    ),
    pytest.param("/embed", {"inputs": "a", "model": "no-such-model"}, 404, "model", id="embed-unknown-model"),
    pytest.param("/embed", {"inputs": "a", "dimensions": 999}, 400, "dimensions", id="embed-too-many-dimensions"),
    pytest.param("/embed_sparse", {"inputs": "a", "model": EMBEDDER}, 400, "model", id="sparse-from-a-dense-model"),
    pytest.param(
        "/embed_sparse", {"inputs": "a", "max_active_dims": 0}, 400, "max_active_dims", id="sparse-max-active-dims-0"
    ),
    pytest.param("/rerank", {"query": "q", "texts": []}, 400, "texts", id="rerank-no-texts"),
    pytest.param("/rerank", {"query": 5, "texts": ["a"]}, 400, "query", id="rerank-query-not-a-string"),
    pytest.param("/predict", {"inputs": ["a", "b", "c"], "model": CLASSIFIER}, 400, "inputs", id="predict-a-triple"),
    pytest.param("/predict", {"inputs": "a", "model": EMBEDDER}, 400, "model", id="predict-with-an-embedder"),
    pytest.param("/predict", {"inputs": []}, 400, "inputs", id="predict-nothing"),
    pytest.param(
        "/similarity",
        {"inputs": {"source_sentence": "a", "sentences": []}},
        400,
        "inputs",
        id="similarity-no-sentences",
    ),
    pytest.param(
        "/similarity",
        {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "model": COLPALI},
        400,
        "model",
        id="similarity-multi-vector-model",
    ),
    pytest.param(
        "/similarity",
        {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "model": SPLADE},
        400,
        "model",
        id="similarity-sparse-model",
    ),
    pytest.param("/tokenize", {"inputs": []}, 400, "inputs", id="tokenize-nothing"),
    pytest.param("/tokenize", {"inputs": [1]}, 400, "inputs", id="tokenize-ids"),
    pytest.param("/decode", {"ids": [10**9]}, 400, "ids", id="decode-outside-the-vocabulary"),
    pytest.param("/decode", {"ids": ["a"]}, 400, "ids", id="decode-text"),
    pytest.param("/", {"inputs": "a", "parameters": {"top_k": "two"}}, 400, "top_k", id="root-top-k-not-a-number"),
    pytest.param("/", {"inputs": {"source_sentence": 3}}, 400, "inputs", id="root-source-not-a-string"),
    # the root's odd bodies
    pytest.param("/", {"query": "q", "model": RERANKER}, 400, "texts", id="root-query-alone"),
    pytest.param("/", {"texts": ["a"], "model": RERANKER}, 400, "query", id="root-texts-alone"),
    pytest.param("/", {"query": "q", "texts": "not a list", "model": RERANKER}, 400, "texts", id="root-texts-a-string"),
    # the root is TEI's: infinity's `documents` is no field of its rerank body
    pytest.param("/", {"query": "q", "documents": ["b"], "model": RERANKER}, 400, "texts", id="root-documents"),
    pytest.param("/", {"inputs": None}, 400, "inputs", id="root-null-inputs"),
    pytest.param("/", {"inputs": {"sentences": ["a"]}}, 400, "inputs", id="root-similarity-without-source"),
    pytest.param("/", {"inputs": ["a", "b", "c"], "parameters": {}}, 400, "inputs", id="root-classify-a-triple"),
    pytest.param(
        "/",
        {"inputs": "a", "parameters": {"function_to_apply": "cube"}},
        400,
        "function_to_apply",
        id="root-unknown-function",
    ),
    pytest.param(
        "/",
        {"inputs": "a", "model": SPLADE, "max_active_dims": "five"},
        400,
        "max_active_dims",
        id="root-sparse-max-active-dims-a-string",
    ),
]


@pytest.mark.parametrize(("path", "body", "status", "param"), BAD_BODIES)
def test_bad_bodies(serve, path, body, status, param):
    assert_refused(answer(serve, *ROUTES[path], body), status, param)


def test_embed_asks_the_model_for_unit_vectors_unless_told_not_to(serve):
    status, vectors, service = answer(serve, *ROUTES["/embed"], {"inputs": ["a fox", "a dog"]})
    assert status == 200 and np.asarray(vectors).shape == (2, 384)
    assert [row.normalize for row in service.rows] == [True, True]
    _, _, service = answer(serve, *ROUTES["/embed"], {"inputs": "a fox", "normalize": False})
    assert [row.normalize for row in service.rows] == [False]


@pytest.mark.parametrize("name", [CLIP, COLPALI])
def test_teis_default_normalize_is_no_error_for_models_that_normalize_anyway(name):
    """Media models give unit vectors whatever is asked: TEI's default (true) asks for what they give."""
    query = tei.embed_query(tei.TeiEmbedRequest(inputs="a", model=name))
    check_embed(query, INFOS[name], EmbentoConfig(), None, INFOS)
    with pytest.raises(InvalidRequest, match="normalize applies to dense text embedders"):
        check_embed(
            tei.embed_query(tei.TeiEmbedRequest(inputs="a", model=name, normalize=False)),
            INFOS[name],
            EmbentoConfig(),
            None,
            INFOS,
        )


def test_predict_single_pair_and_batch(serve):
    status, single, service = answer(serve, *ROUTES["/predict"], {"inputs": "a fox", "raw_scores": True})
    length = service.rows[0].length
    assert status == 200 and single == [
        {"label": label, "score": pytest.approx((i + 1) * length / 100)}
        for i, label in reversed(list(enumerate(LABELS)))
    ]
    _, batch, service = answer(serve, *ROUTES["/predict"], {"inputs": [["q", "a fox"], ["a dog"]]})
    assert len(batch) == 2 and service.rows[0].token_type_ids[-1] == 1 and set(service.rows[1].token_type_ids) == {0}
    assert all(abs(sum(item["score"] for item in row) - 1) < 1e-5 for row in batch)  # softmax


def test_similarity_is_the_cosine_of_the_embed_vectors(serve):
    texts = ["a fox", "a dog", "a cat"]
    _, vectors, _ = answer(serve, *ROUTES["/embed"], {"inputs": texts})
    status, scores, _ = answer(
        serve, *ROUTES["/similarity"], {"inputs": {"source_sentence": texts[0], "sentences": texts[1:]}}
    )
    unit = np.asarray(vectors) / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert status == 200 and np.allclose(scores, unit[1:] @ unit[0], atol=1e-5)


def test_sparse_rerank_tokenize_and_decode(serve, tokenizers):
    status, sparse, _ = answer(serve, *ROUTES["/embed_sparse"], {"inputs": "a fox a", "max_active_dims": 2})
    ids = tokenizers[SPLADE].encode_texts(["a fox a"])[0]
    assert status == 200 and len(sparse[0]) == 2 and {"index": 1037, "value": 2.0} in sparse[0]
    assert {entry["index"] for entry in sparse[0]} <= set(ids)
    status, ranked, _ = answer(
        serve, *ROUTES["/rerank"], {"query": "q", "texts": ["a", "a longer text"], "return_text": True}
    )
    assert status == 200 and [(r["index"], r["text"]) for r in ranked] == [(1, "a longer text"), (0, "a")]
    _, tokens, _ = answer(serve, *ROUTES["/tokenize"], {"inputs": "a fox"})
    assert [t["text"] for t in tokens[0]] == ["[CLS]", "a", "fox", "[SEP]"] and tokens[0][1]["start"] == 0
    _, texts, _ = answer(serve, *ROUTES["/decode"], {"ids": [[t["id"] for t in tokens[0]]]})
    assert texts == ["a fox"]


@pytest.mark.parametrize(
    ("body", "path", "same_as"),
    [
        ({"inputs": ["a fox", "a dog"]}, "/embed", None),  # the first served model embeds
        ({"inputs": "a fox", "model": CLASSIFIER}, "/predict", None),
        ({"inputs": "a fox", "model": SPLADE}, "/embed_sparse", None),
        ({"query": "q", "texts": ["a", "a longer text"], "model": RERANKER}, "/rerank", None),
        ({"inputs": {"source_sentence": "a", "sentences": ["b", "c"]}}, "/similarity", None),
        (
            {"inputs": "a fox", "parameters": {"top_k": 2, "function_to_apply": "none"}},
            "/predict",
            {"inputs": "a fox", "raw_scores": True},
        ),
    ],
)
def test_the_root_answers_as_the_route_it_dispatches_to(serve, body, path, same_as):
    status, through_root, _ = answer(serve, *ROUTES["/"], body)
    _, direct, _ = answer(serve, *ROUTES[path], same_as or body)
    assert status == 200
    if same_as is None:
        assert through_root == direct
    else:  # the text-classification task: one list per input, the top_k best
        assert through_root == [direct[:2]]


def test_a_sentences_similarity_with_itself_is_1_and_every_cosine_within_minus_1_and_1():
    """A float32 cosine of a unit vector with itself may round past 1 (1.0000001); TEI answers it clamped."""
    vectors = np.random.default_rng(0).standard_normal((200, 384)).astype(np.float32)
    for vector in vectors:
        scores = json.loads(
            json_answer(tei.similarity_answer(embeddings(EmbedQuery(items=()), [vector, vector, -vector]))).body
        )
        assert scores[0] == 1.0 or 1 - 1e-6 < scores[0] < 1, scores
        assert -1 <= scores[1] < -1 + 1e-6, scores


def test_sparse_weights_are_written_in_float32s_shortest_digits_on_both_sparse_routes():
    """As every vector: a float32 weight of 0.1 is `0.1`, not its float64 reprs `0.10000000149011612`."""
    entries = np.array([[3, 7], [0.1, 0.7]], dtype=np.float32)
    result = embeddings(EmbedQuery(items=()), [entries], info(kind="sparse", dimension=30))

    async def embed(query: EmbedQuery) -> Embeddings:
        return result

    answered = asyncio.run(tei.embed_sparse(SimpleNamespace(embed=embed), tei.SparseEmbeddingRequest(inputs="a")))
    # BentoML writes a pydantic answer as its JSON; a Response goes out as it is
    written = (
        answered.body
        if isinstance(answered, Response)
        else TypeAdapter(list[list[tei.SparseValue]]).dump_json(answered)
    )
    assert [entry["value"] for entry in json.loads(written, parse_float=str)[0]] == ["0.1", "0.7"]
    openais = json.loads(json_answer(openai.embedding_response(result)).body, parse_float=str)
    assert openais["data"][0]["embedding"] == {"indices": [3, 7], "values": ["0.1", "0.7"]}
