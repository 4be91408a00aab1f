"""The contract every model kind fulfils, the rows it runs on, and the facts it reports about itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, PlainSerializer, PlainValidator, WithJsonSchema

from models.batching import BatchLimits
from models.kinds import (  # Kind, Modality and Representation are imported from here too
    KIND_SPECS,
    Kind,
    KindSpec,
    Modality,
    Representation,
    Scorer,
)

if TYPE_CHECKING:
    from config.settings import ModelConfig
    from models.media import MediaLimits
# How raw outputs become scores: the names `models.scores.activate` knows.
Activation = Literal["identity", "sigmoid", "softmax", "tanh"]

# A model service's answer for a row of a model it does not hold (unloaded or evicted as the row travelled): the
# gateway answers a 503 to retry, where a failed row (an empty float32 array) is the model's failure.
NOT_LOADED = np.empty(0, dtype=np.int8)


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is; served by `/v1/models` and used to validate requests."""

    served_model_name: str
    model_id: str
    kind: Kind
    modalities: list[str]
    backend: str
    dimension: int  # features per input (per token, for multi-vector models; the vocabulary, for sparse ones)
    # or the number of labels
    max_input_tokens: int
    normalized: bool
    device: str
    dtype: str
    labels: list[str] = field(default_factory=list)
    activation: Activation = "identity"
    scorer: Scorer | None = None  # how a reranker or classifier scores (`models.kinds.model_scorer`)
    backend_reason: str = (
        "configured"  # why `backend` runs it (`backend: auto` decides: `models.inference.auto_backend`)
    )
    # The pass limits in force (configured, or sized for the device); set by the model service after loading.
    batch_size: int = 0
    max_batch_tokens: int = 0
    pass_budget_ms: float = 0.0  # the call time budget beside live queries (`models.batching.pass_budget_ms`)
    # Its service runs live queries' calls beside its batches, on a thread of their own (`runners.pool.ModelPool`).
    live_lane: bool = False
    # Its task adapters (`models.adapters`), what a request's `task` picks; [] for a model without.
    tasks: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, cfg: ModelConfig, kind: Kind, **facts: Any) -> ModelInfo:
        """A loaded model's info: what its configuration says, and the `facts` its class found on loading
        (its kind's modalities unless it says otherwise)."""
        return cls(
            served_model_name=cfg.served_model_name,
            model_id=cfg.model_id,
            kind=kind,
            backend=cfg.backend,
            **{"modalities": list(KIND_SPECS[kind].modalities), **facts},
        )

    @property
    def spec(self) -> KindSpec:
        return KIND_SPECS[self.kind]

    @property
    def pass_limits(self) -> BatchLimits | None:
        """Its pass limits, once its model service has reported them (warm-up); None before."""
        return (
            BatchLimits(self.batch_size, self.max_batch_tokens) if self.batch_size and self.max_batch_tokens else None
        )

    @property
    def capabilities(self) -> list[str]:
        """What a request may ask of it."""
        return list(self.spec.capabilities)

    @property
    def sparse(self) -> bool:
        """One weight per vocabulary entry, most of them zero (SPLADE): sent as indices and values."""
        return self.spec.output == "sparse"

    @property
    def multi_vector(self) -> bool:
        """One vector per token or patch (ColPali), not one per input."""
        return self.spec.output == "multi-vector"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class TokenizedText(BaseModel):
    """One input row on its way to a model: which model, its token ids, and (for pairs) its segment ids."""

    model: str
    input_ids: list[int]
    token_type_ids: list[int] | None = None
    # Leading tokens (special tokens and the prompt) that a pooling with `include_prompt: false` leaves out.
    prompt_length: int = 0
    normalize: bool | None = None  # unit length, or the raw pooled vector; None: as the model does
    # Late chunking: instead of the pooled vector, the sums of the final token states over these [start, stop)
    # positions of `input_ids`, one row of a (spans, features) output each; None: the pooled vector.
    spans: list[tuple[int, int]] | None = None
    # A model with several representations (BGE-M3): the ones this row wants, packed into its one output
    # (`models.packing`); None: its dense vector alone, as any embedder's.
    representations: tuple[Representation, ...] | None = None
    # ColBERT (PyLate): a query keeps a vector for every token, its trailing `expansion` mask tokens included
    # (attended to only where the model says so); a document drops its skiplist tokens.
    is_query: bool = False
    expansion: int = 0
    # The task adapter this row runs through (`models.adapters`); None: the base model alone.
    task: str | None = None
    request_id: str = ""  # rows of an abandoned request are dropped by this id

    @property
    def length(self) -> int:
        return len(self.input_ids)

    @classmethod
    def rows(
        cls, model: str, token_ids: list[list[int]], segments: list[list[int]] | None = None, **shared: Any
    ) -> list[TokenizedText]:
        """One row per input, with its segment ids when given (pairs) and the fields all rows share."""
        if segments is None:
            return [cls(model=model, input_ids=ids, **shared) for ids in token_ids]
        return [cls(model=model, input_ids=ids, token_type_ids=types) for ids, types in zip(token_ids, segments)]


