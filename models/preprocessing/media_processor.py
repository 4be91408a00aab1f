"""Texts, images and audio -> model-ready arrays for multimodal models (CLIP family, CLAP, ColPali).

The checkpoint's own `AutoProcessor` does the work. Runs in the gateway, one item at a time so each row
keeps its own length; the model service pads and stacks rows into batches (`models.inference.padding.collate`).

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): the modalities the
checkpoint's processor takes (a guard behind `check_modalities`, which refuses first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.errors import InvalidRequest, ModelLoadError
from config.settings import ModelConfig
from models.base import Kind, Modality, ModelInput
from models.kinds import spec
from models.media import MediaLimits, decode_audio, decode_image
from models.preprocessing.per_thread import PerThread
from models.preprocessing.text_settings import text_limit
from models.resolve import read_json

# SigLIP reads its text embedding at the last position: it was trained on text padded to 64 tokens.
PADDED_TEXT = {"siglip": 64, "siglip2": 64}


class MediaProcessor:
    """The gateway-side preprocessing of one multimodal checkpoint. Safe to call from several threads."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind) -> None:
        from transformers import AutoProcessor

        try:
            processor = AutoProcessor.from_pretrained(str(folder), trust_remote_code=cfg.trust_remote_code)
        except Exception as exc:
            raise ModelLoadError(f"cannot load the processor of '{cfg.model_id}': {exc}") from exc
        self.spec = spec(kind)
        self.modalities: list[Modality] = list(self.spec.modalities)
        self._per_thread = PerThread(processor)
        tokenizer = processor.tokenizer
        config = read_json(folder / "config.json")
        self._model_type = config.get("model_type", "")
        limit = text_limit(folder, tokenizer.model_max_length, cfg.trust_remote_code)
        self.max_input_tokens = min(limit, cfg.max_seq_length or limit)
        self._query_overrun = _query_overrun(processor) if self.spec.processor_prompts else 0
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.pad_left = tokenizer.padding_side == "left"
        extractor = getattr(processor, "feature_extractor", None)
        takes_audio = "audio" in self.modalities
        self.sampling_rate: int | None = getattr(extractor, "sampling_rate", None) if takes_audio else None
        self._audio_window = getattr(extractor, "nb_max_samples", None)

    @property
    def _processor(self) -> Any:
        return self._per_thread.get()

    def encode(
        self,
        model: str,
        items: list[tuple[Modality, str | bytes]],
        limits: MediaLimits,
        wheres: Sequence[str] | None = None,
        param: str = "input",
    ) -> list[ModelInput]:
        """Rows for a request's items, in order: texts, and image or audio bytes (decoded here; an item that cannot
        be is named by its place in the request, `wheres`, and its field `param`)."""
        decoded = decode_items(items, self.sampling_rate, limits, wheres, param)
        rows: dict[int, ModelInput] = {}
        for modality in {modality for modality, _ in decoded}:
            indices = [i for i, (m, _) in enumerate(decoded) if m == modality]
            for index, row in zip(indices, self.rows(model, modality, [decoded[i][1] for i in indices])):
                rows[index] = row
        return [rows[index] for index in range(len(decoded))]

    def calibration_rows(self, model: str, texts: list[str], limits: MediaLimits) -> list[ModelInput]:
        return self.encode(model, [("text", text) for text in texts], limits)

    def warmup_rows(self, model: str) -> list[ModelInput]:
        """One row per modality the model takes, so that warm-up runs every tower (and each input's dtype)."""
        return [row for modality in self.modalities for row in self.rows(model, modality, [self._sample(modality)])]

    def _sample(self, modality: Modality) -> Any:
        if modality == "image":
            from PIL import Image

            return Image.new("RGB", (64, 48), (200, 120, 40))
        if modality == "audio":
            rate = self.sampling_rate or 16000
            return (0.1 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)).astype(np.float32)  # 1 s of A4
        return "warm-up"

    def rows(self, model: str, modality: Modality, items: list[Any]) -> list[ModelInput]:
        """Rows for texts (str), images (PIL, RGB) or audio (mono float32 at `sampling_rate`)."""
        if modality not in self.modalities:
            raise InvalidRequest(f"model '{model}' takes {self.modalities}, not {modality}", param="input")
        converters: dict[Modality, Callable[[list[Any]], list[dict[str, np.ndarray]]]] = {
            "text": self._text,
            "image": self._image,
            "audio": self._audio,
        }
        arrays = converters[modality](items)
        return [ModelInput(model=model, modality=modality, arrays=a, length=_length(a)) for a in arrays]

    def _text(self, texts: list[str]) -> list[dict[str, np.ndarray]]:
        if self.spec.processor_prompts:  # its query template (prefix, augmentation tokens), cut at the limit
            return [self._query(text) for text in texts]
        padded = PADDED_TEXT.get(self._model_type)
        encoded = self._processor.tokenizer(
            texts,
            truncation=True,
            max_length=padded or self.max_input_tokens,
            padding="max_length" if padded else False,
            return_attention_mask=True,
            return_token_type_ids=False,
        )
        return [
            {"input_ids": np.asarray(ids, dtype=np.int64), "attention_mask": np.asarray(mask, dtype=np.int64)}
            for ids, mask in zip(encoded["input_ids"], encoded["attention_mask"])
        ]

    def _query(self, text: str) -> dict[str, np.ndarray]:
        """One query as its processor frames and cuts it, `max_input_tokens` long at most."""
        budget = max(self.max_input_tokens - self._query_overrun, 1)
        arrays = _first(
            self._processor.process_queries(text=[text], return_tensors="pt", truncation=True, max_length=budget)
        )
        # A limit below the overrun (ColPali's 1024 image tokens) is left to cut here: its processor cannot.
        return {key: value[: self.max_input_tokens] for key, value in arrays.items()}

    def _image(self, images: list[Any]) -> list[dict[str, np.ndarray]]:
        if self.spec.processor_prompts:  # its image prompt around the image tokens (and its crops' markers)
            return [_first(self._processor.process_images(images=[image], return_tensors="pt")) for image in images]
        pixels = self._processor.image_processor(images, return_tensors="np")["pixel_values"]
        return [{"pixel_values": p} for p in pixels]

    def _audio(self, waveforms: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
        # CLAP crops longer audio at a random offset; keeping the first window makes embeddings repeatable.
        clipped = [w[: self._audio_window] if self._audio_window else w for w in waveforms]
        features = self._processor.feature_extractor(clipped, sampling_rate=self.sampling_rate, return_tensors="np")
        return [{key: features[key][i] for key in features} for i in range(len(waveforms))]


def _query_overrun(processor: Any) -> int:
    """Tokens a query's processor keeps past the `max_length` it is given: transformers 5's ColPaliProcessor adds
    its `image_seq_length` to a query's `max_length` too, though a query has no image tokens."""
    from transformers import ColPaliProcessor

    return processor.image_seq_length if isinstance(processor, ColPaliProcessor) else 0


def _first(encoded: Any) -> dict[str, np.ndarray]:
    """One item's arrays from a batch of one (ColQwen2's processor only batches torch tensors)."""
    return {key: value[0].numpy() for key, value in encoded.items()}


def _length(arrays: dict[str, np.ndarray]) -> int:
    """Positions the model runs over, for batch planning: tokens, else one unit per image or clip."""
    if "input_ids" in arrays:
        return int(arrays["input_ids"].shape[-1])
    return 1


def decode_items(
    items: list[tuple[Modality, str | bytes]],
    sampling_rate: int | None,
    limits: MediaLimits,
    wheres: Sequence[str] | None = None,
    param: str = "input",
) -> list[tuple[Modality, Any]]:
    """Texts stay; image and audio bytes become PIL images and mono waveforms (each error names its item: by
    `wheres`, else `input[index]`)."""
    decoded: list[tuple[Modality, Any]] = []
    for index, (modality, value) in enumerate(items):
        where = wheres[index] if wheres is not None else f"input[{index}]"
        if modality == "image":
            assert isinstance(value, bytes), "images come as bytes"
            decoded.append((modality, decode_image(value, limits, where, param)))
        elif modality == "audio":
            assert isinstance(value, bytes), "audio comes as bytes"
            decoded.append((modality, decode_audio(value, sampling_rate or 0, limits, where, param)))
        else:
            decoded.append((modality, value))
    return decoded
