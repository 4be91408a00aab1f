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


def tiny_bert_config(**overrides):  # -> transformers.BertConfig
    """The tests' tiny BERT: MiniLM's vocabulary (so its tokenizer files fit), 2 layers of width 32, 512
    positions; `overrides` change any field (labels, positions, initializer range)."""
    from transformers import BertConfig

    fields = {
        "vocab_size": 30522,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 512,
    }
    return BertConfig(**{**fields, **overrides})


def build_tiny_bert(folder: Path, minilm: Path, seed: int = 0, **overrides) -> Path:
    """A random-weight BERT saved as a plain transformers checkpoint (no sentence-transformers files)."""
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    BertModel(tiny_bert_config(**overrides)).save_pretrained(folder)
    copy_bert_tokenizer(minilm, folder)
    return folder


def build_tiny_ernie(folder: Path, minilm: Path) -> Path:
    """A random-weight ERNIE encoder (Baidu's `ernie-3.0` checkpoints: BERT's layout and vocabulary files) as a
    plain transformers checkpoint: a model type optimum had no ONNX exporter for, which torch's exports."""
    import torch
    from transformers import ErnieConfig, ErnieModel

    torch.manual_seed(0)
    fields = tiny_bert_config().to_dict()
    config = ErnieConfig(
        **{
            name: fields[name]
            for name in (
                "vocab_size",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "intermediate_size",
                "max_position_embeddings",
            )
        }
    )
    ErnieModel(config).save_pretrained(folder)
    copy_bert_tokenizer(minilm, folder)
    return folder


def build_stale_export(folder: Path, minilm: Path) -> Path:
    """A tiny BERT whose shipped `onnx/model.onnx` was exported from an earlier revision of its weights, as a
    Hub repository looks when its weights were updated and its ONNX folder was not: the export loads and runs,
    and answers other vectors."""
    from models.inference.onnx_export import export_graph

    earlier = build_tiny_bert(folder / "earlier", minilm, seed=1)
    current = build_tiny_bert(folder / "current", minilm, seed=2)
    (current / "onnx").mkdir()
    export_graph(earlier, "feature-extraction", current / "onnx" / "model.onnx")
    shutil.rmtree(earlier)
    return current


def build_lfs_pointer_export(folder: Path, minilm: Path) -> Path:
    """A tiny BERT whose `onnx/model.onnx` is a Git LFS pointer, as a repository cloned without LFS has it:
    the file is there, and ONNX Runtime cannot open it."""
    current = build_tiny_bert(folder, minilm, seed=3)
    (current / "onnx").mkdir()
    (current / "onnx" / "model.onnx").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 90868376\n"
    )
    return current


