"""Tiny checkpoints of the families that needed their repositories' own code (`trust_remote_code`) before
transformers 5 built them natively: nomic_bert, gte, jina_embeddings_v3 and eurobert. Each is the real
transformers class with random weights, its kind of tokenizer, under sentence-transformers' Pooling and
Normalize as a Hub embedder is laid out, with no `auto_map`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testkit.checkpoints import WORDS, _sentence_transformer_folder, copy_bert_tokenizer, xlm_roberta_tokenizer

# Small, with weights drawn wide so that vectors differ clearly from text to text.
TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
    "initializer_range": 0.2,
}
# The pooling each family's published embedder uses. nomic-embed-text-v1.5 and jina-embeddings-v3: the mean
# of the token states (their cards' `mean_pooling`); gte-base-en-v1.5: the first token's
# (`last_hidden_state[:, 0]` in its card). EuroBERT is published as a base encoder, not an embedder: the mean,
# as the fine-tunes of it on the Hub use (an assumption).
POOLING = {"nomic_bert": "mean", "gte": "cls", "jina_embeddings_v3": "mean", "eurobert": "mean"}
EUROBERT_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>"]


def _save(model_class: Any, config: Any, seed: int, folder: Path) -> None:
    import torch

    torch.manual_seed(seed)
    model_class(config).save_pretrained(folder)


def build_nomic_bert(folder: Path, minilm: Path) -> Path:
    """nomic-embed-text-v1.5's layout: a NomicBert encoder (rotary positions, SwiGLU) with BERT's uncased
    vocabulary."""
    from transformers import NomicBertConfig, NomicBertModel

    _save(NomicBertModel, NomicBertConfig(vocab_size=30528, head_dim=16, **TINY), 41, folder / "plain")
    copy_bert_tokenizer(minilm, folder / "plain")
    return _embedder(folder, "nomic_bert")


def build_gte(folder: Path, minilm: Path) -> Path:
    """gte-base-en-v1.5's layout (Alibaba's "new" architecture, transformers' `gte`) with BERT's vocabulary."""
    from transformers import GteConfig, GteModel

    _save(GteModel, GteConfig(vocab_size=30528, **TINY), 42, folder / "plain")
    copy_bert_tokenizer(minilm, folder / "plain")
    return _embedder(folder, "gte")


def build_jina_embeddings_v3(folder: Path) -> Path:
    """jina-embeddings-v3's encoder (XLM-R with rotary positions) and XLM-R's kind of tokenizer. transformers'
    native class has no task LoRA adapters: this is the encoder alone, as a merged checkpoint is."""
    from transformers import JinaEmbeddingsV3Config, JinaEmbeddingsV3Model

    tokenizer = xlm_roberta_tokenizer(model_max_length=TINY["max_position_embeddings"] - 2)
    config = JinaEmbeddingsV3Config(vocab_size=len(tokenizer), pad_token_id=1, **TINY)
    _save(JinaEmbeddingsV3Model, config, 43, folder / "plain")
    tokenizer.save_pretrained(folder / "plain")
    return _embedder(folder, "jina_embeddings_v3")


def build_eurobert(folder: Path) -> Path:
    """EuroBERT's layout: a Llama-style bidirectional encoder (RMSNorm, rotary positions, grouped attention)
    with a byte-level BPE that frames a text in `<|begin_of_text|>` … `<|end_of_text|>` and pads with the
    latter, as EuroBERT's Llama-3 tokenizer does."""
    from transformers import EuroBertConfig, EuroBertModel

    tokenizer = _eurobert_tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in EUROBERT_SPECIALS}
    config = EuroBertConfig(
        vocab_size=len(tokenizer),
        num_key_value_heads=1,
        head_dim=16,
        bos_token_id=ids["<|begin_of_text|>"],
        eos_token_id=ids["<|end_of_text|>"],
        pad_token_id=ids["<|end_of_text|>"],
        mask_token_id=ids["<|mask|>"],
        **TINY,
    )
    _save(EuroBertModel, config, 44, folder / "plain")
    tokenizer.save_pretrained(folder / "plain")
    return _embedder(folder, "eurobert")


def _eurobert_tokenizer():  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=EUROBERT_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator([" ".join(WORDS)] * 3, trainer)
    bos, eos = (bpe.token_to_id(token) for token in EUROBERT_SPECIALS[:2])
    bpe.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A <|end_of_text|>",
        pair="<|begin_of_text|> $A <|end_of_text|> $B <|end_of_text|>",
        special_tokens=[("<|begin_of_text|>", bos), ("<|end_of_text|>", eos)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|end_of_text|>",
        mask_token="<|mask|>",
        model_max_length=TINY["max_position_embeddings"],
    )


def _embedder(folder: Path, family: str) -> Path:
    return _sentence_transformer_folder(folder / "plain", folder / family, 128, POOLING[family], {})
