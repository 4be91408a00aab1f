"""An independent reference for issue 34's long documents (chunked `long_input: mean`, late chunking, long late
chunking over slices, Voyage-style auto-chunking), computed with transformers and torch alone from a
sentence-transformers folder's own files. It imports nothing of `models/`, `gateway/` or `runners/`: it is what
the server's answers are checked against, so it must not share their code. Every model call runs one
sequence alone (no padding), so nothing but the arithmetic of the contract decides the numbers.

The contract is in the issue's semantics: windows of `W = L - S - len(prompt)` content tokens framed by the
tokenizer's own specials and pooled the model's way, weighted by their content lengths; chunk vectors as the
mean of final token states over the tokens whose first non-whitespace character lies in the chunk; documents
longer than `L` run as overlapping slices, each token's state taken from the slice where it sits most inside.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class Checkpoint:
    """What the reference needs of a sentence-transformers folder, read once."""

    tokenizer: Any  # transformers PreTrainedTokenizerFast
    model: Any  # transformers PreTrainedModel, eval mode
    pooling: str  # mean | cls | lasttoken | max
    normalize: bool
    max_seq_length: int
    do_lower_case: bool
    prefix: tuple[int, ...]  # the specials the post-processor puts before one sequence
    suffix: tuple[int, ...]  # and after it


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _pooling_mode(config: dict) -> str:
    """sentence-transformers 5 writes `pooling_mode`; earlier versions one boolean flag per mode."""
    if "pooling_mode" in config:
        modes = [config["pooling_mode"]] if isinstance(config["pooling_mode"], str) else list(config["pooling_mode"])
    else:
        modes = [mode for flag, mode in POOLING_FLAGS.items() if config.get(flag)]
        if any(config.get(flag) for flag in config if flag.startswith("pooling_mode_") and flag not in POOLING_FLAGS):
            raise NotImplementedError(f"pooling mode not covered by the reference: {config}")
    if len(modes) != 1 or modes[0] not in POOLING_FLAGS.values():
        raise NotImplementedError(f"pooling mode not covered by the reference: {modes}")
    if config.get("include_prompt", True) is False:
        raise NotImplementedError("include_prompt: false (prompt tokens left out of the pooling) is not covered")
    return modes[0]


def _frame(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The post-processor's specials around one sequence, found by encoding a text with and without them
    (`build_inputs_with_special_tokens` ignores the post-processor of some fast tokenizers)."""
    probe = "the quick brown fox"
    bare = tokenizer(probe, add_special_tokens=False).input_ids
    framed = tokenizer(probe, add_special_tokens=True).input_ids
    for start in range(len(framed) - len(bare) + 1):
        if framed[start : start + len(bare)] == bare:
            return tuple(framed[:start]), tuple(framed[start + len(bare) :])
    raise ValueError(f"the tokenizer's specials do not frame the text: {bare} within {framed}")


@cache
def _load(folder: str) -> Checkpoint:
    from transformers import AutoModel, AutoTokenizer

    root = Path(folder)
    modules = _read(root / "modules.json") or [{"type": "Transformer", "path": ""}]
    transformer = root / next(m["path"] for m in modules if m["type"].endswith("Transformer"))
    pooling = next((m for m in modules if m["type"].endswith("Pooling")), None)
    if pooling is None:
        raise NotImplementedError(f"{folder} has no Pooling module")
    tokenizer = AutoTokenizer.from_pretrained(str(transformer))
    model = AutoModel.from_pretrained(str(transformer)).eval()
    st_config = _read(transformer / "sentence_bert_config.json")
    # sentence-transformers 5 saves the limit as the tokenizer's model_max_length, earlier versions here
    limit = st_config.get("max_seq_length") or tokenizer.model_max_length
    prefix, suffix = _frame(tokenizer)
    mode = _pooling_mode(_read(root / pooling["path"] / "config.json"))
    return Checkpoint(
        tokenizer=tokenizer,
        model=model,
        pooling=mode,
        normalize=any(m["type"].endswith("Normalize") for m in modules),
        max_seq_length=int(limit),
        do_lower_case=bool(st_config.get("do_lower_case", False)),
        prefix=prefix,
        suffix=suffix,
    )


def load(folder: Path | str) -> Checkpoint:
    """The folder's checkpoint, loaded once per process."""
    return _load(str(Path(folder).resolve()))


def limit(checkpoint: Checkpoint, max_tokens: int | None) -> int:
    """L: the model's max_seq_length, or a request's max_tokens when lower."""
    return checkpoint.max_seq_length if max_tokens is None else min(max_tokens, checkpoint.max_seq_length)


