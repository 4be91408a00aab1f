"""The internal results the engine answers with, one per operation. Each holds its query (never a wire body),
so an adapter writes its answer from the result alone."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gateway.queries import ClassifyQuery, EmbedQuery, OutputType, RankQuery, TokenizeQuery
from models.base import ModelInfo, Representation
from models.postprocess import keep_largest, to_base64, truncate_dimensions
from models.preprocessing.text_tokenizer import Token
from models.quantization import Precision, Quantizer, quantize


@dataclass(frozen=True)
class Embeddings:
    """One output per input, the tokens (or positions) spent, and the model's int8/uint8 quantizer if any."""

    query: EmbedQuery
    info: ModelInfo
    outputs: list[np.ndarray]
    tokens: int
    quantizer: Quantizer | None = None
    # With `output_types`: each input's asked representations by name (`outputs` are then their packed form).
    parts: list[dict[Representation, np.ndarray]] | None = None
    cached_tokens: int | None = None  # the tokens of the inputs the cache answered; None: it was not asked

    @property
    def model(self) -> str:
        """The model's name as the request gave it (an alias stays an alias), else the model's own."""
        return self.query.model or self.info.served_model_name

    def of(self, representation: Representation) -> list[np.ndarray]:
        """Each input's output of one representation: an asked one, else (no `output_types`) the model's own."""
        if self.parts is None:
            return self.outputs
        return [part[representation] for part in self.parts]

    @property
    def renormalized(self) -> bool:
        """Whether vectors cut to `dimensions` are made unit length again: when the model's are."""
        return self.info.normalized if self.query.normalize is None else self.query.normalize

    def vectors(self) -> np.ndarray:
        """Dense single vectors, (inputs, features), cut to `dimensions` and re-normalized."""
        return truncate_dimensions(np.stack(self.of("dense")), self.query.dimensions, renormalize=self.renormalized)

    def encoded(self, output_type: OutputType, vectors: np.ndarray) -> list:
        """`vectors` (from `vectors()`) in one output type, one entry per input: a float32 or codes array, for
        `gateway.wire.common.json_answer` to write, or a base64 string."""
        if output_type == "float":
            return list(np.asarray(vectors, dtype=np.float32))
        if output_type == "base64":
            return [to_base64(v) for v in vectors]
        return list(self.codes(output_type, vectors))

    def codes(self, precision: Precision, vectors: np.ndarray) -> np.ndarray:
        """Every route's quantized codes: int8/uint8 by the model's scheme (symmetric unless configured)."""
        if precision in ("int8", "uint8"):
            assert self.quantizer is not None, "checked by gateway.validation.check_embed"
            return self.quantizer.codes(vectors, precision, self.renormalized)
        return quantize(vectors, precision)

    def sparse_entries(self) -> list[np.ndarray]:
        """Per input of a sparse model, its (2, active) [indices; weights], the largest `max_active_dims`."""
        return [keep_largest(output, self.query.max_active_dims) for output in self.of("sparse")]


@dataclass(frozen=True)
class ContextEmbeddings:
    """Every chunk's vector, documents in order (`embeddings`, one output per chunk), how many chunks each
    document has, and with auto-chunking each chunk's text."""

    embeddings: Embeddings
    chunk_counts: list[int]
    texts: list[str] | None = None

    def by_document(self) -> list[range]:
        """Each document's chunks as positions in `embeddings`."""
        starts = [sum(self.chunk_counts[:i]) for i in range(len(self.chunk_counts))]
        return [range(start, start + count) for start, count in zip(starts, self.chunk_counts)]


@dataclass(frozen=True)
class Ranking:
    """Scores by document (in the query's order), the order best first (cut to `top_n`), and the tokens spent."""

    query: RankQuery
    info: ModelInfo
    order: list[int]
    scores: list[float]
    tokens: int
    mode_scores: dict[str, list[float]] | None = None  # every score mode's, by document (`return_scores`)
    cached_tokens: int | None = None  # as `Embeddings.cached_tokens`

    def scores_of(self, document: int) -> dict[str, float] | None:
        """One document's score by every mode, when the query asked for them."""
        if self.mode_scores is None:
            return None
        return {mode: scores[document] for mode, scores in self.mode_scores.items()}

    @property
    def documents(self) -> tuple[str, ...]:
        return self.query.documents

    @property
    def model(self) -> str:
        """As `Embeddings.model`."""
        return self.query.model or self.info.served_model_name


@dataclass(frozen=True)
class Classified:
    """Every label's score per input, (inputs, labels) in `info.labels` order, and the tokens spent."""

    query: ClassifyQuery
    info: ModelInfo
    scores: np.ndarray
    tokens: int
    cached_tokens: int | None = None  # as `Embeddings.cached_tokens`

    @property
    def model(self) -> str:
        """As `Embeddings.model`."""
        return self.query.model or self.info.served_model_name


@dataclass(frozen=True)
class Tokens:
    """Each text's tokens, with their ids, texts and character offsets."""

    query: TokenizeQuery
    tokens: list[list[Token]]