def build_sequence_classifier(folder: Path, minilm: Path, labels: list[str]) -> Path:
    """A random-weight BertForSequenceClassification, saved as a plain transformers checkpoint: one label is a
    cross-encoder (reranker), more a text classifier. Weights are drawn wide (initializer_range 0.5, not
    0.02) so scores differ clearly from input to input and orderings mean something."""
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(len(labels))
    config = tiny_bert_config(
        initializer_range=0.5,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    copy_bert_tokenizer(minilm, folder)
    return folder


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
        str(minilm),
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    ).save_pretrained(plain)
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
        text_config={
            "vocab_size": 30522,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 77,
            "bos_token_id": 101,
            "eos_token_id": 102,
            "pad_token_id": 0,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=16,
    )
    CLIPModel(config).save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(minilm), model_max_length=77)
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def build_siglip(folder: Path, minilm: Path) -> Path:
    """SigLIP (64 text positions, as Google's) with MiniLM's BERT tokenizer, which here names no limit."""
    import torch
    from transformers import AutoTokenizer, SiglipConfig, SiglipImageProcessor, SiglipModel, SiglipProcessor

    torch.manual_seed(16)
    config = SiglipConfig(
        text_config={
            "vocab_size": 30522,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 64,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
    )
    SiglipModel(config).save_pretrained(folder)
    images = SiglipImageProcessor(size={"height": 32, "width": 32})
    tokenizer = AutoTokenizer.from_pretrained(str(minilm))
    SiglipProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    drop_tokenizer_limit(folder)
    return folder


def drop_tokenizer_limit(folder: Path) -> None:
    """Remove `model_max_length` from a saved `tokenizer_config.json`, as many community checkpoints lack it:
    transformers then reports its 1e30 sentinel, and only the model's positions bound the text."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    del config["model_max_length"]
    path.write_text(json.dumps(config, indent=2))


def byte_level_roberta_tokenizer(model_max_length: int):  # -> RobertaTokenizerFast
    """RoBERTa's tokenizer over the 256 byte symbols and no merges: one token per character of plain text.
    Built from the vocabulary in memory: transformers 5 ignores `vocab_file` and `merges_file` here."""
    from tokenizers import pre_tokenizers
    from transformers import RobertaTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    vocab = {token: i for i, token in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    return RobertaTokenizerFast(vocab=vocab, merges=[], model_max_length=model_max_length)


def build_roberta(folder: Path, positions: int = 66) -> Path:
    """A RoBERTa encoder saved as a plain transformers checkpoint, its tokenizer naming no length limit (as
    many community ones): `positions - 2` tokens fit, since RoBERTa's positions start at pad_token_id + 1."""
    import torch
    from transformers import RobertaConfig, RobertaModel

    tokenizer = byte_level_roberta_tokenizer(512)
    torch.manual_seed(15)
    RobertaModel(
        RobertaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=positions,
            pad_token_id=1,
        )
    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    drop_tokenizer_limit(folder)
    return folder


def build_clap(folder: Path, text_positions: int = 130, tokenizer_limit: int | None = 128) -> Path:
    """CLAP at 48 kHz (as LAION's), two-second windows, 16 mel bins, a byte-level BPE tokenizer. Its text
    tower is RoBERTa's: positions start at pad_token_id + 1 = 2, so it takes `text_positions - 2` tokens.
    `tokenizer_limit=None`: the tokenizer names no limit."""
    import torch
    from transformers import ClapConfig, ClapFeatureExtractor, ClapModel, ClapProcessor

    tokenizer = byte_level_roberta_tokenizer(tokenizer_limit or 128)
    torch.manual_seed(12)
    config = ClapConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": text_positions,
            "pad_token_id": 1,
        },
        audio_config={
            "spec_size": 64,
            "num_mel_bins": 16,
            "window_size": 4,
            "depths": [1, 1],
            "num_attention_heads": [2, 2],
            "patch_embeds_hidden_size": 16,
            "hidden_size": 32,
            "enable_fusion": False,
        },
        projection_dim=16,
    )
    ClapModel(config).save_pretrained(folder)
    features = ClapFeatureExtractor(
        feature_size=16,
        sampling_rate=48000,
        hop_length=480,
        fft_window_size=1024,
        max_length_s=2,
        frequency_min=50,
        frequency_max=14000,
        truncation="rand_trunc",
        padding="repeatpad",
    )
    ClapProcessor(feature_extractor=features, tokenizer=tokenizer).save_pretrained(folder)
    if tokenizer_limit is None:
        drop_tokenizer_limit(folder)
    return folder


