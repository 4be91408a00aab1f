"""The torch-free ONNX Runtime text encoder (`models.inference.onnx_encoder`) against the torch `TextEncoder`:
the same vectors (cosine >= 0.99999) for the same rows, per-row options included."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from config.settings import ModelConfig
from models.base import TokenizedText
from models.inference.auto_backend import MIN_COSINE, load_torch_free
from models.inference.onnx_encoder import OnnxTextEncoder
from models.inference.onnx_export import EXPORTED, exported_checkpoint, onnx_entry
from models.inference.sentence_head import TorchNeeded
from models.inference.text_encoder import TextEncoder
from models.preprocessing.text_tokenizer import TextTokenizer
from testkit.sentences import make_sentences
from tests.conftest import MINILM, ROOT
from tests.tolerance import assert_same_vectors

TASK = "feature-extraction"


def rows_of(folder: Path, cfg: ModelConfig, **options) -> list[TokenizedText]:
    ids = TextTokenizer(folder, cfg).encode_texts(make_sentences()[:12])
    return TokenizedText.rows("test", ids, **options)


def varied(rows: list[TokenizedText], spans: bool = True) -> list[TokenizedText]:
    """The rows with per-row options: one raw vector, one normalized, two prompt lengths, one late-chunked (torch's
    class cannot mix span sums with pooled vectors of another width, as a Dense layer makes them)."""
    changed = [
        rows[0].model_copy(update={"normalize": False}),
        rows[1].model_copy(update={"normalize": True, "prompt_length": 3}),
        rows[2].model_copy(update={"prompt_length": 2}),
        rows[3].model_copy(update={"spans": [(1, 3), (3, rows[3].length - 1)] if spans else None}),
    ]
    return [*changed, *rows[4:]]


def assert_same_outputs(got, expected) -> None:
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected):
        assert_same_vectors(np.atleast_2d(mine), np.atleast_2d(theirs), min_cosine=MIN_COSINE)


def both(folder: Path, **settings) -> tuple[OnnxTextEncoder, TextEncoder]:
    exported_checkpoint(folder, TASK)  # the torch-free class serves an export made beforehand
    onnx = OnnxTextEncoder(folder, ModelConfig(model_id=str(folder), backend="onnx", device="cpu", **settings))
    torch = TextEncoder(folder, ModelConfig(model_id=str(folder), backend="torch", device="cpu", **settings))
    return onnx, torch


def test_minilm_matches_torch(minilm_path):
    onnx, torch = both(minilm_path)
    assert (onnx.info.dimension, onnx.info.max_input_tokens, onnx.info.normalized) == (384, 256, True)
    rows = rows_of(minilm_path, ModelConfig(model_id=MINILM))
    assert_same_outputs(onnx.forward(rows), torch.forward(rows))
    assert_same_outputs(onnx.forward(varied(rows)), torch.forward(varied(rows)))


@pytest.mark.parametrize("pooling", ["cls", "max", "mean_sqrt_len_tokens", "lasttoken", "weightedmean"])
def test_a_plain_checkpoint_pooled_otherwise_and_unnormalized_matches_torch(tiny_bert_path, pooling):
    onnx, torch = both(tiny_bert_path, pooling=pooling, normalize=False)
    assert onnx.info.dimension == torch.info.dimension and not onnx.info.normalized
    assert onnx.info.max_input_tokens == torch.info.max_input_tokens  # its window read from its files alone
    rows = varied(rows_of(tiny_bert_path, ModelConfig(model_id=str(tiny_bert_path))))
    assert_same_outputs(onnx.forward(rows), torch.forward(rows))


def test_the_int8_export_matches_the_torch_backed_onnx_class(tiny_bert_path):
    """The dynamic-int8 graph is the one the torch-backed class runs on ONNX Runtime: the same outputs."""
    exported_checkpoint(tiny_bert_path, TASK)
    cfg = ModelConfig(model_id=str(tiny_bert_path), backend="onnx", dtype="int8", device="cpu")
    onnx, reference = OnnxTextEncoder(tiny_bert_path, cfg), TextEncoder(tiny_bert_path, cfg)
    assert onnx.info.dtype == reference.info.dtype == "int8"
    rows = varied(rows_of(tiny_bert_path, ModelConfig(model_id=str(tiny_bert_path))))
    assert_same_outputs(onnx.forward(rows), reference.forward(rows))


@pytest.fixture(scope="module")
def tiny_layout_path(tmp_path_factory, tiny_bert_path) -> Path:
    """The tiny BERT under sentence-transformers modules: weighted-mean pooling without the prompt, a tanh Dense
    layer, Normalize."""
    from sentence_transformers.base.modules import Dense

    folder = tmp_path_factory.mktemp("tiny-layout")
    for path in tiny_bert_path.iterdir():
        shutil.copy(path, folder / path.name)
    hidden = json.loads((folder / "config.json").read_text())["hidden_size"]
    modules = [("Transformer", ""), ("Pooling", "1_Pooling"), ("Dense", "2_Dense"), ("Normalize", "3_Normalize")]
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
                for i, (kind, path) in enumerate(modules)
            ]
        )
    )
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling/config.json").write_text(
        json.dumps({"embedding_dimension": hidden, "pooling_mode": "weightedmean", "include_prompt": False})
    )
    (folder / "2_Dense").mkdir()
    Dense(hidden, 24).save(str(folder / "2_Dense"))
    (folder / "3_Normalize").mkdir()
    return folder


def test_a_declared_layout_matches_torch(tiny_layout_path):
    onnx, torch = both(tiny_layout_path)
    assert (onnx.info.dimension, onnx.info.normalized, onnx.info.max_input_tokens) == (24, True, 128)
    rows = varied(rows_of(tiny_layout_path, ModelConfig(model_id=str(tiny_layout_path))), spans=False)
    assert_same_outputs(onnx.forward(rows), torch.forward(rows))


def test_a_module_it_cannot_run_falls_back_to_torch(tiny_layout_path, tmp_path):
    folder = tmp_path / "odd"
    shutil.copytree(tiny_layout_path, folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules[2]["type"] = "sentence_transformers.models.LayerNorm"
    (folder / "modules.json").write_text(json.dumps(modules))
    cfg = ModelConfig(model_id=str(folder), backend="onnx", device="cpu")
    with pytest.raises(TorchNeeded, match="LayerNorm"):
        OnnxTextEncoder(folder, cfg)
    exported_checkpoint(folder, TASK)
    assert load_torch_free(folder, cfg, "embed") is None  # the torch-backed class loads it


def test_no_export_yet_means_the_torch_backed_class_under_auto_and_an_export_here_under_onnx(
    tiny_bert_path, tmp_path, monkeypatch
):
    """`auto` needs the parity verdict, which the torch-backed class takes; `onnx` needs only the export, which
    the torch-free class makes, without sentence-transformers (test_onnx_export_start.py)."""
    from config import settings

    monkeypatch.setenv("EMBENTO_CACHE_DIR", str(tmp_path))  # empty: no export, no verdict
    settings.get_config.cache_clear()
    try:
        cfg = ModelConfig(model_id=str(tiny_bert_path), backend="onnx", device="cpu")
        assert load_torch_free(tiny_bert_path, cfg.model_copy(update={"backend": "auto"}), "embed") is None
        assert isinstance(load_torch_free(tiny_bert_path, cfg, "embed"), OnnxTextEncoder)
        assert (onnx_entry(tiny_bert_path, TASK) / EXPORTED).is_file()
    finally:
        settings.get_config.cache_clear()  # the session's cache again, once the variable is restored


def test_it_loads_and_runs_without_torch(minilm_path):
    """In a process where torch cannot be imported at all, `load_model` serves MiniLM on ONNX Runtime."""
    exported_checkpoint(minilm_path, TASK)
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "from config.settings import ModelConfig\n"
        "from models.base import TokenizedText\n"
        "from models.inference.auto_backend import load_model\n"
        f"model = load_model(__import__('pathlib').Path({str(minilm_path)!r}), "
        f"ModelConfig(model_id={MINILM!r}, backend='onnx'))\n"
        "out = model.forward(TokenizedText.rows('m', [[101, 7592, 102]]))\n"
        "print(type(model).__name__, out.shape)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["OnnxTextEncoder", "(1,", "384)"]
