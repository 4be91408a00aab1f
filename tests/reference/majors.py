"""Runs in the reference venv (.venv-reference: transformers 4.57, sentence-transformers 5.3), not in .venv:
checkpoints saved by the previous majors of both libraries, the way their users saved them, and what those
libraries themselves answer for them. Usage: majors.py SPEC.json, where SPEC names:

- `qwen3_source`: a Qwen3 embedder saved by transformers 5 / sentence-transformers 6 (RoPE base in
  `rope_parameters`). Its weights and tokenizer file are saved again here, as 4.57 writes them (a top-level
  `rope_theta`, a `Qwen2TokenizerFast`, sentence-transformers 5's module paths), into `qwen3_target`.
- `bert_vocab`: a folder with a BERT `vocab.txt`; a tiny BERT CrossEncoder (one label) is saved into
  `reranker_target` and a tiny SPLADE SparseEncoder into `splade_target`, random weights of `seed`.
- `texts`, `pairs`: what is encoded and scored; `result`: an .npz of `qwen3` (texts, dim) vectors, `reranker`
  (pairs,) logits and `splade` (texts, vocab) weights.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from sentence_transformers import CrossEncoder, SentenceTransformer, SparseEncoder
from sentence_transformers.models import Normalize, Pooling, Transformer
from sentence_transformers.sparse_encoder.models import MLMTransformer, SpladePooling
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertTokenizerFast,
    Qwen2TokenizerFast,
    Qwen3Config,
    Qwen3Model,
)

QWEN3_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]


def save_qwen3(source: Path, target: Path, max_seq_length: int) -> SentenceTransformer:
    settings = json.loads((source / "config.json").read_text())
    rope = settings.pop("rope_parameters")
    settings = {key: value for key, value in settings.items() if not key.startswith(("transformers_", "architectures"))}
    config = Qwen3Config(**settings, rope_theta=rope["rope_theta"])
    plain = target.parent / "qwen3-plain"
    model = Qwen3Model(config)
    model.load_state_dict(load_file(str(source / "model.safetensors")))
    model.save_pretrained(plain)
    Qwen2TokenizerFast(
        tokenizer_file=str(source / "tokenizer.json"),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        padding_side="left",
        model_max_length=131072,
        additional_special_tokens=QWEN3_SPECIALS[1:],
    ).save_pretrained(plain)
    transformer = Transformer(str(plain), max_seq_length=max_seq_length)
    embedder = SentenceTransformer(
        modules=[transformer, Pooling(config.hidden_size, pooling_mode="lasttoken"), Normalize()], device="cpu"
    )
    embedder.save(str(target))
    return SentenceTransformer(str(target), device="cpu", local_files_only=True)


def tiny_bert(vocab_size: int, **extra) -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        initializer_range=0.2,
        **extra,
    )


def save_reranker(vocab: Path, target: Path, seed: int) -> CrossEncoder:
    tokenizer = BertTokenizerFast(vocab_file=str(vocab / "vocab.txt"), model_max_length=128)
    torch.manual_seed(seed)
    plain = target.parent / "reranker-plain"
    BertForSequenceClassification(tiny_bert(tokenizer.vocab_size, num_labels=1)).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    CrossEncoder(str(plain), num_labels=1, max_length=128, device="cpu").save_pretrained(str(target))
    return CrossEncoder(str(target), device="cpu", local_files_only=True)


def save_splade(vocab: Path, target: Path, seed: int) -> SparseEncoder:
    tokenizer = BertTokenizerFast(vocab_file=str(vocab / "vocab.txt"), model_max_length=128)
    torch.manual_seed(seed + 1)
    plain = target.parent / "splade-plain"
    BertForMaskedLM(tiny_bert(tokenizer.vocab_size)).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    SparseEncoder(modules=[MLMTransformer(str(plain), max_seq_length=128), SpladePooling("max")], device="cpu").save(
        str(target)
    )
    return SparseEncoder(str(target), device="cpu", local_files_only=True)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    texts, pairs = spec["texts"], [tuple(pair) for pair in spec["pairs"]]
    embedder = save_qwen3(Path(spec["qwen3_source"]), Path(spec["qwen3_target"]), spec["max_seq_length"])
    reranker = save_reranker(Path(spec["bert_vocab"]), Path(spec["reranker_target"]), spec["seed"])
    splade = save_splade(Path(spec["bert_vocab"]), Path(spec["splade_target"]), spec["seed"])
    with torch.inference_mode():
        np.savez(
            spec["result"],
            qwen3=embedder.encode(texts, convert_to_numpy=True),
            reranker=reranker.predict(pairs, activation_fn=torch.nn.Identity(), convert_to_numpy=True),
            splade=splade.encode(texts, convert_to_tensor=True).to_dense().numpy(),
        )


if __name__ == "__main__":
    main()
