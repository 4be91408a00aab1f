"""Tiny page retrievers past ColPali and ColQwen2, saved as their real folders are: ColModernVBERT (native in
transformers 5: a SigLIP tower and a ModernBERT encoder joined by a pixel-shuffle connector)."""

from __future__ import annotations

from pathlib import Path

from testkit.checkpoints import MODERNBERT_SPECIALS, modernbert_tokenizer

# The tokens ColModernVBertProcessor frames images and queries with, in the tokenizer as the real one has them:
# the image prompt's, the crop markers of Idefics3's image splitting (a grid of up to 6 x 6 crops and the
# global image) and the query augmentation token.
COLMODERNVBERT_SPECIALS = [
    "<|begin_of_text|>",
    "<fake_token_around_image>",
    "<image>",
    "<end_of_utterance>",
    "<global-img>",
    *(f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)),
]


def build_colmodernvbert(folder: Path) -> Path:
    """ColModernVBERT as `ModernVBERT/colmodernvbert-merged` is laid out, scaled down: SigLIP 32x32 crops in 8x8
    patches, pixel-shuffled by 2 (4 image tokens a crop, the processor's `image_seq_len`), Idefics3 image
    splitting into crops of 32 pixels of images up to 64 (a 2x2 grid and the global image), a ModernBERT
    encoder and a 16-wide projection. Its image processor is transformers' PIL one: the default one needs
    torchvision, and both save as `Idefics3ImageProcessor`."""
    import torch
    from transformers import (
        ColModernVBertConfig,
        ColModernVBertForRetrieval,
        ColModernVBertProcessor,
        Idefics3ImageProcessorPil,
        ModernVBertConfig,
    )

    tokenizer = modernbert_tokenizer(model_max_length=512)
    tokenizer.add_special_tokens({"additional_special_tokens": COLMODERNVBERT_SPECIALS})
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in MODERNBERT_SPECIALS}
    images = Idefics3ImageProcessorPil(
        do_image_splitting=True, max_image_size={"longest_edge": 32}, size={"longest_edge": 64}
    )
    vlm = ModernVBertConfig(
        text_config={
            "model_type": "modernbert",
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 512,
            "global_attn_every_n_layers": 2,
            "local_attention": 16,
            "pad_token_id": ids["[PAD]"],
            "bos_token_id": ids["[CLS]"],
            "eos_token_id": ids["[SEP]"],
            "cls_token_id": ids["[CLS]"],
            "sep_token_id": ids["[SEP]"],
            "reference_compile": False,
            "initializer_range": 0.2,
        },
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pixel_shuffle_factor=2,
        initializer_range=0.2,
    )
    torch.manual_seed(15)
    config = ColModernVBertConfig(vlm_config=vlm, embedding_dim=16, initializer_range=0.2)
    ColModernVBertForRetrieval(config).save_pretrained(folder)
    ColModernVBertProcessor(image_processor=images, tokenizer=tokenizer, image_seq_len=4).save_pretrained(folder)
    return folder
