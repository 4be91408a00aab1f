"""The text limit of every kind with a text tower, for checkpoints whose tokenizer names no length limit (many
community ones: transformers then reports 1e30): the positions the model has, less those its position scheme
skips (RoBERTa's, CLAP's text tower's: pad_token_id + 1). A long text is cut there and encodes as transformers
encodes the cut ids; one position more would fail with an IndexError inside the model."""

from __future__ import annotations

import pytest

from config.settings import ModelConfig
from models.base import TokenizedText
from models.inference.media_encoder import MediaEncoder
from models.inference.text_encoder import TextEncoder
from models.preprocessing.text_settings import text_limit
from models.preprocessing.text_tokenizer import TextTokenizer
from testkit.checkpoints import build_colpali, build_roberta, build_siglip
from testkit.sentences import WORDS
from tests.tolerance import assert_same_vectors

LONG_TEXT = " ".join(WORDS * 4)  # 128 words, 770 characters: longer than any of these towers takes
SILENT = 10**30  # what transformers reports for a tokenizer that names no limit


@pytest.fixture(scope="module")
def roberta_path(tmp_path_factory: pytest.TempPathFactory):
    return build_roberta(tmp_path_factory.mktemp("silent-roberta"), positions=66)


@pytest.fixture(scope="module")
def silent_colpali_path(tmp_path_factory: pytest.TempPathFactory):
    return build_colpali(tmp_path_factory.mktemp("silent-colpali"), text_positions=48, tokenizer_limit=None)


@pytest.fixture(scope="module")
def siglip_path(tmp_path_factory: pytest.TempPathFactory, minilm_path):
    return build_siglip(tmp_path_factory.mktemp("silent-siglip"), minilm_path)


def _config(path, **extra) -> ModelConfig:
    return ModelConfig(backend="torch", model_id=str(path), served_model_name="m", device="cpu", **extra)


def test_the_tokenizers_name_no_limit(silent_clap_path, silent_colpali_path, roberta_path, siglip_path):
    from transformers import AutoTokenizer

    for path in (silent_clap_path, silent_colpali_path, roberta_path, siglip_path):
        assert AutoTokenizer.from_pretrained(str(path)).model_max_length > SILENT / 10


def test_the_limit_is_the_positions_less_the_offset_and_the_tokenizer_limit_when_smaller(
    silent_clap_path,
    silent_colpali_path,
    roberta_path,
    siglip_path,
    tiny_clip_path,
    tiny_bert_path,
    qwen3_embedder_path,
):
    assert text_limit(silent_clap_path, SILENT) == 78  # 80 positions from pad_token_id + 1 = 2 (RoBERTa's)
    assert text_limit(roberta_path, SILENT) == 64  # 66 positions, the same scheme
    assert text_limit(roberta_path, 32) == 32  # a tokenizer's own, smaller limit
    assert text_limit(silent_colpali_path, SILENT) == 48  # Gemma's rotary positions: no offset
    assert text_limit(tiny_clip_path, SILENT) == 77  # CLIP's positions start at 0
    assert text_limit(siglip_path, SILENT) == 64  # SigLIP's too
    assert text_limit(tiny_bert_path, SILENT) == 512  # BERT's too
    assert text_limit(qwen3_embedder_path, None) == 512  # the embedder's Qwen3 configuration: 512 positions


def test_a_clap_text_past_its_positions_is_cut_and_encodes_as_transformers_does(silent_clap_path):
    import torch
    from transformers import AutoTokenizer, ClapModel

    encoder = MediaEncoder(silent_clap_path, _config(silent_clap_path), "clap")
    assert encoder.processor.max_input_tokens == encoder.info.max_input_tokens == 78
    (row,) = encoder.processor.rows("m", "text", [LONG_TEXT])
    ids = row.arrays["input_ids"].tolist()
    tokenizer = AutoTokenizer.from_pretrained(str(silent_clap_path))
    assert ids == tokenizer(LONG_TEXT, truncation=True, max_length=78)["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id  # cut before its closing token, which stays
    (got,) = encoder.forward([row])
    model = ClapModel.from_pretrained(str(silent_clap_path)).eval()
    with torch.inference_mode():
        features = model.get_text_features(input_ids=torch.tensor([ids])).pooler_output  # transformers 5's projection
        expected = torch.nn.functional.normalize(features, dim=-1)
    assert_same_vectors(got, expected.numpy())


def test_a_colpali_query_past_its_positions_is_cut_and_encodes_as_transformers_does(silent_colpali_path):
    import torch
    from transformers import ColPaliForRetrieval, ColPaliProcessor

    encoder = MediaEncoder(silent_colpali_path, _config(silent_colpali_path), "colpali")
    assert encoder.info.max_input_tokens == 48
    (row,) = encoder.processor.rows("m", "text", [LONG_TEXT])
    processor = ColPaliProcessor.from_pretrained(str(silent_colpali_path))
    # transformers 5's processor adds its image_seq_length to a query's max_length: this cuts the query at 48
    cut = 48 - processor.image_seq_length
    direct = processor(text=[LONG_TEXT], return_tensors="pt", truncation=True, max_length=cut)
    assert row.arrays["input_ids"].tolist() == direct["input_ids"][0].tolist() and row.length == 48
    (got,) = encoder.forward([row])
    model = ColPaliForRetrieval.from_pretrained(str(silent_colpali_path)).eval()
    with torch.inference_mode():
        expected = model(**direct).embeddings[0]
    assert_same_vectors(got, expected.numpy())


def test_a_roberta_text_past_its_positions_is_cut_and_embeds_as_transformers_does(roberta_path):
    import torch
    from transformers import AutoModel, AutoTokenizer

    cfg = _config(roberta_path, pooling="mean", normalize=False)
    tokenizer, encoder = TextTokenizer(roberta_path, cfg), TextEncoder(roberta_path, cfg)
    assert tokenizer.max_input_tokens == encoder.info.max_input_tokens == 64
    (ids,) = tokenizer.encode_texts([LONG_TEXT])
    direct = AutoTokenizer.from_pretrained(str(roberta_path))
    assert ids == direct(LONG_TEXT, truncation=True, max_length=64)["input_ids"]
    got = encoder.forward(TokenizedText.rows("m", [ids]))
    model = AutoModel.from_pretrained(str(roberta_path)).eval()
    with torch.inference_mode():
        expected = model(input_ids=torch.tensor([ids])).last_hidden_state[0].mean(0)
    assert_same_vectors(got, expected.numpy()[None])


def test_a_configured_limit_still_wins(silent_clap_path, roberta_path):
    clap = MediaEncoder(silent_clap_path, _config(silent_clap_path, max_seq_length=20), "clap")
    assert clap.info.max_input_tokens == 20
    assert TextTokenizer(roberta_path, _config(roberta_path, max_seq_length=100)).max_input_tokens == 100


def test_a_siglip_text_is_cut_at_its_positions(siglip_path):
    encoder = MediaEncoder(siglip_path, _config(siglip_path), "clip")
    assert encoder.info.max_input_tokens == 64
    (row,) = encoder.processor.rows("m", "text", [LONG_TEXT])
    assert row.length == 64 and encoder.forward([row])[0].shape == (encoder.info.dimension,)
