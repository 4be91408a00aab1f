"""Checkpoints saved by each library major give their own outputs (issue 48): transformers 4.x wrote a Qwen3's
RoPE base as a top-level `rope_theta`, 5.x writes it in `rope_parameters`, and a reader of the wrong major
falls back to 10,000 in silence; sentence-transformers 5 and 6 name their modules by different paths. A
checkpoint of a newer major than the one installed is refused, naming both versions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.base import TokenizedText
from models.inference.auto_backend import load_model
from models.preprocessing.text_tokenizer import TextTokenizer
from testkit.checkpoints import ROPE_BASE
from tests.majors_reference import PAIRS, TEXTS
from tests.tolerance import assert_close, assert_same_vectors, cosines


def _served(path: Path, backend: str) -> tuple[TextTokenizer, object]:
    cfg = ModelConfig(model_id=str(path), device="cpu", backend=backend)
    model = load_model(path, cfg)
    return TextTokenizer(path, cfg, model.info.kind), model


def _vectors(path: Path, backend: str) -> np.ndarray:
    tokenizer, model = _served(path, backend)
    return np.stack(model.forward(TokenizedText.rows("m", tokenizer.encode_texts(TEXTS))))


def test_the_two_majors_write_the_rope_base_their_own_way(majors):
    old, new = (json.loads((folder / "config.json").read_text()) for folder in (majors.qwen3_st5, majors.qwen3_st6))
    assert old["transformers_version"].startswith("4.") and new["transformers_version"].startswith("5.")
    assert old["rope_theta"] == ROPE_BASE and "rope_parameters" not in old
    assert new["rope_parameters"]["rope_theta"] == ROPE_BASE and "rope_theta" not in new
    old_modules = json.loads((majors.qwen3_st5 / "modules.json").read_text())
    new_modules = json.loads((majors.qwen3_st6 / "modules.json").read_text())
    assert old_modules[0]["type"] == "sentence_transformers.models.Transformer"
    assert new_modules[0]["type"] == "sentence_transformers.base.modules.transformer.Transformer"


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_a_qwen3_embedder_saved_by_either_major_gives_its_own_vectors(majors, backend):
    """Each folder's vectors are what its saving libraries answer; the weights and base are the same, so the
    two folders answer alike."""
    assert_same_vectors(_vectors(majors.qwen3_st6, backend), majors.qwen3_st6_vectors)
    assert_same_vectors(_vectors(majors.qwen3_st5, backend), majors.qwen3_st5_vectors)
    assert_same_vectors(majors.qwen3_st5_vectors, majors.qwen3_st6_vectors)


def test_a_misread_rope_base_would_fail_the_comparison(majors, tmp_path):
    """The texts are long enough for the base to show: read as 10,000, the vectors leave the tolerance."""
    misread = shutil.copytree(majors.qwen3_st6, tmp_path / "misread")
    config = json.loads((misread / "config.json").read_text())
    config["rope_parameters"]["rope_theta"] = 10_000.0
    (misread / "config.json").write_text(json.dumps(config))
    assert cosines(_vectors(misread, "torch"), majors.qwen3_st6_vectors).min() < 0.999


def test_sentence_transformers_5_cross_and_sparse_encoders_give_their_own_outputs(majors):
    tokenizer, reranker = _served(majors.reranker_st5, "torch")
    ids, segments = tokenizer.encode_pair_list([query for query, _ in PAIRS], [text for _, text in PAIRS])
    logits = np.stack(reranker.forward(TokenizedText.rows("m", ids, segments)))[:, 0]
    assert_close(logits, majors.reranker_st5_logits)
    tokenizer, splade = _served(majors.splade_st5, "torch")
    for output, dense in zip(
        splade.forward(TokenizedText.rows("m", tokenizer.encode_texts(TEXTS))), majors.splade_st5_weights
    ):
        active = np.flatnonzero(dense)
        assert output[0].astype(int).tolist() == active.tolist()
        assert_close(output[1], dense[active])


@pytest.mark.parametrize(
    ("file", "field", "package"),
    [
        ("config.json", ("transformers_version",), "transformers"),
        ("config_sentence_transformers.json", ("__version__", "sentence_transformers"), "sentence-transformers"),
    ],
)
def test_a_checkpoint_of_a_newer_major_is_refused(majors, tmp_path, file, field, package):
    from importlib.metadata import version

    newer = shutil.copytree(majors.qwen3_st6, tmp_path / "newer")
    settings = json.loads((newer / file).read_text())
    target = settings
    for key in field[:-1]:
        target = target[key]
    written = f"{int(version(package).split('.')[0]) + 1}.0.0"
    target[field[-1]] = written
    (newer / file).write_text(json.dumps(settings))
    with pytest.raises(ModelLoadError) as refused:
        load_model(newer, ModelConfig(model_id=str(newer), device="cpu", backend="torch"))
    assert f"{package} {written}" in refused.value.message and version(package) in refused.value.message
    assert "\n" not in refused.value.message


def test_a_tokenizer_saved_as_tokenizers_backend_loads(modernbert_path):
    """transformers 5 saves a tokenizer made from a `tokenizers` object as `TokenizersBackend`; 4.57 knew no
    such class. It tokenizes as the tokenizer file itself does."""
    from tokenizers import Tokenizer

    assert json.loads((modernbert_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"
    tokenizer, model = _served(modernbert_path, "torch")
    own = Tokenizer.from_file(str(modernbert_path / "tokenizer.json"))
    within = [text for text in TEXTS if len(own.encode(text).ids) <= model.info.max_input_tokens]  # none cut
    assert len(within) >= 5
    assert tokenizer.encode_texts(within) == [own.encode(text).ids for text in within]


@pytest.mark.parametrize("named", ["Qwen2TokenizerFast", "PreTrainedTokenizerFast"])
def test_the_fast_class_names_of_older_checkpoints_load(majors, tmp_path, named):
    """Checkpoints of the transformers 4 years name `*Fast` classes (or the generic fast one); they tokenize as
    the class transformers 4.57 wrote."""
    older = shutil.copytree(majors.qwen3_st5, tmp_path / "older")
    settings = json.loads((older / "tokenizer_config.json").read_text())
    (older / "tokenizer_config.json").write_text(json.dumps({**settings, "tokenizer_class": named}))
    expected = TextTokenizer(majors.qwen3_st5, ModelConfig(model_id=str(majors.qwen3_st5))).encode_texts(TEXTS)
    assert TextTokenizer(older, ModelConfig(model_id=str(older))).encode_texts(TEXTS) == expected
