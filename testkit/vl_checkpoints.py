"""A tiny Qwen3-VL-Embedding, made the way the real one is, and the model card's own computation on it.

The builder needs torchvision: transformers 5 builds `Qwen3VLProcessor` only with its video processor, which
requires it. It therefore runs in the Qwen3-VL reference venv (`.venv-vl-reference`, `make vl-reference-venv`),
which the tests call as `python -m testkit.vl_checkpoints build|encode ...`. It imports nothing of the project.

The layout is the real repository's: `Qwen3VLForConditionalGeneration` weights and config, the Qwen tokenizer with
its vision specials and a chat template that frames every input under the default instruction ("Represent the
user's input." as the system turn), `preprocessor_config.json` and `video_preprocessor_config.json`, and
sentence-transformers 6's modules (Transformer with the structured message format and `add_generation_prompt`,
last-token Pooling, Normalize), saved by sentence-transformers itself.

The tiny Qwen3-VL-Reranker is the same architecture as sentence-transformers 6 saves a CrossEncoder over a VLM:
a Transformer module with `transformer_task="any-to-any"` (`Qwen3VLForConditionalGeneration`, its LM head) and
`LogitScore` over the "yes" and "no" tokens, with a chat template that renders the pair's `query` and `document`
messages (texts and images) in the Qwen3-Reranker card's judge prompt. The real repository's template could not
be fetched here; this one follows the text reranker's card and is named as reconstructed in docs/models.md.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

DEFAULT_INSTRUCTION = "Represent the user's input."
# The model card's query instruction, saved as the "query" prompt (sentence-transformers makes it the system message).
QUERY_PROMPT = "Retrieve images or text relevant to the user's query."
# Qwen3-VL's chat template reduced to what an embedder renders: the default instruction as the system turn when
# the messages bring none, then each turn's text and its images' (and videos') vision placeholders in order.
QWEN3_VL_EMBEDDING_CHAT_TEMPLATE = (
    "{%- macro render(content) -%}{%- if content is string -%}{{- content -}}{%- else -%}"
    "{%- for item in content -%}"
    "{%- if item.type == 'image' or 'image' in item -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item.type == 'video' or 'video' in item -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}{{- item.text -}}{%- endif -%}{%- endfor -%}{%- endif -%}{%- endmacro -%}"
    "{%- if messages[0].role != 'system' -%}"
    "{{- '<|im_start|>system\\n' -}}{{- \"" + DEFAULT_INSTRUCTION + "\" -}}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}{{- render(message.content) -}}{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
RERANK_INSTRUCTION = "Given a search query, retrieve relevant candidates that answer the query."
RERANK_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
# The pair as sentence-transformers writes it (an optional system message with the instruction, then the query's
# and the document's messages), in the judge prompt; the assistant's empty thinking block ends the prompt, so the
# next token's "yes" against "no" logit scores the pair.
QWEN3_VL_RERANKER_CHAT_TEMPLATE = (
    "{%- macro render(content) -%}{%- if content is string -%}{{- content -}}{%- else -%}"
    "{%- for item in content -%}"
    "{%- if item.type == 'image' or 'image' in item -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item.type == 'video' or 'video' in item -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}{{- item.text -}}{%- endif -%}{%- endfor -%}{%- endif -%}{%- endmacro -%}"
    '{%- set ns = namespace(instruction="' + RERANK_INSTRUCTION + "\", query='', document='') -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}{%- set ns.instruction = render(message.content) -%}"
    "{%- elif message.role == 'query' -%}{%- set ns.query = render(message.content) -%}"
    "{%- elif message.role == 'document' -%}{%- set ns.document = render(message.content) -%}{%- endif -%}"
    "{%- endfor -%}"
    "{{- '<|im_start|>system\\n' + '" + RERANK_SYSTEM + "' + '<|im_end|>\\n<|im_start|>user\\n' -}}"
    "{{- '<Instruct>: ' + ns.instruction + '\\n<Query>: ' + ns.query + '\\n<Document>: ' + ns.document -}}"
    "{{- '<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' -}}"
)
QWEN3_VL_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
WORDS = (
    "the a of and to in is for on with that by this as are be from at or an was it you image picture photo "
    "red green blue cat dog house tree car sky water city street night day person people text page chart "
    "represent user input system assistant retrieve relevant query yes no judge whether document meets "
    "requirements based instruct provided note answer can only be given search candidates think"
)
# The real repository's pixel bounds for images (its preprocessor_config.json), scaled down to a tiny model:
# 32-pixel cells (patch 16, merge 2), at least 4 and at most 64 of them.
PATCH, MERGE = 16, 2
MIN_PIXELS, MAX_PIXELS = 4 * 32 * 32, 64 * 32 * 32


def qwen3_vl_tokenizer(chat_template: str = QWEN3_VL_EMBEDDING_CHAT_TEMPLATE):  # -> Qwen2TokenizerFast
    """A byte-level BPE with Qwen's vision specials, padding on the left, and the chat template (the embedder's
    unless given); "yes" and "no" are whole tokens, as in Qwen's vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import Qwen2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500, special_tokens=QWEN3_VL_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator([WORDS, DEFAULT_INSTRUCTION, "yes", "no"] * 3, trainer)
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    return Qwen2TokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        padding_side="left",
        model_max_length=262144,
        additional_special_tokens=QWEN3_VL_SPECIALS[1:],
        chat_template=chat_template,
    )


