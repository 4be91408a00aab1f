"""Rows -> the padded batch tensors a transformers model takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from models.base import TokenizedText

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def pad_rows(
    rows: Sequence[TokenizedText], tokenizer: PreTrainedTokenizerBase, device: Any, non_blocking: bool = False
) -> dict[str, Any]:
    """`input_ids`, `attention_mask` and, where the tokenizer gives them, `token_type_ids`, padded on the
    tokenizer's side with its pad id. Rows without segment ids (single texts) get zeros, as the tokenizer itself
    would give them; a model whose tokenizer has none gets none (ModernBERT's forward refuses them).
    `non_blocking` (torch models only, see `models.inference.transfer.to_device`): copied to a GPU without waiting."""
    segmented = "token_type_ids" in tokenizer.model_input_names or any(r.token_type_ids is not None for r in rows)
    items = []
    for row in rows:
        ids = np.asarray(row.input_ids, dtype=np.int64)
        item = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if segmented:
            item["token_type_ids"] = (
                np.zeros_like(ids) if row.token_type_ids is None else np.asarray(row.token_type_ids, np.int64)
            )
        items.append(item)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return collate(items, pad_id, tokenizer.padding_side == "left", device, non_blocking=non_blocking)


def padded_ids(rows: Sequence[TokenizedText], pad_id: int, pad_left: bool) -> dict[str, np.ndarray]:
    """`pad_rows` in numpy, for ONNX Runtime without torch (`models.inference.onnx_encoder`): `input_ids`,
    `attention_mask` and `token_type_ids` (zeros for single texts), int64, padded on `pad_left`'s side."""
    width = max(row.length for row in rows)
    batch = {name: np.zeros((len(rows), width), np.int64) for name in ("attention_mask", "token_type_ids")}
    batch["input_ids"] = np.full((len(rows), width), pad_id, np.int64)
    for index, row in enumerate(rows):
        at = slice(width - row.length, width) if pad_left else slice(0, row.length)
        batch["input_ids"][index, at] = row.input_ids
        batch["attention_mask"][index, at] = 1
        if row.token_type_ids is not None:
            batch["token_type_ids"][index, at] = row.token_type_ids
    return batch


def collate(
    items: Sequence[dict[str, Any]],
    pad_id: int,
    pad_left: bool,
    device: Any,
    float_dtype: Any = None,
    non_blocking: bool = False,
) -> dict[str, Any]:
    """Per-item processor arrays -> batch tensors. Equal shapes stack; unequal ones (token sequences,
    ColQwen2's patch lists) are padded along their first axis, ids with `pad_id` and the rest with 0, on
    the tokenizer's side, as the processor would pad a batch. Floating-point arrays (pixels, audio
    features), which processors give in float32, become `float_dtype`: the model's, which a bf16 model
    needs (CLAP's BatchNorm refuses float32 input)."""
    import torch

    from models.inference.transfer import to_device

    batch: dict[str, Any] = {}
    for key in items[0]:
        arrays = [np.asarray(item[key]) for item in items]
        if all(a.shape == arrays[0].shape for a in arrays):
            stacked = np.stack(arrays)
        else:
            width = max(len(a) for a in arrays)
            fill = pad_id if key == "input_ids" else 0
            stacked = np.full((len(arrays), width, *arrays[0].shape[1:]), fill, dtype=arrays[0].dtype)
            for row, a in enumerate(arrays):
                if pad_left:
                    stacked[row, width - len(a) :] = a
                else:
                    stacked[row, : len(a)] = a
        tensor = torch.from_numpy(stacked)
        batch[key] = to_device(tensor, device, float_dtype if tensor.is_floating_point() else None, non_blocking)
    return batch
