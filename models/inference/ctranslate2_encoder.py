"""CTranslate2 in place of sentence-transformers' Transformer module: the checkpoint's own Pooling, Dense
and Normalize modules still run after it, so pooling has one implementation for every backend."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from config.errors import ModelLoadError
from models.inference.backends import cache_folder

logger = logging.getLogger(__name__)


class CTranslate2Transformer(torch.nn.Module):
    """Token embeddings from a `ctranslate2.Encoder` (BERT-family encoders)."""

    def __init__(self, folder: Path, tokenizer: Any, device: str, compute_type: str) -> None:
        import ctranslate2

        super().__init__()
        self.tokenizer = tokenizer
        self.max_seq_length = tokenizer.model_max_length
        kind, _, index = device.partition(":")
        self.encoder = ctranslate2.Encoder(
            str(converted_model(folder)),
            device=kind,
            device_index=int(index or 0),
            compute_type=compute_type,
            intra_threads=torch.get_num_threads(),
        )
        self._device = device

    def forward(self, features: dict[str, Any]) -> dict[str, Any]:
        import ctranslate2

        ids = features["input_ids"].to(torch.int32).cpu().numpy()
        lengths = features["attention_mask"].sum(dim=1).to(torch.int32).cpu().numpy()
        output = self.encoder.forward_batch(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(ids)),
            ctranslate2.StorageView.from_array(lengths),
            token_type_ids=features["token_type_ids"].tolist() if "token_type_ids" in features else None,
        )
        features["token_embeddings"] = token_embeddings(output.last_hidden_state, self._device)
        return features


def token_embeddings(hidden: Any, device: str) -> torch.Tensor:
    """A CTranslate2 output as a float32 tensor on `device`. bfloat16 (`auto` on an H100 or H200) has no
    array interface, so the output is converted to float32 first, where it lies."""
    import ctranslate2

    if hidden.dtype != ctranslate2.DataType.float32:
        hidden = hidden.to(ctranslate2.DataType.float32)
    if device.startswith("cuda"):
        return torch.as_tensor(hidden, device=device)
    return torch.from_numpy(np.array(hidden))


def converted_model(folder: Path) -> Path:
    """The checkpoint converted for CTranslate2 (float32 weights; the compute type is chosen at load), once."""
    target = cache_folder(folder, "ctranslate2")
    if (target / "model.bin").is_file():
        return target
    logger.info("converting %s for CTranslate2, once", folder)
    scratch = target.parent / f".convert-{target.name}-{os.getpid()}"
    try:
        _converter(folder).convert(str(scratch), force=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(scratch, target)
    except Exception as exc:
        raise ModelLoadError(f"cannot convert {folder} for CTranslate2 (BERT-family encoders only): {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _converter(folder: Path) -> Any:  # ctranslate2.converters.TransformersConverter
    """CTranslate2's converter for transformers 5 checkpoints. Its BERT-family loaders assert
    `config.position_embedding_type == "absolute"`; transformers 5 dropped the setting, as its BERT-family
    models have absolute positions only. A checkpoint whose config.json still names another kind keeps it,
    and the converter refuses it as before."""
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_model(self, model_class: Any, model_name_or_path: str, **kwargs: Any) -> Any:
            model = super().load_model(model_class, model_name_or_path, **kwargs)
            if not hasattr(model.config, "position_embedding_type"):
                model.config.position_embedding_type = "absolute"
            return model

    return Converter(str(folder))