def build_colpali(folder: Path, text_positions: int = 8192, tokenizer_limit: int | None = 256) -> Path:
    """ColPali over a tiny PaliGemma (SigLIP 32x32 images in 8x8 patches: 16 image tokens). Its Gemma text
    tower has `text_positions` positions; `tokenizer_limit=None`: the tokenizer names no limit."""
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
    tokenizer = GemmaTokenizerFast(
        tokenizer_object=_word_level_tokenizer(specials),
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=["<image>"],
        model_max_length=tokenizer_limit or 256,
    )
    images = SiglipImageProcessor(size={"height": 32, "width": 32}, image_seq_length=16)
    torch.manual_seed(13)
    vocab_size = len(tokenizer)
    vlm = PaliGemmaConfig(
        text_config={
            "model_type": "gemma",
            "vocab_size": vocab_size,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "pad_token_id": 0,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "max_position_embeddings": text_positions,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
            "projection_dim": 32,
        },
        projection_dim=32,
        hidden_size=32,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vocab_size=vocab_size,
    )
    ColPaliForRetrieval(ColPaliConfig(vlm_config=vlm, embedding_dim=16)).save_pretrained(folder)
    ColPaliProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    if tokenizer_limit is None:
        drop_tokenizer_limit(folder)
    return folder


# The vision towers of ColQwen2's backbones: Qwen2-VL's, and Qwen2.5-VL's (windowed attention but in its
# full-attention blocks, a merger to the text width); both take 14-pixel patches merged 2x2 into one token.
QWEN_VL_VISION = {
    "qwen2_vl": {"depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2, "in_chans": 3},
    "qwen2_5_vl": {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 32,
        "window_size": 56,
        "fullatt_block_indexes": [1],
    },
}


def build_colqwen2(folder: Path, backbone: str = "qwen2_vl") -> Path:
    """ColQwen2 over a tiny Qwen2-VL, or over a tiny Qwen2.5-VL (`backbone="qwen2_5_vl"`, as ColQwen2.5 is):
    images become a variable number of patches (28x28 pixels -> 1 token)."""
    import torch
    from transformers import (
        ColQwen2Config,
        ColQwen2ForRetrieval,
        ColQwen2Processor,
        Qwen2_5_VLConfig,
        Qwen2TokenizerFast,
        Qwen2VLConfig,
        Qwen2VLImageProcessor,
    )

    specials = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|image_pad|>",
        "<|video_pad|>",
        "<unk>",
    ]
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=_word_level_tokenizer(specials),
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=specials[1:7],
        model_max_length=512,
    )
    images = Qwen2VLImageProcessor(
        min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 16, patch_size=14, merge_size=2, temporal_patch_size=2
    )
    torch.manual_seed(14)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in specials}
    vlm_class = {"qwen2_vl": Qwen2VLConfig, "qwen2_5_vl": Qwen2_5_VLConfig}[backbone]
    vlm = vlm_class(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "max_position_embeddings": 512,
        },
        vision_config={
            **QWEN_VL_VISION[backbone],
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        vocab_size=len(tokenizer),
        hidden_size=32,
    )
    ColQwen2ForRetrieval(ColQwen2Config(vlm_config=vlm, embedding_dim=16)).save_pretrained(folder)
    ColQwen2Processor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    return folder


