"""ColBERT text models (PyLate's layout) and BGE-M3 (FlagEmbedding's) as plain Python, against what PyLate and
FlagEmbedding themselves answer for the same checkpoints (tests/hybrid_reference.py: their own venv)."""

from __future__ import annotations

import numpy as np
import pytest

from config.settings import ModelConfig
from gateway.inputs.preprocessors import Preprocessors
from models.base import TokenizedText
from models.inference.auto_backend import load_model
from models.kinds import detect_kind
from models.packing import unpack_arrays
from models.preprocessing.text_tokenizer import TextTokenizer
from models.scores import late_interaction, mode_scores, weighted_mean
from tests.hybrid_reference import DOCUMENTS, M3_WEIGHTS, QUERIES
from tests.tolerance import assert_close, assert_same_vectors

MIN_COSINE = 0.9999  # the bound per vector; float32 reordering stays far above it


def colbert_rows(tokenizer: TextTokenizer, texts: tuple[str, ...], is_query: bool) -> list[TokenizedText]:
    ids, expansions = tokenizer.encode_roles(list(texts), is_query)
    return [
        TokenizedText(model="m", input_ids=row, is_query=is_query, expansion=count)
        for row, count in zip(ids, expansions)
    ]


@pytest.fixture(scope="module", params=["torch", "onnx"])
def colbert(request, colbert_path):
    cfg = ModelConfig(model_id=str(colbert_path), backend=request.param, device="cpu")
    return TextTokenizer(colbert_path, cfg, "colbert"), load_model(colbert_path, cfg)


def test_pylate_folders_are_colbert_and_flagembedding_folders_hybrid(colbert_path, bge_m3_path, tiny_bert_path):
    assert (detect_kind(colbert_path), detect_kind(bge_m3_path), detect_kind(tiny_bert_path)) == (
        "colbert",
        "hybrid",
        "embed",
    )


@pytest.mark.parametrize("is_query", [True, False], ids=["queries", "documents"])
def test_colbert_vectors_equal_pylates(colbert, colbert_reference, is_query):
    tokenizer, model = colbert
    texts, expected = (QUERIES, colbert_reference.queries) if is_query else (DOCUMENTS, colbert_reference.documents)
    got = model.forward(colbert_rows(tokenizer, texts, is_query))
    assert [len(vectors) for vectors in got] == [len(vectors) for vectors in expected]
    for text, vectors, reference in zip(texts, got, expected):
        assert_same_vectors(vectors, reference, min_cosine=MIN_COSINE, err_msg=text)


def test_colbert_maxsim_equals_pylates_scores(colbert, colbert_reference):
    tokenizer, model = colbert
    queries = model.forward(colbert_rows(tokenizer, QUERIES, True))
    documents = model.forward(colbert_rows(tokenizer, DOCUMENTS, False))
    scores = [[late_interaction(query, document) for document in documents] for query in queries]
    assert_close(scores, colbert_reference.scores)


def test_colbert_rows_mix_queries_and_documents_in_one_pass(colbert, colbert_reference):
    tokenizer, model = colbert
    mixed = model.forward(colbert_rows(tokenizer, QUERIES[:2], True) + colbert_rows(tokenizer, DOCUMENTS[:2], False))
    for got, reference in zip(mixed, [*colbert_reference.queries[:2], *colbert_reference.documents[:2]]):
        assert_same_vectors(got, reference, min_cosine=MIN_COSINE)


@pytest.fixture(scope="module")
def m3(bge_m3_path):
    cfg = ModelConfig(model_id=str(bge_m3_path), backend="torch", device="cpu")
    return TextTokenizer(bge_m3_path, cfg, "hybrid"), load_model(bge_m3_path, cfg)


def m3_outputs(m3, texts: tuple[str, ...], representations=("dense", "sparse", "colbert")) -> list[dict]:
    tokenizer, model = m3
    rows = TokenizedText.rows("m", tokenizer.encode_texts(list(texts)), representations=representations)
    return [dict(zip(representations, unpack_arrays(packed))) for packed in model.forward(rows)]


def test_m3_outputs_equal_flagembeddings(m3, m3_reference):
    texts = QUERIES + DOCUMENTS
    outputs = m3_outputs(m3, texts)
    assert_same_vectors([o["dense"] for o in outputs], m3_reference.dense)
    assert m3_reference.sparse_margin > 1e-3  # the ids FlagEmbedding keeps are no coin toss near 0
    for text, output, sparse, colbert in zip(texts, outputs, m3_reference.sparse, m3_reference.colbert):
        ids, weights = output["sparse"][0].astype(int).tolist(), output["sparse"][1]
        assert ids == sorted(sparse), text
        assert_close(weights, [sparse[i] for i in ids], err_msg=text)
        assert_same_vectors(output["colbert"], colbert, min_cosine=MIN_COSINE, err_msg=text)