def hidden_states(checkpoint: Checkpoint, ids: list[int] | tuple[int, ...]) -> np.ndarray:
    """The final token states (float64) of `ids` run alone through the model, as given: no specials added,
    every position attended, positions from 0."""
    import torch

    with torch.inference_mode():
        tensor = torch.tensor([list(ids)], dtype=torch.long)
        out = checkpoint.model(input_ids=tensor, attention_mask=torch.ones_like(tensor))
    return out.last_hidden_state[0].double().numpy()


def pool(checkpoint: Checkpoint, states: np.ndarray) -> np.ndarray:
    """The model's own pooling over one unpadded sequence's states (no normalization)."""
    if checkpoint.pooling == "mean":
        return states.mean(axis=0)
    if checkpoint.pooling == "cls":
        return states[0]
    if checkpoint.pooling == "lasttoken":
        return states[-1]
    return states.max(axis=0)


def finish(checkpoint: Checkpoint, vector: np.ndarray, dimensions: int | None) -> np.ndarray:
    """Unit length if the model normalizes, then the first `dimensions` (unit length again if it normalizes)."""
    if checkpoint.normalize:
        vector = vector / np.linalg.norm(vector)
    if dimensions is not None:
        vector = vector[:dimensions]
        if checkpoint.normalize:
            vector = vector / np.linalg.norm(vector)
    return vector.astype(np.float32)


def _cased(checkpoint: Checkpoint, text: str) -> str:
    return text.lower() if checkpoint.do_lower_case else text


def token_windows(n: int, width: int, overlap: int) -> list[tuple[int, int]]:
    """[a, b) of each window of `width` content tokens stepping by width - overlap; the last is the first that
    reaches n (it may be shorter)."""
    if not 0 <= overlap < width:
        raise ValueError(f"overlap {overlap} must be in [0, {width})")
    windows, start = [], 0
    while True:
        windows.append((start, min(start + width, n)))
        if start + width >= n:
            return windows
        start += width - overlap


def mean_vector(
    folder: Path | str,
    text: str,
    prompt: str = "",
    max_tokens: int | None = None,
    overlap: int = 0,
    dimensions: int | None = None,
) -> np.ndarray:
    """`long_input: mean` (section 1): today's vector when prompt + text fits in L, else the content-length
    weighted mean of the pooled windows."""
    checkpoint = load(folder)
    tok, size = checkpoint.tokenizer, limit(checkpoint, max_tokens)
    prompt, text = _cased(checkpoint, prompt), _cased(checkpoint, text)
    full = tok(prompt + text, add_special_tokens=True, verbose=False).input_ids
    if len(full) <= size:
        return finish(checkpoint, pool(checkpoint, hidden_states(checkpoint, full)), dimensions)
    content = tok(text, add_special_tokens=False, verbose=False).input_ids
    prompt_ids = tok(prompt, add_special_tokens=False).input_ids if prompt else []
    width = size - len(checkpoint.prefix) - len(checkpoint.suffix) - len(prompt_ids)
    total, weight = 0.0, 0
    for start, end in token_windows(len(content), width, overlap):
        ids = [*checkpoint.prefix, *prompt_ids, *content[start:end], *checkpoint.suffix]
        total = total + (end - start) * pool(checkpoint, hidden_states(checkpoint, ids))
        weight += end - start
    return finish(checkpoint, total / weight, dimensions)


def slice_starts(n: int, size: int, overlap: int) -> list[int]:
    """Section 3's slices of a document of n > size tokens: 0, step, 2 * step, ... while start + size < n,
    then n - size."""
    if not 0 <= overlap < size:
        raise ValueError(f"late chunking overlap {overlap} must be in [0, {size})")
    starts, start = [], 0
    while start + size < n:
        starts.append(start)
        start += size - overlap
    return [*starts, n - size]


def document_states(checkpoint: Checkpoint, ids: list[int], size: int, overlap: int | None) -> np.ndarray:
    """Every token's final state: one run when the document fits in L (sections 2), else slices run as they
    are, each token's state from the slice where min(i - start, start + L - 1 - i) is largest, ties to the
    earlier slice (section 3)."""
    if len(ids) <= size:
        return hidden_states(checkpoint, ids)
    overlap = size // 4 if overlap is None else overlap
    states: np.ndarray | None = None
    best = np.full(len(ids), -1)
    for start in slice_starts(len(ids), size, overlap):
        run = hidden_states(checkpoint, ids[start : start + size])
        if states is None:
            states = np.zeros((len(ids), run.shape[1]))
        for i in range(start, start + size):
            depth = min(i - start, start + size - 1 - i)
            if depth > best[i]:
                best[i], states[i] = depth, run[i - start]
    assert states is not None
    return states