def qwen3_vl_config(tokenizer: Any):  # -> Qwen3VLConfig
    """Small text and vision towers of the real architecture: multimodal RoPE, DeepStack on one vision layer."""
    from transformers import Qwen3VLConfig

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN3_VL_SPECIALS}
    return Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 4096,
            "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True},
            "rope_theta": 5e6,
            "tie_word_embeddings": True,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": 2,
            "out_hidden_size": 64,
            "num_position_embeddings": 144,
            "deepstack_visual_indexes": [1],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )


def _save_base(plain: Path, chat_template: str, seed: int) -> list[Any]:
    """The VLM and its processor, saved by transformers into `plain`; returns the image and video processors."""
    import torch
    from transformers import (
        Qwen2VLImageProcessor,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    tokenizer = qwen3_vl_tokenizer(chat_template)
    torch.manual_seed(seed)
    Qwen3VLForConditionalGeneration(qwen3_vl_config(tokenizer)).eval().save_pretrained(plain)
    size = {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
    shape = {"patch_size": PATCH, "merge_size": MERGE, "temporal_patch_size": 2}
    image_processor = Qwen2VLImageProcessor(size=size, **shape, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    video_processor = Qwen3VLVideoProcessor(size=size, **shape, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=chat_template,
    )
    processor.save_pretrained(plain)
    return [image_processor, video_processor]


def _finish(folder: Path, plain: Path, processors: list[Any]) -> Path:
    # The real repositories carry each processor's own file beside processor_config.json.
    for processor in processors:
        processor.save_pretrained(str(folder))
    shutil.rmtree(plain)
    return folder


def build_qwen3_vl_embedder(folder: Path, seed: int = 50) -> Path:
    """The tiny embedder in the real repository's layout (needs torchvision: run in `.venv-vl-reference`)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    plain = folder / "transformers"
    processors = _save_base(plain, QWEN3_VL_EMBEDDING_CHAT_TEMPLATE, seed)
    transformer = Transformer(
        str(plain),
        max_seq_length=4096,
        processing_kwargs={"chat_template": {"add_generation_prompt": True}},
    )
    width = transformer.get_embedding_dimension()
    embedder = SentenceTransformer(
        modules=[transformer, Pooling(width, pooling_mode="lasttoken"), Normalize()],
        device="cpu",
        prompts={"query": QUERY_PROMPT, "document": ""},
    )
    embedder.save_pretrained(str(folder))
    return _finish(folder, plain, processors)


def build_qwen3_vl_reranker(folder: Path, seed: int = 51) -> Path:
    """The tiny reranker as sentence-transformers 6 saves a CrossEncoder over a VLM: an any-to-any Transformer
    (the conditional-generation model with its LM head) and `LogitScore` over "yes" and "no"."""
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.cross_encoder.modules import LogitScore

    plain = folder / "transformers"
    processors = _save_base(plain, QWEN3_VL_RERANKER_CHAT_TEMPLATE, seed)
    transformer = Transformer(str(plain), transformer_task="any-to-any", max_seq_length=4096)
    tokens = transformer.tokenizer.convert_tokens_to_ids(["yes", "no"])
    reranker = CrossEncoder(modules=[transformer, LogitScore(tokens[0], tokens[1])], device="cpu")
    reranker.save_pretrained(str(folder))
    return _finish(folder, plain, processors)


def reference_inputs(spec: list[dict[str, str]]) -> list[Any]:
    """sentence-transformers inputs from a JSON-able spec: {"text"}, {"image": path} or both (one mixed input)."""
    from PIL import Image

    inputs: list[Any] = []
    for item in spec:
        image = Image.open(item["image"]).convert("RGB") if "image" in item else None
        if image is not None and "text" in item:
            inputs.append({"text": item["text"], "image": image})
        else:
            inputs.append(image if image is not None else item["text"])
    return inputs


def encode(folder: Path, spec_file: Path, output: Path) -> None:
    """The model card's computation: `SentenceTransformer(folder).encode` of each input, one at a time (under its
    `prompt_name` where the spec names one)."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    spec = json.loads(spec_file.read_text())
    inputs = reference_inputs(spec)
    vectors = [
        model.encode([value], convert_to_numpy=True, prompt_name=item.get("prompt_name"))[0]
        for value, item in zip(inputs, spec)
    ]
    np.save(output, np.stack(vectors).astype(np.float32))


def rank(folder: Path, spec_file: Path, output: Path) -> None:
    """The model card's computation: `CrossEncoder(folder).predict` of each (query, document) pair, one at a time,
    activated (the CrossEncoder's own activation) and raw; the spec is {"query", "instruction", "documents"}."""
    import numpy as np
    import torch
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(folder), device="cpu")
    spec = json.loads(spec_file.read_text())
    documents = reference_inputs(spec["documents"])
    prompt = {"prompt": spec["instruction"]} if spec.get("instruction") else {}
    scores = [
        [
            float(model.predict([(spec["query"], document)], activation_fn=activation, **prompt)[0])
            for activation in (None, torch.nn.Identity())
        ]
        for document in documents
    ]
    np.save(output, np.asarray(scores, dtype=np.float64))


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "build":
        build_qwen3_vl_embedder(Path(arguments[0]))
    elif command == "build-reranker":
        build_qwen3_vl_reranker(Path(arguments[0]))
    elif command == "rank":
        rank(Path(arguments[0]), Path(arguments[1]), Path(arguments[2]))
    elif command == "encode":
        encode(Path(arguments[0]), Path(arguments[1]), Path(arguments[2]))
    else:
        raise SystemExit(f"unknown command {command!r}: build[-reranker] FOLDER | encode|rank FOLDER SPEC.json OUT.npy")
