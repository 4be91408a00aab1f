"""A first start with `backend: onnx` exports without sentence-transformers (issue 64, item 5): the torch-free
class exports through torch's exporter and transformers' model class, in a process where sentence-transformers
cannot be imported at all, and serves the same outputs as the torch-backed class over the export made the way
it was before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from config.settings import ModelConfig
from models.inference.auto_backend import parity_rows
from models.inference.onnx_export import exported_checkpoint
from models.inference.text_encoder import TextEncoder
from models.inference.text_scorer import TextScorer
from tests.conftest import ROOT
from tests.tolerance import assert_same_vectors

# In a fresh interpreter with an empty cache and sentence-transformers hidden: load_model, then its outputs for the
# rows on stdin, its class and whether the export was made here.
SCRIPT = """
import json, sys
sys.modules["sentence_transformers"] = None  # importing it raises ImportError
from pathlib import Path
from config.settings import ModelConfig, get_config
from models.base import TokenizedText
from models.inference.auto_backend import load_model
from models.inference.onnx_export import EXPORTED, onnx_entry

asked = json.load(sys.stdin)
folder = Path(asked["folder"])
model = load_model(folder, ModelConfig(model_id=str(folder), backend="onnx", device="cpu"))
outputs = model.forward([TokenizedText(**row) for row in asked["rows"]])
print(json.dumps({
    "class": type(model).__name__,
    "exported_here": (onnx_entry(folder, asked["task"]) / EXPORTED).is_file(),
    "outputs": [output.tolist() for output in outputs],
}))
"""


def first_start(folder: Path, task: str, rows: list, cache: Path) -> dict:
    asked = {"folder": str(folder), "task": task, "rows": [row.model_dump() for row in rows]}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        input=json.dumps(asked),
        cwd=ROOT,
        env={**os.environ, "EMBENTO_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fixture", ["tiny_reranker_path", "minilm_classifier_path"])
def test_a_scorer_exports_without_sentence_transformers_and_scores_as_before(request, fixture, tmp_path):
    folder: Path = request.getfixturevalue(fixture)
    kind = "rerank" if "reranker" in fixture else "classify"
    cfg = ModelConfig(model_id=str(folder), backend="onnx", device="cpu")
    rows = parity_rows(folder, cfg, kind)
    answer = first_start(folder, "sequence-classification", rows, tmp_path / "empty-cache")
    assert answer["class"] == "OnnxTextScorer" and answer["exported_here"]
    exported_checkpoint(folder, "sequence-classification")  # this session's export, as the torch class makes it
    reference = TextScorer(folder, cfg, kind).forward(rows)
    assert np.array_equal(np.array(answer["outputs"], dtype=np.float32), reference)


def test_an_embedder_exports_without_sentence_transformers_and_embeds_as_before(tiny_bert_path, tmp_path):
    cfg = ModelConfig(model_id=str(tiny_bert_path), backend="onnx", device="cpu")
    rows = parity_rows(tiny_bert_path, cfg, "embed")
    answer = first_start(tiny_bert_path, "feature-extraction", rows, tmp_path / "empty-cache")
    assert answer["class"] == "OnnxTextEncoder" and answer["exported_here"]
    exported_checkpoint(tiny_bert_path, "feature-extraction")
    reference = TextEncoder(tiny_bert_path, cfg).forward(rows)
    assert_same_vectors(np.array(answer["outputs"]), np.asarray(reference), min_cosine=0.99999)