# Qwen3-Reranker's prompt, as its model card formats it: what a causal-LM reranker's chat template renders.
QWEN3_RERANKER_CHAT_TEMPLATE = (
    '{%- set instruction = messages | selectattr("role", "eq", "system") | map(attribute="content") | first '
    '| default("Given a web search query, retrieve relevant passages that answer the query") -%}'
    '{%- set query = messages | selectattr("role", "eq", "query") | map(attribute="content") | first -%}'
    '{%- set document = messages | selectattr("role", "eq", "document") | map(attribute="content") | first -%}'
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    "<Instruct>: {{ instruction }}\n<Query>: {{ query }}\n<Document>: {{ document }}<|im_end|>\n"
    # an expression, not text: Jinja drops a template's final newline, and the prompt ends in two
    '{{ "<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n" }}'
)
# Qwen3's own chat template, reduced to its plain turns: what a Qwen3 base or Qwen3-Reranker folder ships.
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}{%- if message.role in ('system', 'user', 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QWEN3_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]


def qwen_tokenizer(append_eos: bool, chat_template: str | None = QWEN3_CHAT_TEMPLATE):  # -> Qwen2TokenizerFast
    """A byte-level BPE trained here on a small corpus (Qwen's kind: no unknown tokens, `Ġ`-prefixed words),
    padding on the left as Qwen3's tokenizers do. `append_eos`: the post-processor ends every text with
    `<|endoftext|>`, as Qwen3-Embedding's `tokenizer.json` does, so last-token pooling reads the EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import Qwen2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [
        " ".join(WORDS),
        "yes no Instruct Query Document Judge whether meets the requirements based on "
        "provided Note that answer can only be Given web search query retrieve relevant passages system "
        "user assistant",
    ] * 3
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=600, special_tokens=QWEN3_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    if append_eos:
        eos = bpe.token_to_id("<|endoftext|>")
        bpe.post_processor = processors.TemplateProcessing(
            single="$A <|endoftext|>", pair="$A <|endoftext|> $B <|endoftext|>", special_tokens=[("<|endoftext|>", eos)]
        )
    else:
        bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    return Qwen2TokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        padding_side="left",
        model_max_length=131072,
        additional_special_tokens=QWEN3_SPECIALS[1:],
        chat_template=chat_template,
    )


def _qwen3_config(vocab_size: int, **extra):  # -> Qwen3Config
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        **extra,
    )


def build_qwen3_embedder(folder: Path) -> Path:
    """As Qwen3-Embedding is published: a Qwen3 decoder (its config naming Qwen3ForCausalLM, its weights
    those of the bare decoder, no LM head) in a sentence-transformers folder with
    last-token pooling and normalization, an EOS appended by its tokenizer, left padding, and its `query`
    prompt in the `Instruct: ...\\nQuery:` form."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import Qwen3Model

    plain = folder / "decoder"
    tokenizer = qwen_tokenizer(append_eos=True)
    torch.manual_seed(21)
    Qwen3Model(_qwen3_config(len(tokenizer), initializer_range=0.2)).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    transformer = Transformer(str(plain), max_seq_length=48)
    prompts = {
        "query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
        "document": "",
    }
    model = SentenceTransformer(
        modules=[transformer, Pooling(32, pooling_mode="lasttoken"), Normalize()], prompts=prompts, device="cpu"
    )
    saved = folder / "qwen3-embedder"
    model.save_pretrained(str(saved))
    shutil.rmtree(plain)
    # As published: saved before sentence-transformers read chat messages, so text is tokenized as text
    # (a folder saved now would declare a `message` input, since the tokenizer has a chat template).
    (saved / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48, "do_lower_case": False}))
    config = json.loads((saved / "config.json").read_text())
    (saved / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen3ForCausalLM"]}, indent=2))
    return saved


ROPE_BASE = 1e6  # Qwen3's own RoPE base; transformers' default (10,000) is what a misread config falls back to


def build_saved_qwen3_embedder(folder: Path, rope_base: float = ROPE_BASE) -> Path:
    """A Qwen3 embedder as a user saves one today: a Qwen3 decoder of RoPE base `rope_base`, last-token
    pooling and normalization, saved whole by sentence-transformers 6's `save_pretrained` on transformers 5
    (so `rope_parameters` and sentence-transformers 6's module paths), nothing edited. Its tokenizer has no
    chat template: with one, sentence-transformers 6 declares chat-message input and renders every text
    through the template, which Embento refuses to imitate (models/preprocessing/text_tokenizer.py)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import Qwen3Model

    plain = folder / "decoder"
    tokenizer = qwen_tokenizer(append_eos=True, chat_template=None)
    torch.manual_seed(48)
    config = _qwen3_config(
        len(tokenizer), initializer_range=0.2, rope_parameters={"rope_type": "default", "rope_theta": rope_base}
    )
    Qwen3Model(config).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    modules = [Transformer(str(plain), max_seq_length=48), Pooling(32, pooling_mode="lasttoken"), Normalize()]
    saved = folder / "qwen3-embedder"
    SentenceTransformer(modules=modules, device="cpu").save_pretrained(str(saved))
    shutil.rmtree(plain)
    return saved


def _save_qwen3_causal_lm(folder: Path, chat_template: str) -> None:
    import torch
    from transformers import Qwen3ForCausalLM

    tokenizer = qwen_tokenizer(append_eos=False, chat_template=chat_template)
    torch.manual_seed(22)
    Qwen3ForCausalLM(_qwen3_config(len(tokenizer), initializer_range=0.2)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def build_qwen3_reranker(folder: Path, max_length: int = 160) -> Path:
    """A causal-LM reranker as sentence-transformers saves one: its `CrossEncoder` over a Qwen3ForCausalLM
    (Transformer with `text-generation`, then `LogitScore` over the "yes"/"no" tokens), the pair rendered by
    the checkpoint's chat template in Qwen3-Reranker's format."""
    from sentence_transformers import CrossEncoder

    plain = folder / "causal-lm"
    _save_qwen3_causal_lm(plain, QWEN3_RERANKER_CHAT_TEMPLATE)
    saved = folder / "qwen3-reranker"
    CrossEncoder(str(plain), max_length=max_length, local_files_only=True, device="cpu").save_pretrained(str(saved))
    shutil.rmtree(plain)
    return saved


# Qwen3-Reranker's model card: the prompt around "<Instruct>: ...\n<Query>: ...\n<Document>: ...", and the score
# P(yes) over "yes" and "no" at the last position.
QWEN3_RERANKER_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
    'the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n"
)
QWEN3_RERANKER_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QWEN3_RERANKER_CARD = (
    "# Qwen3-Reranker (tiny, random weights)\n\n```python\n"
    f"prefix = {json.dumps(QWEN3_RERANKER_PREFIX)}\nsuffix = {json.dumps(QWEN3_RERANKER_SUFFIX)}\n"
    'token_false_id = tokenizer.convert_tokens_to_ids("no")\ntoken_true_id = tokenizer.convert_tokens_to_ids("yes")\n'
    "```\n"
)


def build_plain_qwen3_reranker(folder: Path) -> Path:
    """As Qwen3-Reranker is published: a bare Qwen3ForCausalLM with Qwen3's own chat template, whose model
    card gives the prompt and the yes/no scoring formula (no sentence-transformers files)."""
    _save_qwen3_causal_lm(folder, QWEN3_CHAT_TEMPLATE)
    (folder / "README.md").write_text(QWEN3_RERANKER_CARD)
    return folder


def build_splade(folder: Path, minilm: Path) -> Path:
    """A SPLADE model as sentence-transformers saves one: a BertForMaskedLM under `SpladePooling` (max), with
    MiniLM's tokenizer. The MLM bias is set low, as training leaves it, so few vocabulary entries are active."""
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sentence_transformer.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling
    from transformers import BertForMaskedLM

    plain = folder / "mlm"
    torch.manual_seed(23)
    mlm = BertForMaskedLM(tiny_bert_config())
    with torch.no_grad():
        mlm.cls.predictions.bias.fill_(-0.4)
    mlm.save_pretrained(plain)
    copy_bert_tokenizer(minilm, plain)
    transformer = Transformer(str(plain), transformer_task="fill-mask", max_seq_length=128)
    model = SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu")
    saved = folder / "splade"
    model.save_pretrained(str(saved))
    shutil.rmtree(plain)
    return saved


def _sentence_transformer_folder(
    plain: Path, saved: Path, max_seq_length: int, pooling: str, prompts: dict[str, str]
) -> Path:
    """`plain` (a transformers checkpoint) under Pooling and Normalize, saved by sentence-transformers as a Hub
    embedder is; `plain` is removed."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(plain), max_seq_length=max_seq_length)
    width = transformer.get_embedding_dimension()
    model = SentenceTransformer(
        modules=[transformer, Pooling(width, pooling_mode=pooling), Normalize()], prompts=prompts, device="cpu"
    )
    model.save_pretrained(str(saved))
    shutil.rmtree(plain)
    return saved


def build_windowed_bert(folder: Path, minilm: Path, max_seq_length: int = 32) -> Path:
    """An e5-style BERT embedder (mean pooling, unit vectors, `query: ` / `passage: ` prompts) whose limit is
    small (32 tokens), so a text that needs several windows, or a document several slices, stays cheap.
    Weights are drawn wide (initializer_range 0.2) so vectors differ clearly from text to text."""
    build_tiny_bert(folder / "bert", minilm, seed=31, initializer_range=0.2)
    return _sentence_transformer_folder(
        folder / "bert", folder / "windowed-bert", max_seq_length, "mean", {"query": "query: ", "document": "passage: "}
    )


MODERNBERT_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


def modernbert_tokenizer(model_max_length: int = 8192):  # -> PreTrainedTokenizerFast
    """ModernBERT's kind of tokenizer: a byte-level BPE (no normalizer, `Ġ`-prefixed words whose offsets start
    at the space) trained here on a small corpus, `[CLS] $A [SEP]` around every text, no token types."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [" ".join(WORDS), "search_query: search_document: classification: clustering:"] * 3
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=600, special_tokens=MODERNBERT_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    cls, sep = bpe.token_to_id("[CLS]"), bpe.token_to_id("[SEP]")
    bpe.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token=AddedToken("[MASK]", lstrip=True),
        model_input_names=["input_ids", "attention_mask"],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=True,
    )


