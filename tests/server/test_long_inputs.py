"""Long documents through a real server (issue 34): `long_input: mean` on 1, 2 and 10 windows, late chunking
within the limit and over slices, Voyage's contextualized embeddings with and without auto-chunking, through
raw HTTP, the OpenAI SDK and `voyageai.Client`; the refusals; and `usage`.

Every vector is checked against `tests/long_reference.py`, computed with transformers alone from the semantics,
at cosine >= 0.9999. Three checkpoints built as real ones are: a BERT with a 32-token limit (e5 prompts; on
torch with and without `chunk_overlap`, and on ONNX Runtime), a ModernBERT embedder with a 128-token limit
(byte-level BPE, nomic prompts; once more with a small `max_embed_len` for the refusals) and a Qwen3 embedder
(a decoder with an appended EOS and an instruction). Documents are drawn from the words their tokenizers were
trained on, sized in tokens by each checkpoint's own tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import httpx
import numpy as np
import pytest

from testkit.checkpoints import WORDS
from tests import long_reference as reference
from tests.asserts import assert_openai_error, assert_voyage_error
from tests.conftest import MINILM, TINY_COLPALI, TINY_SPLADE
from tests.servers import SharedServer
from tests.tolerance import assert_same_vectors, cosines

pytestmark = pytest.mark.server

MIN_COSINE = 0.9999  # the bar for the server against the reference
BERT, BERT_OVERLAP, BERT_ONNX = "long-bert", "long-bert-overlap", "long-bert-onnx"
MODERNBERT, MODERNBERT_CAPPED = "long-modernbert", "long-modernbert-capped"
QWEN3, QWEN3_OVERLAP = "long-qwen3", "long-qwen3-overlap"
CAP = 300  # MODERNBERT_CAPPED's max_embed_len
# served name -> (checkpoint fixture, backend, chunk_overlap, more settings)
SERVED = {
    BERT: ("windowed_bert_path", "torch", 0, {}),
    BERT_OVERLAP: ("windowed_bert_path", "torch", 4, {}),
    BERT_ONNX: ("windowed_bert_path", "onnx", 4, {}),  # ONNX Runtime's token states
    MODERNBERT: ("modernbert_path", "torch", 0, {}),
    MODERNBERT_CAPPED: ("modernbert_path", "torch", 12, {"max_embed_len": CAP}),
    QWEN3: ("qwen3_embedder_path", "torch", 0, {}),
    QWEN3_OVERLAP: ("qwen3_embedder_path", "torch", 6, {}),
}
INSTRUCTION = "retrieve relevant passages"
# Each checkpoint's request fields for its query prompt, and that prompt as the reference prepends it.
QUERY = {
    "windowed_bert_path": ({"prompt_name": "query"}, "query: "),
    "modernbert_path": ({"prompt_name": "query"}, "search_query: "),
    "qwen3_embedder_path": ({"instruction": INSTRUCTION}, f"Instruct: {INSTRUCTION}\nQuery:"),
}
# The prompt of Voyage's input_type "document" (the checkpoints' `document` prompts).
DOCUMENT_PROMPT = {"windowed_bert_path": "passage: ", "modernbert_path": "search_document: ", "qwen3_embedder_path": ""}
# MODERNBERT_CAPPED's 10 windows under its max_embed_len: a request's max_tokens makes L 32.
MEAN_MAX_TOKENS = {MODERNBERT_CAPPED: 32}
DTYPES = ("float", "int8", "uint8", "binary", "ubinary")


@pytest.fixture(scope="module")
def paths(request: pytest.FixtureRequest) -> dict[str, Path]:
    """Each served name's checkpoint folder."""
    return {name: request.getfixturevalue(fixture) for name, (fixture, *_) in SERVED.items()}


def long_input_models(request: pytest.FixtureRequest) -> list[dict]:
    """SERVED's models: served by `text_families_server` (tests/servers.py) beside other text checkpoints."""
    return [
        {
            "model_id": str(request.getfixturevalue(fixture)),
            "served_model_name": name,
            "backend": backend,
            "chunk_overlap": overlap,
            **more,
        }
        for name, (fixture, backend, overlap, more) in SERVED.items()
    ]