def test_m3_rows_without_representations_are_its_dense_vectors(m3, m3_reference):
    tokenizer, model = m3
    plain = model.forward(TokenizedText.rows("m", tokenizer.encode_texts(list(QUERIES))))
    assert_same_vectors(np.stack(plain), m3_reference.dense[: len(QUERIES)])
    only_sparse = m3_outputs(m3, QUERIES, ("sparse",))
    assert [list(o) for o in only_sparse] == [["sparse"]] * len(QUERIES)


def test_m3_runs_one_forward_pass_per_batch_for_all_three(m3):
    _, model = m3
    calls = []
    handle = model._model[0].register_forward_hook(lambda *_: calls.append(1))
    try:
        m3_outputs(m3, QUERIES + DOCUMENTS)
    finally:
        handle.remove()
    assert len(calls) == 1


def test_m3_scores_equal_compute_score(m3, m3_reference):
    queries, documents = m3_outputs(m3, QUERIES), m3_outputs(m3, DOCUMENTS)
    weights = dict(zip(("dense", "sparse", "colbert"), M3_WEIGHTS))
    for mode in ("dense", "sparse", "colbert", "hybrid"):
        got = []
        for query in queries:
            row = []
            for document in documents:
                scores = mode_scores(query, document)
                row.append(weighted_mean(scores, weights) if mode == "hybrid" else scores[mode])
            got.append(row)
        assert_close(got, m3_reference.scores[mode], err_msg=mode)


def test_auto_backend_compares_colbert_vectors_token_by_token(colbert_path):
    model = load_model(colbert_path, ModelConfig(model_id=str(colbert_path), backend="auto", device="cpu"))
    assert model.info.backend == "onnx", model.info.backend_reason
    assert "min cosine" in model.info.backend_reason


def test_m3_sparse_keeps_the_mask_token_and_drops_unknown_ones(m3, m3_reference):
    tokenizer, _ = m3
    text = next(document for document in DOCUMENTS if "<mask>" in document)
    mask, unknown = tokenizer._tokenizer.get().mask_token_id, tokenizer._tokenizer.get().unk_token_id
    ids = tokenizer.encode_texts([text])[0]
    assert mask in ids and unknown in ids
    (output,) = m3_outputs(m3, (text,), ("sparse",))
    kept = set(output["sparse"][0].astype(int).tolist())
    reference = m3_reference.sparse[len(QUERIES) + DOCUMENTS.index(text)]
    assert unknown not in kept and unknown not in reference
    assert mask in kept and mask in reference  # its head weight here is 0.26: kept by both


def test_colbert_with_truncation_off_refuses_a_document_past_its_length(colbert_path):
    from config.errors import InvalidRequest
    from models.base import Truncation

    tokenizer = TextTokenizer(colbert_path, ModelConfig(model_id=str(colbert_path)), "colbert")
    long_document = DOCUMENTS[4]
    with pytest.raises(InvalidRequest, match=r"input\[1\] is longer than this model takes per document: 24 tokens"):
        tokenizer.encode_roles(["short", long_document], False, truncation=Truncation(enabled=False))
    ids, _ = tokenizer.encode_roles(["short", long_document], False)
    assert len(ids[1]) == 24  # truncated, prefix included


class InProcessCalls:
    """`ModelCalls` as the warm-up uses it, onto a model in this process."""

    def __init__(self, model) -> None:
        self.model = model

    async def send(self, info, rows):
        return self.model.forward(rows)

    def learn(self, info) -> None:
        pass

    async def learn_cost(self, info, row) -> None:
        pass


def one_tokenizer(info, tokenizer: TextTokenizer) -> Preprocessors:
    return Preprocessors(by_model={info.served_model_name: tokenizer})


def test_m3_warm_up_runs_every_head_and_refuses_one_of_the_wrong_width(m3, bge_m3_path, tmp_path):
    import asyncio
    import shutil

    import torch

    from config.errors import InferenceError
    from gateway.served.calibration import warm_up
    from models.media import MediaLimits

    tokenizer, model = m3
    limits = MediaLimits(1, 1, 1.0)
    settings = ModelConfig(model_id=str(bge_m3_path), backend="torch", device="cpu")
    quantizer = asyncio.run(
        warm_up(model.info, InProcessCalls(model), one_tokenizer(model.info, tokenizer), settings, limits)
    )
    assert quantizer is not None  # its dense vectors are calibrated as any embedder's
    broken = tmp_path / "m3-narrow-colbert"
    shutil.copytree(bge_m3_path, broken)
    torch.save(torch.nn.Linear(model.info.dimension, 8).state_dict(), broken / "colbert_linear.pt")
    narrow = load_model(broken, ModelConfig(model_id=str(broken), backend="torch", device="cpu"))
    with pytest.raises(InferenceError, match=r"\(\d+, 8\)"):
        asyncio.run(
            warm_up(narrow.info, InProcessCalls(narrow), one_tokenizer(narrow.info, tokenizer), settings, limits)
        )