def build_modernbert_embedder(folder: Path, max_seq_length: int = 128, local_attention: int = 16) -> Path:
    """As nomic's modernbert-embed is published: a ModernBERT encoder (8192 positions, global attention every
    other layer, the others over a `local_attention`-token sliding window) in a sentence-transformers folder with
    mean pooling, unit vectors and `search_query: ` / `search_document: ` prompts. Its limit is small (128
    tokens: more than the windowed BERT's 32, and four local windows) so the tests stay cheap. Torch runs it with
    SDPA (no flash-attn here); `reference_compile` is off so a GPU run does not compile it first."""
    import torch
    from transformers import ModernBertConfig, ModernBertModel

    plain = folder / "modernbert"
    tokenizer = modernbert_tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in MODERNBERT_SPECIALS}
    config = ModernBertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=8192,
        global_attn_every_n_layers=2,
        local_attention=local_attention,
        pad_token_id=ids["[PAD]"],
        bos_token_id=ids["[CLS]"],
        eos_token_id=ids["[SEP]"],
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
        initializer_range=0.2,
        reference_compile=False,
    )
    torch.manual_seed(32)
    ModernBertModel(config).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    saved = _sentence_transformer_folder(
        plain,
        folder / "modernbert-embed",
        max_seq_length,
        "mean",
        {"query": "search_query: ", "document": "search_document: "},
    )
    # As published (saved by sentence-transformers 3): the limit in `sentence_bert_config.json`, where version 5
    # keeps it as the tokenizer's model_max_length only (as the windowed BERT's folder has it).
    (saved / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False})
    )
    return saved


