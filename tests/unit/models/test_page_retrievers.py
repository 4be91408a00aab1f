"""Page retrievers past ColPali and ColQwen2, served as the `colpali` kind: ColModernVBERT's multi-vectors and
MaxSim scores equal transformers' own computation, as its model card runs it (`process_queries`,
`process_images`, the model's embeddings, `score_retrieval`)."""

from __future__ import annotations

import pytest

from config.settings import ModelConfig
from models.inference.media_encoder import MediaEncoder
from models.kinds import detect_kind
from models.media import MediaLimits, decode_image
from models.scores import late_interaction
from testkit.media import IMAGES, image_bytes
from tests.tolerance import assert_close, cosines

LIMITS = MediaLimits(max_item_bytes=20_000_000, max_image_pixels=40_000_000, max_audio_seconds=5.0)
QUERIES = ["what is the chart about", "fox", "a table of costs across clusters of graphics cards"]
# Idefics3's splitting cuts each into its own number of crops: a wide page into fewer than a square one.
PAGES = [IMAGES[name][0] for name in ("png", "large", "grayscale", "tiny")] + [image_bytes(160, 36, seed=6)]


@pytest.fixture(scope="module")
def colmodernvbert(tiny_colmodernvbert_path) -> MediaEncoder:
    cfg = ModelConfig(
        backend="torch", model_id=str(tiny_colmodernvbert_path), served_model_name="colmodernvbert", device="cpu"
    )
    return MediaEncoder(tiny_colmodernvbert_path, cfg, detect_kind(tiny_colmodernvbert_path))


@pytest.fixture(scope="module")
def reference(tiny_colmodernvbert_path):
    """(query embeddings, page embeddings, scores) from transformers alone: each batch as its processor pads
    it, each input's vectors where its attention mask is set."""
    import torch
    from transformers import ColModernVBertForRetrieval, ColModernVBertProcessor

    model = ColModernVBertForRetrieval.from_pretrained(str(tiny_colmodernvbert_path)).eval()
    processor = ColModernVBertProcessor.from_pretrained(str(tiny_colmodernvbert_path))
    images = [decode_image(page, LIMITS, "page") for page in PAGES]
    with torch.inference_mode():
        embedded = []
        for batch in (processor.process_queries(QUERIES), processor.process_images(images)):
            embeddings = model(**batch).embeddings
            embedded.append([e[m.bool()] for e, m in zip(embeddings, batch["attention_mask"])])
    queries, pages = embedded
    return queries, pages, processor.score_retrieval(queries, pages).numpy()


def test_colmodernvbert_is_a_page_retriever(tiny_colmodernvbert_path, colmodernvbert):
    assert detect_kind(tiny_colmodernvbert_path) == "colpali"
    assert colmodernvbert.info.dimension == 16 and colmodernvbert.info.modalities == ["text", "image"]


def test_colmodernvbert_multi_vectors_and_maxsim_match_transformers(colmodernvbert, reference):
    expected_queries, expected_pages, expected_scores = reference
    items = [("text", q) for q in QUERIES] + [("image", page) for page in PAGES]
    rows = colmodernvbert.processor.encode("m", items, LIMITS)
    crops = {row.arrays["pixel_values"].shape[0] for row in rows if row.modality == "image"}
    assert len(crops) > 1  # pages of different crop counts share a pass, padded as the processor pads them
    outputs = colmodernvbert.forward(rows)
    for ours, expected in zip(outputs, expected_queries + expected_pages):
        assert ours.shape == tuple(expected.shape)
        assert cosines(ours, expected.numpy()).min() >= 0.9999
    queries, pages = outputs[: len(QUERIES)], outputs[len(QUERIES) :]
    assert_close([[late_interaction(q, p) for p in pages] for q in queries], expected_scores)


def test_colmodernvbert_queries_carry_the_augmentation_tokens(colmodernvbert, tiny_colmodernvbert_path):
    """The processor's query framing, not its tokenizer alone: ten `<end_of_utterance>` tokens after the text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_colmodernvbert_path))
    (row,) = colmodernvbert.processor.rows("m", "text", ["fox"])
    tokens = tokenizer.convert_ids_to_tokens(row.arrays["input_ids"].tolist())
    assert tokens[-11:-1] == ["<end_of_utterance>"] * 10
