"""The internal embedding result every embedding route answers from, and what each wire format asks of it:
dense vectors cut to `dimensions`, their codes in a quantized type, or their base64 bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from models.base import ModelInfo
from models.errors import InvalidRequest
from models.postprocess import to_base64, truncate_dimensions
from models.quantization import PRECISIONS, Precision, Quantizer, quantize

if TYPE_CHECKING:
    from gateway.schemas import EmbeddingRequest

OutputType = Literal["float", "base64", "int8", "uint8", "binary", "ubinary"]


@dataclass(frozen=True)
class Embeddings:
    """One output per input, the tokens (or positions) spent, the request, and the model's int8 quantizer."""

    info: ModelInfo
    outputs: list[np.ndarray]
    tokens: int
    request: EmbeddingRequest
    quantizer: Quantizer | None = None

    @property
    def renormalized(self) -> bool:
        """Whether vectors cut to `dimensions` are made unit length again: when the model's are."""
        return self.info.normalized if self.request.normalize is None else self.request.normalize

    def vectors(self) -> np.ndarray:
        """Dense single vectors, (inputs, features), cut to `dimensions` and re-normalized."""
        return truncate_dimensions(np.stack(self.outputs), self.request.dimensions, renormalize=self.renormalized)

    def encoded(self, output_type: OutputType, vectors: np.ndarray) -> list:
        """`vectors` (from `vectors()`) in one output type, one entry per input."""
        if output_type == "float":
            return vectors.tolist()
        if output_type == "base64":
            return [to_base64(v) for v in vectors]
        return self.codes(output_type, vectors).tolist()

    def codes(self, precision: Precision, vectors: np.ndarray) -> np.ndarray:
        """Every route's quantized codes: int8/uint8 by the model's scheme (symmetric unless configured)."""
        if precision in ("int8", "uint8"):
            assert self.quantizer is not None, "checked by check_output_types"
            return self.quantizer.codes(vectors, precision, self.renormalized)
        return quantize(vectors, precision)


Shape = Literal["dense", "sparse", "multi-vector"]
ALL_SHAPES: frozenset[Shape] = frozenset(("dense", "sparse", "multi-vector"))
ROUTES_FOR_SHAPE: dict[Shape, str] = {"dense": "/v1/embeddings", "sparse": "/embed_sparse or /v1/embeddings",
                                      "multi-vector": "/v1/embeddings or /embed"}


def shape_of(info: ModelInfo) -> Shape:
    return "sparse" if info.sparse else "multi-vector" if info.multi_vector else "dense"


def check_output_types(info: ModelInfo, output_types: list[str], quantizer: Quantizer | None,
                       param: str, shapes: frozenset[Shape] = ALL_SHAPES) -> None:
    """Quantized and base64 output need one dense vector per input; int8/uint8 need the model's scale; a
    wire format answers only the output shapes it has room for (`shapes`)."""
    name = info.served_model_name
    quantized = [t for t in output_types if t in PRECISIONS]
    shape = shape_of(info)
    if quantized and shape != "dense":
        raise InvalidRequest(f"model '{name}' is {shape}: {quantized[0]} output applies to dense single vectors",
                             param=param)
    if shape == "sparse" and "base64" in output_types:
        raise InvalidRequest(f"model '{name}' is sparse: its embeddings are indices and values, which have no "
                             "base64 encoding", param=param)
    if shape not in shapes:
        raise InvalidRequest(f"model '{name}' is {shape}, which this route cannot answer; use "
                             f"{ROUTES_FOR_SHAPE[shape]}", param="model")
    if any(t in ("int8", "uint8") for t in quantized) and quantizer is None:
        raise InvalidRequest(f"model '{name}' has no int8/uint8 scale (its calibration failed; see the log)",
                             param=param)