XLM_ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0-3, as XLM-R has them; `<mask>` comes last


def xlm_roberta_tokenizer(model_max_length: int):  # -> XLMRobertaTokenizer (a fast one in transformers 5)
    """XLM-R's kind of tokenizer, its files as BAAI/bge-m3 ships them (a tokenizer.json, and a tokenizer_config.json
    naming XLMRobertaTokenizer): a SentencePiece Unigram, whitespace split then `▁`-prefixed pieces (WhitespaceSplit
    + Metaspace), `<s> $A </s>` around a text, `<mask>` as the last id, taking the space before it (lstrip). That
    tokenizer.json is the same tokenizer in both majors: transformers 4 runs the file as it is, transformers 5's
    XLMRobertaTokenizer rebuilds its own pipeline around the file's vocabulary, this one, and keeps only a
    SentencePiece `Precompiled` normalizer of the file's; compiling one needs sentencepiece, so there is none (the
    tests' texts are ASCII, which NFKC leaves as they are). Its vocabulary is written out, not trained (the
    `tokenizers` trainer breaks ties between equal scores differently from run to run, which would move ids): every
    other word of WORDS is a piece, the rest are spelled in letters, so ids repeat within a text. Characters outside
    WORDS and `.,;:!?` (digits, `&`) are `<unk>`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import XLMRobertaTokenizer

    words = sorted(set(WORDS))
    letters = sorted(set("".join(words)))
    vocab = (
        [(token, 0.0) for token in XLM_ROBERTA_SPECIALS]
        + [("\u2581" + word, -2.0) for word in words[::2]]
        + [("\u2581", -3.0)]
        + [(symbol, -4.0) for symbol in ".,;:!?"]
        + [(letter, -5.0) for letter in letters]
        + [("<mask>", 0.0)]
    )
    unigram = Tokenizer(models.Unigram(vocab, unk_id=XLM_ROBERTA_SPECIALS.index("<unk>")))
    unigram.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(prepend_scheme="always")]
    )
    unigram.decoder = decoders.Metaspace(prepend_scheme="always")
    unigram.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    mask = AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True)
    return XLMRobertaTokenizer(
        tokenizer_object=unigram,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token=mask,
        model_max_length=model_max_length,
    )


def _draw_weights(model, std: float) -> None:  # model: torch.nn.Module
    """Every matrix (embeddings, linear weights) from N(0, std) of torch's seeded generator, biases 0, LayerNorm
    1 and 0, padding rows 0, as transformers' own init leaves them; drawn here, in the order of the parameters'
    names, since transformers' init draws differently (another order, other calls) from one major to the next."""
    import torch

    with torch.no_grad():
        for name, parameter in sorted(model.named_parameters()):
            if parameter.dim() > 1:
                parameter.normal_(0.0, std)
            elif name.endswith("LayerNorm.weight"):
                parameter.fill_(1.0)
            else:
                parameter.zero_()
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()