# A numpy array inside a pydantic model: kept as is between model services (pickled), a nested list in JSON.
Array = Annotated[
    np.ndarray,
    PlainValidator(np.asarray),
    PlainSerializer(lambda a: a.tolist(), when_used="json"),
    WithJsonSchema({"type": "array", "items": {}}),
]


class ModelInput(BaseModel):
    """One input row for a multimodal model service: the processor's arrays for one text, image or audio
    clip (no batch axis), and the positions the model runs over (tokens or patches) for batch planning."""

    model_config = ConfigDict(protected_namespaces=())

    model: str
    modality: Modality
    arrays: dict[str, Array]
    length: int
    request_id: str = ""  # rows of an abandoned request are dropped by this id


class Row(Protocol):
    model: str
    request_id: str

    @property
    def length(self) -> int: ...


class TokenModel(Protocol):
    """Runs one checkpoint (model-service side): one float32 output per input row, in order: a vector for
    embedders, logits (one per label) for scorers, a (tokens, dim) matrix for multi-vector models, and for
    sparse models a (2, active) matrix: the active vocabulary indices (ascending) over their weights.

    A model may also offer `launch(rows) -> PendingOutputs`: the pass queued on its device and its outputs
    on their way back, without waiting (models/inference/transfer.py); `forward` is then `launch(rows).wait()`. On a
    GPU the pool launches every pass of a call before it waits, so the device never idles for the host.

    Each class is built as `Class(folder, cfg, kind)`: its kind's `KindSpec.loader`
    (`models.inference.auto_backend.load_model`)."""

    info: ModelInfo

    def forward(self, rows: Sequence[Any]) -> Sequence[np.ndarray]: ...


class PendingOutputs(Protocol):
    """A launched pass's outputs; `wait` returns them once they are on the host: one array whose first axis
    is the rows, or one array per row."""

    def wait(self) -> np.ndarray | Sequence[np.ndarray]: ...


@dataclass(frozen=True)
class Truncation:
    """What a request asks of input longer than the model takes (TEI's `truncate`, `truncation_direction`):
    cut it, from this side (None: the tokenizer's own), or refuse it."""

    enabled: bool = True
    side: Literal["right", "left"] | None = None
    max_tokens: int | None = None  # a shorter limit than the model's (Cohere's `max_tokens`)


class Preprocessor(Protocol):
    """The gateway-side preparation of a kind's inputs (`KindSpec.preprocessor`), built as `Class(folder, cfg, kind)`:
    what warm-up and int8 calibration ask of each, whatever its inputs."""

    max_input_tokens: int

    def warmup_rows(self, model: str) -> list[Any]:
        """Rows through every modality the model takes (and for several representations, one asking all)."""
        ...

    def calibration_rows(self, model: str, texts: list[str], limits: MediaLimits) -> list[Any]:
        """Rows embedding `texts` as the model embeds documents: what int8/uint8 calibration runs."""
        ...
