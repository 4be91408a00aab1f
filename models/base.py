"""The contract every model kind fulfils, and the facts a loaded model reports about itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is; served by `/v1/models` and used to validate requests."""

    served_model_name: str
    model_id: str
    modality: str
    backend: str
    dimension: int
    max_input_tokens: int
    normalized: bool
    device: str
    dtype: str
    capabilities: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Embedder(Protocol):
    """Runs one checkpoint: token ids in, one float32 vector per input out (runner side)."""

    info: ModelInfo

    def embed(self, inputs: list[list[int]]) -> np.ndarray: ...


class Preprocessor(Protocol):
    """Turns request inputs into token ids (gateway side, so usage counts are real tokens)."""

    max_input_tokens: int

    def prompt(self, name: str | None) -> str: ...

    def encode_texts(self, texts: list[str], prompt: str = "") -> list[list[int]]: ...

    def encode_ids(self, inputs: list[list[int]]) -> list[list[int]]: ...