def build_bge_m3(folder: Path, positions: int = 130, seed: int = 137) -> Path:
    """A tiny BGE-M3 laid out as BAAI's: an XLMRobertaModel checkpoint with its fast tokenizer (`positions - 2`
    tokens fit, as RoBERTa's positions start at pad_token_id + 1), and FlagEmbedding's two heads saved as it saves
    them, state dicts of `colbert_linear` (hidden -> hidden) and `sparse_linear` (hidden -> 1) by `torch.save`.
    Weights are drawn wide (std 0.3) so outputs differ clearly between texts, by `_draw_weights` and torch's own
    Linear init from `seed`, not by transformers, so a new major draws the same checkpoint. This seed's sparse head
    leans positive (raw outputs about 0.44 ± 0.29 on the tests' texts): its bias is set to -0.2 so about a fifth of
    the tokens fall to a weight <= 0 and are dropped, while none lies within 5e-3 of 0 (ids are compared exactly)
    and `<mask>` is kept (0.26)."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    tokenizer = xlm_roberta_tokenizer(model_max_length=positions - 2)
    hidden = 32
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=positions,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        initializer_range=0.3,
    )
    model = XLMRobertaModel(config)
    torch.manual_seed(seed)
    _draw_weights(model, config.initializer_range)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    colbert_linear = torch.nn.Linear(hidden, hidden)
    sparse_linear = torch.nn.Linear(hidden, 1)
    with torch.no_grad():
        sparse_linear.bias.fill_(-0.2)
    torch.save(colbert_linear.state_dict(), folder / "colbert_linear.pt")
    torch.save(sparse_linear.state_dict(), folder / "sparse_linear.pt")
    return folder
