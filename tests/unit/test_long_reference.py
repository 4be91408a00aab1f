"""The long-document reference (tests/long_reference.py) checked where sentence-transformers can check it: a
text within the limit is today's vector, windows and slices are the model's own modules run on the ids the
contract names, late chunking lets context cross chunk boundaries, and auto-chunks cut the document at words.
The reference is what the server is held to, so it is held to sentence-transformers here."""

from __future__ import annotations

import math
import random
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from testkit.checkpoints import WORDS
from tests.long_reference import auto_chunks, late_chunk_vectors, load, mean_vector

CHECKPOINTS = ["windowed_bert_path", "modernbert_path", "qwen3_embedder_path"]
# The specials around one text, by name: what `load` must find by encoding with and without them.
FRAMES = {
    "windowed_bert_path": (["[CLS]"], ["[SEP]"]),
    "modernbert_path": (["[CLS]"], ["[SEP]"]),
    "qwen3_embedder_path": ([], ["<|endoftext|>"]),
}
SHORT = "the quick brown fox jumps over a lazy dog"
CHUNKS = ["the quick brown fox", "jumps over a lazy dog", "while engineers deploy embedding servers"]


def words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(count))


@cache
def sentence_transformer(folder: Path):  # -> SentenceTransformer
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def modules_run(folder: Path, ids: list[int], pooled: bool) -> np.ndarray:
    """sentence-transformers' own Transformer (and Pooling when `pooled`) on `ids` as given: token states
    (T, H), or the pooled vector before normalization."""
    import torch

    model = sentence_transformer(folder)
    tensor = torch.tensor([ids])
    with torch.inference_mode():
        features = model[0]({"input_ids": tensor, "attention_mask": torch.ones_like(tensor)})
        if pooled:
            return model[1](features)["sentence_embedding"][0].double().numpy()
    return features["token_embeddings"][0].double().numpy()


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