def token_positions(checkpoint: Checkpoint, text: str) -> tuple[list[int], list[int | None]]:
    """The ids of `text` with specials, and for each token the first non-whitespace character of its offset
    span (None for specials and for tokens whose span is empty or all whitespace)."""
    enc = checkpoint.tokenizer(
        text, add_special_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True, verbose=False
    )
    positions: list[int | None] = []
    for (start, end), special in zip(enc["offset_mapping"], enc["special_tokens_mask"], strict=True):
        first = None if special else next((j for j in range(start, end) if not text[j].isspace()), None)
        positions.append(first)
    return enc["input_ids"], positions


def span_vectors(
    checkpoint: Checkpoint,
    text: str,
    spans: list[tuple[int, int]],
    size: int,
    overlap: int | None,
    dimensions: int | None,
) -> np.ndarray:
    """One vector per character span of `text` (encoded with specials): the mean of the states of the tokens
    whose first non-whitespace character lies in it, then `finish`. A span without a token is an error."""
    ids, positions = token_positions(checkpoint, text)
    states = document_states(checkpoint, ids, size, overlap)
    vectors = []
    for number, (start, end) in enumerate(spans):
        members = [i for i, p in enumerate(positions) if p is not None and start <= p < end]
        if not members:
            raise ValueError(f"chunk {number} ({text[start:end]!r}) has no token")
        vectors.append(finish(checkpoint, states[members].mean(axis=0), dimensions))
    return np.stack(vectors)


def chunk_spans(chunks: list[str], offset: int) -> list[tuple[int, int]]:
    """[start, end) of each chunk within offset + " ".join(chunks)."""
    spans, start = [], offset
    for chunk in chunks:
        spans.append((start, start + len(chunk)))
        start += len(chunk) + 1
    return spans


def late_chunk_vectors(
    folder: Path | str,
    chunks: list[str],
    prompt: str = "",
    overlap: int | None = None,
    dimensions: int | None = None,
    max_tokens: int | None = None,
) -> np.ndarray:
    """Late chunking (sections 2 and 3): the chunks of one document, joined by spaces and encoded once (or as
    slices past L), one vector per chunk in order. `overlap`: late_chunking_overlap, None for L // 4."""
    checkpoint = load(folder)
    prompt, chunks = _cased(checkpoint, prompt), [_cased(checkpoint, chunk) for chunk in chunks]
    return span_vectors(
        checkpoint,
        prompt + " ".join(chunks),
        chunk_spans(chunks, len(prompt)),
        limit(checkpoint, max_tokens),
        overlap,
        dimensions,
    )


def auto_cuts(checkpoint: Checkpoint, document: str, chunk_size: int, chunk_overlap: int) -> list[tuple[int, int]]:
    """Section 4's character spans [cut(a_k), cut(b_k)) of the document's token windows, each cut moved back
    to a word boundary within 20% of the chunk's characters."""
    if not 0 <= chunk_overlap < chunk_size:
        raise ValueError(f"chunk_overlap {chunk_overlap} must be in [0, {chunk_size})")
    offsets = checkpoint.tokenizer(
        _cased(checkpoint, document), add_special_tokens=False, return_offsets_mapping=True, verbose=False
    )["offset_mapping"]
    n = len(offsets)

    def char(t: int) -> int:
        return 0 if t == 0 else len(document) if t == n else offsets[t][0]

    def cut(t: int) -> int:
        if t in (0, n):
            return char(t)
        p = char(t)
        tolerance = 0.2 * (p - char(max(0, t - chunk_size)))
        q = p
        while q >= 0 and p - q <= tolerance:
            if q == 0 or document[q - 1].isspace() or document[q].isspace():
                return q
            q -= 1
        return p

    spans, a = [], 0
    while True:
        b = min(a + chunk_size, n)
        spans.append((cut(a), cut(b)))
        if b == n:
            return spans
        a += chunk_size - chunk_overlap


def auto_chunks(
    folder: Path | str,
    document: str,
    chunk_size: int,
    chunk_overlap: int,
    prompt: str = "",
    overlap: int | None = None,
    dimensions: int | None = None,
    max_tokens: int | None = None,
) -> tuple[list[str], np.ndarray]:
    """Auto-chunking (section 4): the chunk texts (cut from the document as sent) and their vectors, read from
    one encoding of prompt + document (sliced past L; `overlap` as in `late_chunk_vectors`)."""
    checkpoint = load(folder)
    spans = auto_cuts(checkpoint, document, chunk_size, chunk_overlap)
    prompt = _cased(checkpoint, prompt)
    shifted = [(start + len(prompt), end + len(prompt)) for start, end in spans]
    vectors = span_vectors(
        checkpoint, prompt + _cased(checkpoint, document), shifted, limit(checkpoint, max_tokens), overlap, dimensions
    )
    return [document[start:end] for start, end in spans], vectors
