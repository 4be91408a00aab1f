"""Texts, images, and a text with images as one input -> rows for a vision-language embedder (Qwen3-VL-Embedding);
a text query with a text or image document -> rows for a vision-language reranker (Qwen3-VL-Reranker).

The model card's computation (sentence-transformers 6) frames every input as one user turn of the checkpoint's
chat template (which adds its default instruction as the system turn) and runs it through transformers'
`Qwen3VLProcessor`. That processor cannot be built without torchvision (its video processor requires it), which
does not install beside the CPU build of torch served here (docs/architecture.md: torchvision). So this does
what the processor does, from the same files: the checkpoint's tokenizer renders the chat template, transformers'
PIL image processor (`backend="pil"`) gives the patches and their grids, and each image placeholder becomes the
grid's token count (patches / merge size²), as `Qwen3VLProcessor.replace_image_token` expands it. Videos are not
taken on this path. A reranker's pair is written as sentence-transformers' CrossEncoder writes one: an instruction
as the system message, then a `query` and a `document` message, which the checkpoint's template frames.

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): an input's tokens
with its images and framing are known only once its images are decoded and its template rendered.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from config.errors import InvalidRequest, ModelLoadError
from config.settings import ModelConfig
from models.base import Kind, Modality, ModelInput
from models.kinds import spec
from models.media import MediaLimits, decode_image
from models.preprocessing.per_thread import PerThread
from models.preprocessing.text_settings import read_text_settings
from models.resolve import read_json

# One input: its parts in the client's order, each a text or an image's bytes.
Parts = tuple[tuple[Modality, str | bytes], ...]
Message = dict[str, Any]
IMAGE_TOKEN = "<|image_pad|>"


class VisionLanguageProcessor:
    """The gateway-side preparation of a vision-language embedder. Safe to call from several threads."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind) -> None:
        from transformers import AutoImageProcessor, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=cfg.trust_remote_code)
            images = AutoImageProcessor.from_pretrained(str(folder), backend="pil")
        except Exception as exc:
            raise ModelLoadError(f"cannot load the tokenizer or image processor of '{cfg.model_id}': {exc}") from exc
        template = folder / "chat_template.jinja"
        if template.is_file():
            tokenizer.chat_template = template.read_text()
        if not tokenizer.chat_template:
            raise ModelLoadError(f"'{cfg.model_id}' has no chat template to frame its inputs in")
        self.modalities: list[Modality] = list(spec(kind).modalities)
        self._scores_pairs = spec(kind).scores_pairs
        self._tokenizer: PerThread[Any] = PerThread(tokenizer)
        self._images: PerThread[Any] = PerThread(images)
        self._merge_area = int(images.merge_size) ** 2
        self._image_token_id: int = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)  # type: ignore[assignment]
        settings = read_json(folder / "sentence_bert_config.json")
        chat_kwargs = (settings.get("processing_kwargs") or {}).get("chat_template") or {}
        self._generation_prompt = bool(chat_kwargs.get("add_generation_prompt", False))
        limit = int(settings.get("max_seq_length") or min(tokenizer.model_max_length, 32768))
        self.max_input_tokens = min(limit, cfg.max_seq_length or limit)
        # Its prompts (`config_sentence_transformers.json`): sentence-transformers prepends a non-empty one as the
        # system message, which replaces the chat template's default instruction.
        self._settings = read_text_settings(folder, cfg, tokenizer.model_max_length, self.max_input_tokens)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.pad_left = tokenizer.padding_side == "left"

    def prompt(self, name: str | None, instruction: str | None = None, input_type: str | None = None) -> str:
        """The system prompt a request asks for ("": none, the chat template's default instruction), resolved as
        a text model's (`TextSettings.request_prompt`)."""
        return self._settings.request_prompt(name, instruction, input_type)

    def encode(
        self,
        model: str,
        items: Sequence[Parts],
        limits: MediaLimits,
        prompt: str = "",
        wheres: Sequence[str] | None = None,
        param: str = "input",
    ) -> list[ModelInput]:
        """One row per input, in order, under `prompt` (`prompt`); an unreadable image or an input past the window
        is a 400 naming it by its place in the request (`wheres`, else `input[index]`) and its field `param`."""
        places = wheres if wheres is not None else [f"input[{index}]" for index in range(len(items))]
        return [
            self.row(model, self._decoded(parts, limits, where, param), where, prompt, param)
            for parts, where in zip(items, places)
        ]

    def pair_rows(
        self,
        model: str,
        query: str,
        documents: Sequence[Parts],
        instruction: str | None,
        limits: MediaLimits,
        param: str = "documents",
    ) -> list[ModelInput]:
        """One row per (query, document) pair, in order; an unreadable image or a pair past the window is a 400
        naming the document."""
        wheres = [f"{param}[{index}]" for index in range(len(documents))]
        return [
            self.pair_row(model, query, self._decoded(parts, limits, where, param), instruction, where, param)
            for parts, where in zip(documents, wheres)
        ]

    def calibration_rows(self, model: str, texts: list[str], limits: MediaLimits) -> list[ModelInput]:
        return self.encode(model, [(("text", text),) for text in texts], limits)

    def warmup_rows(self, model: str) -> list[ModelInput]:
        """A text and an image (as documents, for a reranker), so that warm-up runs both towers."""
        from PIL import Image

        image = Image.new("RGB", (64, 48), (200, 120, 40))
        if self._scores_pairs:
            return [
                self.pair_row(model, "warm-up", [("text", "warm-up")], None, "warm-up"),
                self.pair_row(model, "warm-up", [("image", image)], None, "warm-up"),
            ]
        return [self.row(model, [("text", "warm-up")], "warm-up"), self.row(model, [("image", image)], "warm-up")]

    def row(
        self, model: str, parts: Sequence[tuple[Modality, Any]], where: str, prompt: str = "", param: str = "input"
    ) -> ModelInput:
        """One input's row: its parts (texts, PIL images) in one user turn after the prompt's system message, if
        any; image placeholders expanded."""
        system = [_message("system", [("text", prompt)])] if prompt else []
        return self._framed(model, [*system, _message("user", parts)], parts, where, param)

    def pair_row(
        self,
        model: str,
        query: str,
        document: Sequence[tuple[Modality, Any]],
        instruction: str | None,
        where: str,
        param: str = "documents",
    ) -> ModelInput:
        """A (query, document) pair's row: the instruction's system message if any, the query's and the document's."""
        system = [_message("system", [("text", instruction)])] if instruction else []
        messages = [*system, _message("query", [("text", query)]), _message("document", document)]
        return self._framed(model, messages, document, where, param)

    def _framed(
        self, model: str, messages: list[Message], parts: Sequence[tuple[Modality, Any]], where: str, param: str
    ) -> ModelInput:
        """The messages through the chat template, with the images among `parts` processed and their placeholders
        expanded to their token counts."""
        tokenizer = self._tokenizer.get()
        prompt: str = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=self._generation_prompt
        )
        images = [value for modality, value in parts if modality == "image"]
        arrays: dict[str, np.ndarray] = {}
        if images:
            processed = self._images.get()(images, return_tensors="np")
            grids = np.asarray(processed["image_grid_thw"], dtype=np.int64)
            arrays["pixel_values"] = np.asarray(processed["pixel_values"], dtype=np.float32)
            arrays["image_grid_thw"] = grids
            prompt = _expand_images(prompt, [int(grid.prod()) // self._merge_area for grid in grids])
        ids = np.asarray(tokenizer(prompt, add_special_tokens=False)["input_ids"], dtype=np.int64)
        if len(ids) > self.max_input_tokens:
            raise InvalidRequest(
                f"{where} is {len(ids)} tokens with its images and framing; model '{model}' takes at most "
                f"{self.max_input_tokens}",
                param=param,
            )
        arrays["input_ids"], arrays["attention_mask"] = ids, np.ones_like(ids)
        # Which positions are image tokens (1; text 0), as the processor returns them: multimodal RoPE reads them.
        arrays["mm_token_type_ids"] = (ids == self._image_token_id).astype(np.int64)
        modality: Modality = "image" if images else "text"
        return ModelInput(model=model, modality=modality, arrays=arrays, length=len(ids))

    def _decoded(
        self, parts: Parts, limits: MediaLimits, where: str, param: str = "input"
    ) -> list[tuple[Modality, Any]]:
        if any(modality not in self.modalities for modality, _ in parts):
            raise InvalidRequest(f"{where}: this model takes {self.modalities}", param=param)
        return [
            (modality, decode_image(value, limits, where, param) if isinstance(value, bytes) else value)
            for modality, value in parts
        ]


def _message(role: str, parts: Sequence[tuple[Modality, Any]]) -> Message:
    """One message in the structured format sentence-transformers writes: a text or image item per part."""
    content = [{"type": "text", "text": value} if m == "text" else {"type": "image"} for m, value in parts]
    return {"role": role, "content": content}


def _expand_images(prompt: str, token_counts: list[int]) -> str:
    """Each image placeholder, in order, repeated as many times as its image has tokens after merging."""
    pieces = prompt.split(IMAGE_TOKEN)
    if len(pieces) != len(token_counts) + 1:
        raise ModelLoadError(f"the chat template rendered {len(pieces) - 1} image placeholders for {len(token_counts)}")
    expanded = [pieces[0]]
    for count, piece in zip(token_counts, pieces[1:]):
        expanded += [IMAGE_TOKEN * count, piece]
    return "".join(expanded)