@pytest.fixture(scope="module")
def long_server(text_families_server: SharedServer) -> str:
    return text_families_server.url


@pytest.fixture(scope="module")
def http(long_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=long_server, timeout=120) as client:
        yield client


# Documents sized in tokens


def _count(checkpoint: reference.Checkpoint, text: str) -> int:
    return len(checkpoint.tokenizer(text, add_special_tokens=False, verbose=False).input_ids)


@cache
def _text(folder: Path, tokens: int, seed: int) -> str:
    """Words of the checkpoints' vocabulary, drawn with this seed, until `tokens` content tokens (at most 2 more:
    a word is at most 3 tokens, and words tokenize apart)."""
    checkpoint, rng, words = reference.load(folder), random.Random(seed), []
    while (have := _count(checkpoint, " ".join(words))) < tokens:
        words.extend(rng.choice(WORDS) for _ in range(max(1, (tokens - have) // 3)))
    return " ".join(words)


def _chunks(folder: Path, fractions: tuple[float, ...], seed: int) -> list[str]:
    """A document's chunks, each this fraction of the model's limit L in tokens."""
    size = reference.load(folder).max_seq_length
    return [_text(folder, max(1, int(size * fraction)), seed * 100 + i) for i, fraction in enumerate(fractions)]


SHORT = (0.25, 0.2, 0.25)  # a document within L
LONG = (0.75, 0.33, 1.0, 0.5, 0.25)  # 2.8 L: four slices


def _width(checkpoint: reference.Checkpoint, prompt: str, max_tokens: int | None) -> int:
    """W: a window's content tokens."""
    prompt_ids = checkpoint.tokenizer(prompt, add_special_tokens=False).input_ids if prompt else []
    return reference.limit(checkpoint, max_tokens) - len(checkpoint.prefix) - len(checkpoint.suffix) - len(prompt_ids)


def _mean_tokens(checkpoint: reference.Checkpoint, text: str, prompt: str, max_tokens: int | None, overlap: int) -> int:
    """Tokens run for one `long_input: mean` input: today's count within L, else every window with its
    specials and prompt."""
    size = reference.limit(checkpoint, max_tokens)
    whole = len(checkpoint.tokenizer(prompt + text, add_special_tokens=True, verbose=False).input_ids)
    if whole <= size:
        return whole
    width = _width(checkpoint, prompt, max_tokens)
    frame = size - width  # specials and prompt
    return sum(end - start + frame for start, end in reference.token_windows(_count(checkpoint, text), width, overlap))


def _document_tokens(checkpoint: reference.Checkpoint, text: str) -> int:
    """Tokens run for one document under late chunking: N within L, else every slice of L."""
    n = len(checkpoint.tokenizer(text, add_special_tokens=True, verbose=False).input_ids)
    size = checkpoint.max_seq_length
    return n if n <= size else size * len(reference.slice_starts(n, size, size // 4))


# Requests


def _ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def _embeddings(http: httpx.Client, **body) -> tuple[np.ndarray, dict]:
    answer = _ok(http.post("/v1/embeddings", json=body))
    return np.array([item["embedding"] for item in answer["data"]]), answer["usage"]


def _contextualized(http: httpx.Client, **body) -> tuple[list[np.ndarray], list[list[str | None]], dict]:
    """Each document's chunk vectors and texts, and the usage."""
    answer = _ok(http.post("/v1/contextualizedembeddings", json=body))
    assert [document["index"] for document in answer["data"]] == list(range(len(body["inputs"])))
    for document in answer["data"]:
        assert [chunk["index"] for chunk in document["data"]] == list(range(len(document["data"])))
    return (
        [np.array([chunk["embedding"] for chunk in document["data"]]) for document in answer["data"]],
        [[chunk.get("text") for chunk in document["data"]] for document in answer["data"]],
        answer["usage"],
    )


def _assert_parity(got, expected, what: str = "") -> None:
    similarity = cosines(got, expected)
    assert (similarity >= MIN_COSINE).all(), f"{what}: cosines {similarity.round(6).tolist()}"


# 1. long_input: mean


@pytest.mark.parametrize("served", list(SERVED))
def test_mean_matches_the_reference_on_1_2_and_10_windows(http, paths, served):
    """One vector per input, the token-weighted mean of its windows (with the served chunk_overlap); an input
    within L gets today's vector; usage counts every window with its specials and prompt."""
    fixture, _, overlap, _ = SERVED[served]
    folder, (controls, prompt) = paths[served], QUERY[fixture]
    checkpoint, max_tokens = reference.load(folder), MEAN_MAX_TOKENS.get(served)
    width = _width(checkpoint, prompt, max_tokens)
    step = width - overlap
    # 1 window (prompt and specials included, within L), 2 windows, 10 windows
    texts = [
        _text(folder, width - 4, 1),
        _text(folder, width + step // 2, 2),
        _text(folder, width + 8 * step + step // 2, 3),
    ]
    size = reference.limit(checkpoint, max_tokens)
    assert len(checkpoint.tokenizer(prompt + texts[0]).input_ids) <= size
    assert [len(reference.token_windows(_count(checkpoint, text), width, overlap)) for text in texts[1:]] == [2, 10]
    limits = {"max_tokens": max_tokens} if max_tokens else {}
    got, usage = _embeddings(http, model=served, input=texts, long_input="mean", **controls, **limits)
    expected = np.stack([reference.mean_vector(folder, text, prompt, max_tokens, overlap) for text in texts])
    _assert_parity(got, expected, served)
    assert usage["total_tokens"] == sum(_mean_tokens(checkpoint, text, prompt, max_tokens, overlap) for text in texts)
    today, today_usage = _embeddings(http, model=served, input=texts[:1], **controls, **limits)
    assert_same_vectors(got[:1], today)
    truncated, _ = _embeddings(http, model=served, input=texts[:1], long_input="truncate", **controls, **limits)
    assert_same_vectors(truncated, today)
    assert today_usage["total_tokens"] == _mean_tokens(checkpoint, texts[0], prompt, max_tokens, overlap)


# 2. Late chunking


@pytest.mark.parametrize("served", [BERT, BERT_ONNX, MODERNBERT, QWEN3])
def test_late_chunking_within_and_past_the_limit(http, paths, served):
    """/v1/embeddings late_chunking and Voyage's route with several documents in one request: one vector per
    chunk from the states of the whole document (sliced past L); usage counts every slice's tokens."""
    folder = paths[served]
    checkpoint = reference.load(folder)
    short, long = _chunks(folder, SHORT, 1), _chunks(folder, LONG, 2)
    assert len(checkpoint.tokenizer(" ".join(short)).input_ids) <= checkpoint.max_seq_length
    assert (
        len(
            reference.slice_starts(
                len(checkpoint.tokenizer(" ".join(long)).input_ids),
                checkpoint.max_seq_length,
                checkpoint.max_seq_length // 4,
            )
        )
        >= 3
    )
    documents = [long, short, long[1:3]]
    expected = [reference.late_chunk_vectors(folder, chunks) for chunks in documents]
    for chunks, want in zip(documents[:2], expected, strict=False):
        got, usage = _embeddings(http, model=served, input=chunks, late_chunking=True)
        _assert_parity(got, want, f"{served} late chunking of {len(chunks)} chunks")
        assert usage["total_tokens"] == _document_tokens(checkpoint, " ".join(chunks))
    vectors, texts, usage = _contextualized(http, model=served, inputs=documents)
    for got, want in zip(vectors, expected, strict=True):
        _assert_parity(got, want, f"{served} contextualized")
    assert all(text is None for document in texts for text in document)
    assert usage["total_tokens"] == sum(_document_tokens(checkpoint, " ".join(chunks)) for chunks in documents)


# 3. Auto-chunking


@pytest.mark.parametrize("served", [BERT, MODERNBERT, QWEN3])
def test_auto_chunking_matches_the_reference(http, paths, served):
    """Voyage's auto-chunking of a document past L: the chunks' texts (back to the document without overlap)
    and vectors, with and without chunk_overlap, without a prompt and with the document prompt."""
    fixture = SERVED[served][0]
    folder = paths[served]
    size = reference.load(folder).max_seq_length
    document = _text(folder, size * 5 // 2, 4)
    chunk_size = size // 3
    for chunk_overlap, input_type in ((0, None), (chunk_size // 3, "document")):
        prompt = DOCUMENT_PROMPT[fixture] if input_type else ""
        vectors, texts, _ = _contextualized(
            http,
            model=served,
            inputs=[document],
            enable_auto_chunking=True,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            input_type=input_type,
        )
        want_texts, want_vectors = reference.auto_chunks(folder, document, chunk_size, chunk_overlap, prompt=prompt)
        assert texts == [want_texts] and len(want_texts) >= 6
        if chunk_overlap == 0:
            assert "".join(texts[0]) == document
        _assert_parity(vectors[0], want_vectors, f"{served} overlap {chunk_overlap}")


def test_auto_chunking_defaults_and_cuts_mid_word(http, paths):
    """Unset chunk_size: the model's window less its special tokens; a document without whitespace near a cut is
    cut mid-word."""
    folder = paths[BERT]
    document = _text(folder, 80, 5)
    vectors, texts, _ = _contextualized(http, model=BERT, inputs=[document], enable_auto_chunking=True)
    want_texts, want_vectors = reference.auto_chunks(folder, document, 30, 0)
    assert texts == [want_texts] and len(want_texts) == 3
    _assert_parity(vectors[0], want_vectors, "default chunk_size")
    glued = _text(paths[MODERNBERT], 20, 6) + " " + "".join(_text(paths[MODERNBERT], 60, 7).split())
    vectors, texts, _ = _contextualized(
        http, model=MODERNBERT, inputs=[glued], enable_auto_chunking=True, chunk_size=16
    )
    want_texts, want_vectors = reference.auto_chunks(paths[MODERNBERT], glued, 16, 0)
    assert texts == [want_texts] and "".join(texts[0]) == glued
    assert any(
        not text.endswith(" ") and not following.startswith(" ") for text, following in zip(want_texts, want_texts[1:])
    )  # a mid-word cut
    _assert_parity(vectors[0], want_vectors, "mid-word cuts")


# 4. The real clients


def test_openai_sdk_mean_and_late_chunking(long_server, paths):
    import openai

    sdk = openai.OpenAI(base_url=f"{long_server}/v1", api_key="x", max_retries=0)
    folder = paths[BERT_OVERLAP]
    text = _text(folder, 150, 8)
    answer = sdk.embeddings.create(
        model=BERT_OVERLAP, input=[text], extra_body={"long_input": "mean", "prompt_name": "query"}
    )
    _assert_parity([answer.data[0].embedding], [reference.mean_vector(folder, text, "query: ", overlap=4)], "sdk mean")
    chunks = _chunks(paths[QWEN3], LONG, 3)
    answer = sdk.embeddings.create(model=QWEN3, input=chunks, extra_body={"late_chunking": True})
    _assert_parity(
        [item.embedding for item in answer.data],
        reference.late_chunk_vectors(paths[QWEN3], chunks),
        "sdk late chunking",
    )


def _codes_match(codes: np.ndarray, floats: np.ndarray, dtype: str, scale: float) -> None:
    """Codes of the float answer by Embento's symmetric scheme (models/quantization.py), computed by another
    request: int8/uint8 within one code (rounding boundaries), sign bits equal wherever the float is clearly
    not 0."""
    if dtype in ("binary", "ubinary"):
        bits = np.unpackbits(
            (codes.astype(np.int16) + 128).astype(np.uint8) if dtype == "binary" else codes.astype(np.uint8), axis=-1
        )[:, : floats.shape[1]]
        clear = np.abs(floats) > 1e-5
        assert (bits[clear] == (floats[clear] > 0)).all(), dtype
        assert codes.shape == (floats.shape[0], (floats.shape[1] + 7) // 8)
        return
    expected = np.clip(np.rint(floats / scale * 127), -127, 127) + (128 if dtype == "uint8" else 0)
    assert codes.shape == floats.shape and np.abs(codes - expected).max() <= 1, dtype
    assert codes.min() >= (0 if dtype == "uint8" else -127) and codes.max() <= (255 if dtype == "uint8" else 127)


def test_voyage_sdk_contextualized_embed(long_server, http, paths):
    """`voyageai.Client(base_url=…)` unchanged: documents of chunks and auto-chunked documents, in every
    output_dtype; one-element queries are plain query embeddings."""
    import voyageai

    voyage = voyageai.Client(api_key="any", base_url=f"{long_server}/v1", max_retries=1)
    folder = paths[BERT]
    scale = next(card for card in _ok(http.get("/v1/models"))["data"] if card["id"] == BERT)["quantization"]["scales"][
        "32"
    ]
    documents = [_chunks(folder, LONG, 4), _chunks(folder, SHORT, 5)]
    document = _text(folder, 75, 6)
    floats: dict[str, list[np.ndarray]] = {}
    for dtype in DTYPES:
        result = voyage.contextualized_embed(inputs=documents, model=BERT, input_type="document", output_dtype=dtype)
        chunked = [np.array(item.embeddings) for item in result.results]
        auto = voyage.contextualized_embed(
            inputs=[document],
            model=BERT,
            input_type="document",
            output_dtype=dtype,
            enable_auto_chunking=True,
            chunk_size=10,
            chunk_overlap=3,
        )
        texts, want_vectors = reference.auto_chunks(folder, document, 10, 3, prompt="passage: ")
        assert auto.results[0].chunk_texts == texts
        if dtype == "float":
            for got, chunks in zip(chunked, documents, strict=True):
                _assert_parity(got, reference.late_chunk_vectors(folder, chunks, prompt="passage: "), "voyage sdk")
            _assert_parity(auto.results[0].embeddings, want_vectors, "voyage sdk auto-chunking")
            assert result.total_tokens == sum(
                _document_tokens(reference.load(folder), "passage: " + " ".join(c)) for c in documents
            )
            floats = {"chunked": chunked, "auto": [np.array(auto.results[0].embeddings)]}
            continue
        for got, want in zip(
            [*chunked, np.array(auto.results[0].embeddings)], [*floats["chunked"], *floats["auto"]], strict=True
        ):
            _codes_match(got, want, dtype, scale)
    queries = ["quick brown fox", "private embedding servers"]
    result = voyage.contextualized_embed(inputs=[[query] for query in queries], model=BERT, input_type="query")
    plain, _ = _embeddings(http, model=BERT, input=queries, input_type="search_query")
    assert_same_vectors(np.array([item.embeddings[0] for item in result.results]), plain)


# 5. Refusals


def test_past_max_embed_len_is_refused(http, paths):
    folder = paths[MODERNBERT_CAPPED]
    over = _text(folder, CAP + 10, 9)
    error = assert_openai_error(
        http.post("/v1/embeddings", json={"model": MODERNBERT_CAPPED, "input": ["a", over], "long_input": "mean"}), 400
    )
    assert "max_embed_len" in error["message"] and str(CAP) in error["message"] and "input[1]" in error["message"]
    chunks = [_text(folder, CAP // 3, seed) for seed in (10, 11, 12, 13)]
    for body in ({"input": chunks}, {"input": [over]}):  # several chunks past it, or one
        error = assert_openai_error(
            http.post("/v1/embeddings", json={"model": MODERNBERT_CAPPED, "late_chunking": True, **body}), 400
        )
        assert "max_embed_len" in error["message"] and str(CAP) in error["message"]
    for body in ({"inputs": [["a"], chunks]}, {"inputs": [over], "enable_auto_chunking": True}):
        message = assert_voyage_error(
            http.post("/v1/contextualizedembeddings", json={"model": MODERNBERT_CAPPED, **body}), 400
        )
        assert "max_embed_len" in message and str(CAP) in message
    # within it, several windows are fine
    assert _ok(
        http.post(
            "/v1/embeddings",
            json={"model": MODERNBERT_CAPPED, "input": _text(folder, CAP - 20, 9), "long_input": "mean"},
        )
    )


def test_auto_chunking_refusals(http):
    """Raw HTTP: the voyageai SDK checks these before sending."""
    refused = [
        (
            {"inputs": ["the quick brown fox"], "enable_auto_chunking": True, "chunk_size": 8, "chunk_overlap": 8},
            "chunk_overlap",
        ),
        ({"inputs": [["the quick", "brown fox"]], "enable_auto_chunking": True}, "one string"),
    ]
    for body, named in refused:
        message = assert_voyage_error(http.post("/v1/contextualizedembeddings", json={"model": BERT, **body}), 400)
        assert named in message, message


def test_long_input_error_names_the_input_and_its_length(http, paths):
    checkpoint = reference.load(paths[BERT])
    over = _text(paths[BERT], 40, 14)
    length = len(checkpoint.tokenizer(over).input_ids)
    error = assert_openai_error(
        http.post("/v1/embeddings", json={"model": BERT, "input": ["short", over], "long_input": "error"}),
        400,
        param="input",
    )
    assert f"input[1] is {length} tokens" in error["message"], error


def test_sparse_and_multi_vector_models_refuse_long_inputs(client):
    """On the shared server: they name what they accept."""
    for model in (TINY_SPLADE, TINY_COLPALI):
        error = assert_openai_error(
            client.post("/v1/embeddings", json={"model": model, "input": ["a b"], "long_input": "mean"}),
            400,
            "long_input",
        )
        assert "'truncate'" in error["message"] and "'error'" in error["message"], error
        error = assert_openai_error(
            client.post("/v1/embeddings", json={"model": model, "input": ["a", "b"], "late_chunking": True}),
            400,
            "late_chunking",
        )
        assert "dense text embedders" in error["message"], error
        message = assert_voyage_error(
            client.post("/v1/contextualizedembeddings", json={"model": model, "inputs": [["a", "b"]]}), 400
        )
        assert f"model '{model}' is" in message and "/v1/embeddings" in message, message  # the route that answers it


def test_cohere_truncate_none_refuses_a_long_input(client):
    long_text = " ".join(WORDS * 8)  # past MiniLM's 256 tokens
    error = assert_openai_error(
        client.post("/v1/embed", json={"model": MINILM, "texts": ["short", long_text], "truncate": "NONE"}), 400
    )
    assert "[1] is" in error["message"] and "at most 256" in error["message"], error


# 6. usage (a mean request's: test_mean_matches_the_reference_on_1_2_and_10_windows)


def test_usage_counts_every_window_with_its_prompt(http, paths):
    """The Qwen3 embedder with an instruction and overlapping windows: each window's content, EOS and
    instruction; within L, today's count."""
    folder = paths[QWEN3_OVERLAP]
    checkpoint, prompt = reference.load(folder), QUERY["qwen3_embedder_path"][1]
    texts = [_text(folder, 100, 15), _text(folder, 10, 16)]
    width = _width(checkpoint, prompt, None)
    windows = reference.token_windows(_count(checkpoint, texts[0]), width, 6)
    prompt_tokens = len(checkpoint.tokenizer(prompt, add_special_tokens=False).input_ids)
    expected = sum(end - start + 1 + prompt_tokens for start, end in windows)
    _, usage = _embeddings(http, model=QWEN3_OVERLAP, input=texts[:1], long_input="mean", instruction=INSTRUCTION)
    assert usage["total_tokens"] == expected and len(windows) >= 4
    _, mean = _embeddings(http, model=QWEN3_OVERLAP, input=texts[1:], long_input="mean", instruction=INSTRUCTION)
    _, today = _embeddings(http, model=QWEN3_OVERLAP, input=texts[1:], instruction=INSTRUCTION)
    assert mean["total_tokens"] == today["total_tokens"] == len(checkpoint.tokenizer(prompt + texts[1]).input_ids)
