"""A checkpoint's transformer alone, for models whose own heads read its final token states (ColBERT's
projection, BGE-M3's three heads) and whose folders sentence-transformers cannot load whole (PyLate's Dense
class, FlagEmbedding's head files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config.settings import ModelConfig


def load_transformer(folder: Path, cfg: ModelConfig) -> tuple[Any, str, str]:
    """The folder's transformer as a one-module SentenceTransformer on the configured device, backend (torch or
    ONNX Runtime) and dtype, with (device, dtype name): `model(features)["token_embeddings"]` are its states."""
    from models.inference.device import load_on_device

    return load_on_device(_transformer_only, folder, cfg, "feature-extraction")


def _transformer_only(
    path: str,
    *,
    device: str,
    trust_remote_code: bool,
    local_files_only: bool,
    backend: str = "torch",
    model_kwargs: dict[str, Any] | None = None,
) -> Any:
    """`load_on_device`'s model class: its arguments, a SentenceTransformer of the Transformer module only."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules.transformer import Transformer

    shared = {"trust_remote_code": trust_remote_code, "local_files_only": local_files_only}
    module = Transformer(
        path,
        backend=backend,
        model_kwargs={**(model_kwargs or {}), **shared},
        processor_kwargs=shared,
        config_kwargs=shared,
    )
    return SentenceTransformer(modules=[module], device=device)


def row_offsets(width: int, lengths: list[int], left_padded: bool) -> list[int]:
    """Where each row's tokens start in a padded batch of `width` positions."""
    return [width - length if left_padded else 0 for length in lengths]
