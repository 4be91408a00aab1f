"""Tiny random-weight checkpoints, with their processors, saved as real folders: what the tests (and the
benchmarks) load through the same code path as a checkpoint from the Hub, which is out of reach here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

WORDS = (
    "the quick brown fox jumps over a lazy dog while engineers deploy embedding servers on their own "
    "machines to keep data private and costs fixed across clusters of graphics cards and processors "
    "describe image question answer page document chart table sound music bird rain"
).split()
BERT_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def copy_bert_tokenizer(source: Path, folder: Path) -> None:
    """MiniLM's tokenizer files, for a BERT checkpoint built here with random weights."""
    for name in BERT_TOKENIZER_FILES:
        (folder / name).write_bytes((source / name).read_bytes())


def build_minilm_cross_encoder(folder: Path, minilm: Path, labels: list[str], max_length: int = 128) -> Path:
    """A cross-encoder as one fine-tuned from all-MiniLM-L6-v2 is saved: MiniLM's trained encoder under a
    head of seeded random weights (no trained head is to be had here), with MiniLM's unmodified tokenizer
    files, saved by sentence-transformers' CrossEncoder with a 128-token limit. transformers saves the
    tokenizer again and keeps what its `tokenizer.json` declared: padding and truncation fixed at 128."""
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import BertForSequenceClassification

    plain = folder / "fine-tuned"
    torch.manual_seed(len(labels))
    BertForSequenceClassification.from_pretrained(
        str(minilm), num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)}).save_pretrained(plain)
    copy_bert_tokenizer(minilm, plain)
    saved = folder / "cross-encoder"
    CrossEncoder(str(plain), max_length=max_length, local_files_only=True, device="cpu").save_pretrained(str(saved))
    shutil.rmtree(plain)
    return saved


def _word_level_tokenizer(specials: list[str]):  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    tokens = dict.fromkeys(specials + sorted(set(WORDS)) + list("abcdefghijklmnopqrstuvwxyz?.,"))
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def build_clip(folder: Path, minilm: Path) -> Path:
    """CLIP with a BERT tokenizer (the packaged MiniLM's): CLIPProcessor takes any tokenizer."""
    import torch
    from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    torch.manual_seed(11)
    config = CLIPConfig(
        text_config={"vocab_size": 30522, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 77, "bos_token_id": 101,
                     "eos_token_id": 102, "pad_token_id": 0},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    CLIPModel(config).save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(minilm), model_max_length=77)
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def build_clap(folder: Path) -> Path:
    """CLAP at 48 kHz (as LAION's), two-second windows, 16 mel bins, a byte-level BPE tokenizer."""
    import torch
    from transformers import ClapConfig, ClapFeatureExtractor, ClapModel, ClapProcessor, RobertaTokenizerFast
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    vocab_dir = folder / "vocab"
    vocab_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    vocab = {token: i for i, token in enumerate(specials + sorted(bytes_to_unicode().values()))}
    (vocab_dir / "vocab.json").write_text(json.dumps(vocab))
    (vocab_dir / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = RobertaTokenizerFast(vocab_file=str(vocab_dir / "vocab.json"),
                                     merges_file=str(vocab_dir / "merges.txt"), model_max_length=128)
    shutil.rmtree(vocab_dir)
    torch.manual_seed(12)
    config = ClapConfig(
        text_config={"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 130, "pad_token_id": 1},
        audio_config={"spec_size": 64, "num_mel_bins": 16, "window_size": 4, "depths": [1, 1],
                      "num_attention_heads": [2, 2], "patch_embeds_hidden_size": 16, "hidden_size": 32,
                      "enable_fusion": False},
        projection_dim=16,
    )
    ClapModel(config).save_pretrained(folder)
    features = ClapFeatureExtractor(feature_size=16, sampling_rate=48000, hop_length=480, fft_window_size=1024,
                                    max_length_s=2, frequency_min=50, frequency_max=14000, truncation="rand_trunc",
                                    padding="repeatpad")
    ClapProcessor(feature_extractor=features, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def build_colpali(folder: Path) -> Path:
    """ColPali over a tiny PaliGemma (SigLIP 32x32 images in 8x8 patches: 16 image tokens)."""
    import torch
    from transformers import (
        ColPaliConfig,
        ColPaliForRetrieval,
        ColPaliProcessor,
        GemmaTokenizerFast,
        PaliGemmaConfig,
        SiglipImageProcessor,
    )

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<image>"]
    tokenizer = GemmaTokenizerFast(tokenizer_object=_word_level_tokenizer(specials), bos_token="<bos>",
                                   eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
                                   additional_special_tokens=["<image>"], model_max_length=256)
    images = SiglipImageProcessor(size={"height": 32, "width": 32}, image_seq_length=16)
    torch.manual_seed(13)
    vocab_size = len(tokenizer)
    vlm = PaliGemmaConfig(
        text_config={"model_type": "gemma", "vocab_size": vocab_size, "hidden_size": 32, "intermediate_size": 64,
                     "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                     "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8, "projection_dim": 32},
        projection_dim=32, hidden_size=32, image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vocab_size=vocab_size,
    )
    ColPaliForRetrieval(ColPaliConfig(vlm_config=vlm, embedding_dim=16)).save_pretrained(folder)
    ColPaliProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def build_colqwen2(folder: Path) -> Path:
    """ColQwen2 over a tiny Qwen2-VL: images become a variable number of patches (28x28 pixels -> 1 token)."""
    import torch
    from transformers import (
        ColQwen2Config,
        ColQwen2ForRetrieval,
        ColQwen2Processor,
        Qwen2TokenizerFast,
        Qwen2VLConfig,
        Qwen2VLImageProcessor,
    )

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>", "<unk>"]
    tokenizer = Qwen2TokenizerFast(tokenizer_object=_word_level_tokenizer(specials), unk_token="<unk>",
                                   eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=specials[1:7], model_max_length=512)
    images = Qwen2VLImageProcessor(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 16, patch_size=14, merge_size=2,
                                   temporal_patch_size=2)
    torch.manual_seed(14)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in specials}
    vlm = Qwen2VLConfig(
        text_config={"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64,
                     "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                     "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}, "max_position_embeddings": 512},
        vision_config={"depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2,
                       "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_chans": 3},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        vocab_size=len(tokenizer), hidden_size=32,
    )
    ColQwen2ForRetrieval(ColQwen2Config(vlm_config=vlm, embedding_dim=16)).save_pretrained(folder)
    ColQwen2Processor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    return folder