@pytest.fixture(params=CHECKPOINTS)
def checkpoint(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(fixture name, folder) of each long-document checkpoint: a BERT, a ModernBERT, a Qwen3 decoder."""
    return request.param, request.getfixturevalue(request.param)


def test_the_frame_and_limit_are_the_checkpoints_own(checkpoint: tuple[str, Path]) -> None:
    name, folder = checkpoint
    ref, model = load(folder), sentence_transformer(folder)
    tokens = ref.tokenizer.convert_ids_to_tokens
    assert (tokens(list(ref.prefix)), tokens(list(ref.suffix))) == FRAMES[name]
    assert ref.max_seq_length == model.max_seq_length and ref.normalize


def test_within_the_limit_it_is_todays_vector(checkpoint: tuple[str, Path]) -> None:
    _, folder = checkpoint
    model = sentence_transformer(folder)
    for prompt in ("", model.prompts["query"], model.prompts["document"]):
        expected = model.encode(SHORT, prompt=prompt)
        assert cosine(mean_vector(folder, SHORT, prompt), expected) >= 0.99999
    truncated = mean_vector(folder, SHORT, dimensions=8)
    assert truncated.dtype == np.float32 and truncated.shape == (8,)
    assert cosine(truncated, model.encode(SHORT)[:8]) >= 0.99999 and abs(np.linalg.norm(truncated) - 1) < 1e-5


@pytest.mark.parametrize("overlap", [0, 3])
def test_a_long_text_is_the_weighted_mean_of_its_windows(checkpoint: tuple[str, Path], overlap: int) -> None:
    """Windows rebuilt here by name and arithmetic (not the reference's helpers), run through
    sentence-transformers' own Transformer and Pooling modules."""
    name, folder = checkpoint
    model = sentence_transformer(folder)
    tokenizer, size, prompt = model.tokenizer, model.max_seq_length, model.prompts["query"]
    text = words(3 * size, seed=3)
    content = tokenizer(text, add_special_tokens=False).input_ids
    prompt_ids = tokenizer(prompt, add_special_tokens=False).input_ids if prompt else []
    prefix, suffix = (tokenizer.convert_tokens_to_ids(side) for side in FRAMES[name])
    width = size - len(prefix) - len(suffix) - len(prompt_ids)
    n, step = len(content), width - overlap
    last = math.ceil((n - width) / step)  # the first k with k * step + width >= n
    assert n > width and last >= 2
    total, weight = 0.0, 0
    for k in range(last + 1):
        window = content[k * step : k * step + width]
        total = total + len(window) * modules_run(folder, prefix + prompt_ids + window + suffix, pooled=True)
        weight += len(window)
    vector = mean_vector(folder, text, prompt, overlap=overlap)
    assert cosine(vector, unit(total / weight)) >= 0.99999
    assert cosine(vector, model.encode(text, prompt=prompt)) < 0.9999  # not the truncated vector


def test_max_tokens_lowers_the_limit(windowed_bert_path: Path) -> None:
    """A text within the model's 32 tokens but over a request's 8 is windowed; the overlap must stay below the
    window (8 - 2 specials - 2 prompt tokens = 4)."""
    plain = mean_vector(windowed_bert_path, SHORT, "passage: ")
    assert cosine(mean_vector(windowed_bert_path, SHORT, "passage: ", max_tokens=32), plain) >= 0.99999
    assert cosine(mean_vector(windowed_bert_path, SHORT, "passage: ", max_tokens=8), plain) < 0.9999
    with pytest.raises(ValueError):
        mean_vector(windowed_bert_path, SHORT, "passage: ", max_tokens=8, overlap=4)


def test_one_chunk_is_the_mean_of_its_token_states(checkpoint: tuple[str, Path]) -> None:
    """A single chunk within the limit: the mean of sentence-transformers' token embeddings over the text's
    own tokens (its specials left out, unlike the model's mean pooling)."""
    _, folder = checkpoint
    enc = sentence_transformer(folder).tokenizer(SHORT, return_special_tokens_mask=True)
    states = modules_run(folder, enc.input_ids, pooled=False)
    own = [i for i, special in enumerate(enc.special_tokens_mask) if not special]
    vectors = late_chunk_vectors(folder, [SHORT])
    assert vectors.shape == (1, 32) and vectors.dtype == np.float32
    assert cosine(vectors[0], unit(states[own].mean(axis=0))) >= 0.99999


def test_a_prompt_is_context_not_content(windowed_bert_path: Path) -> None:
    """With a prompt, the chunk's vector reads only the chunk's tokens, in the prompt's context."""
    prompt = "passage: "
    enc = sentence_transformer(windowed_bert_path).tokenizer(prompt + SHORT, return_offsets_mapping=True)
    states = modules_run(windowed_bert_path, enc.input_ids, pooled=False)
    own = [i for i, (start, end) in enumerate(enc.offset_mapping) if end > start >= len(prompt)]
    vector = late_chunk_vectors(windowed_bert_path, [SHORT], prompt=prompt)[0]
    assert cosine(vector, unit(states[own].mean(axis=0))) >= 0.99999
    assert cosine(vector, late_chunk_vectors(windowed_bert_path, [SHORT])[0]) < 0.9999


def test_context_crosses_chunk_boundaries(checkpoint: tuple[str, Path]) -> None:
    """The point of late chunking: a chunk's vector depends on its neighbours; a causal decoder's only on
    the chunks before it."""
    name, folder = checkpoint
    vectors = late_chunk_vectors(folder, CHUNKS)
    assert vectors.shape == (3, 32) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    first_changed = late_chunk_vectors(folder, ["a lazy dog", *CHUNKS[1:]])
    assert cosine(first_changed[2], vectors[2]) < 0.9999
    last_changed = late_chunk_vectors(folder, [*CHUNKS[:2], "rain music bird"])
    if name == "qwen3_embedder_path":
        assert all(cosine(last_changed[i], vectors[i]) >= 0.99999 for i in range(2))  # another length: last digits
    else:
        assert cosine(last_changed[0], vectors[0]) < 0.9999
    with pytest.raises(ValueError):
        late_chunk_vectors(folder, [CHUNKS[0], "", CHUNKS[1]])


def test_a_long_document_runs_as_slices(checkpoint: tuple[str, Path]) -> None:
    """Past the limit, the first chunk's tokens (all before the second slice's start, L - L // 4) take their
    states from the first slice: the document's first L ids run as they are."""
    _, folder = checkpoint
    model = sentence_transformer(folder)
    size = model.max_seq_length
    chunks = [words(6, seed) for seed in range(size // 2)]
    document = " ".join(chunks)
    enc = model.tokenizer(document, return_offsets_mapping=True, return_special_tokens_mask=True)
    assert len(enc.input_ids) > 2 * size
    pieces = [(document[start:end], start) for start, end in enc.offset_mapping]
    first = [
        i
        for i, ((piece, start), special) in enumerate(zip(pieces, enc.special_tokens_mask))
        if not special and piece.strip() and start + len(piece) - len(piece.lstrip()) < len(chunks[0])
    ]
    assert max(first) < size - size // 4
    vectors = late_chunk_vectors(folder, chunks)
    assert vectors.shape == (len(chunks), 32)
    states = modules_run(folder, enc.input_ids[:size], pooled=False)
    assert cosine(vectors[0], unit(states[first].mean(axis=0))) >= 0.99999
    other = late_chunk_vectors(folder, chunks, overlap=size // 2)
    assert cosine(other[0], vectors[0]) >= 0.99999  # still the first slice's
    assert not np.allclose(other, vectors, atol=1e-4)  # other slices elsewhere


def test_auto_chunks_cut_the_document_at_words(windowed_bert_path: Path, modernbert_path: Path) -> None:
    document = words(70, seed=5)
    for folder in (windowed_bert_path, modernbert_path):
        texts, vectors = auto_chunks(folder, document, chunk_size=12, chunk_overlap=0)
        assert "".join(texts) == document and len(texts) > 3 and vectors.shape == (len(texts), 32)
        cuts = np.cumsum([len(text) for text in texts])[:-1]
        assert all(document[q - 1].isspace() or document[q].isspace() for q in cuts)
        overlapping, _ = auto_chunks(folder, document, chunk_size=12, chunk_overlap=4)
        assert len(overlapping) > len(texts) and overlapping[0].startswith(texts[0][:10])
        assert overlapping[-1] and document.endswith(overlapping[-1]) and document.startswith(overlapping[0])
        positions = [document.index(text) for text in overlapping]
        assert all(
            positions[k] < positions[k + 1] < positions[k] + len(overlapping[k]) for k in range(len(overlapping) - 1)
        )  # each starts inside the one before
    # WordPiece drops whitespace: the chunks joined by spaces are the same tokens, so late chunking of the
    # auto-chunks' texts reads the same states.
    texts, vectors = auto_chunks(windowed_bert_path, document, chunk_size=12, chunk_overlap=0)
    assert np.allclose(vectors, late_chunk_vectors(windowed_bert_path, texts), atol=1e-5)


def test_auto_chunks_cut_mid_word_without_whitespace(modernbert_path: Path) -> None:
    """A document with no whitespace is cut where its token windows end."""
    document = "abcdefghijklmnopqrstuvwxyz" * 8
    texts, _ = auto_chunks(modernbert_path, document, chunk_size=16, chunk_overlap=0)
    starts = [
        start
        for start, _ in load(modernbert_path).tokenizer(
            document, add_special_tokens=False, return_offsets_mapping=True
        )["offset_mapping"]
    ]
    assert "".join(texts) == document and len(texts) == math.ceil(len(starts) / 16)
    assert list(np.cumsum([len(text) for text in texts])[:-1]) == starts[16::16]
