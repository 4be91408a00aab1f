"""A model service whose models all run on ONNX Runtime imports no torch, no sentence-transformers and no
transformers (issue 64, item 5): the Reranker (a reranker and a classifier) and the TextEmbedder
(MiniLM and a ColBERT model), each started as its process starts it, in a fresh interpreter: the service module
imported, then the service's pool built (`runners.pool.pool_for`, what the service's `__init__` runs), then rows
run through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from config.settings import ModelConfig
from models.base import TokenizedText
from models.inference.auto_backend import check_export
from models.inference.onnx_export import exported_checkpoint
from models.preprocessing.text_tokenizer import TextTokenizer
from tests.conftest import MINILM, ROOT, server_env
from tests.hybrid_reference import QUERIES

# What a torch-free model service must not have imported: each costs seconds of its start (docs/architecture.md,
# "Where the suite's time goes") and hundreds of MiB. transformers alone is 2.5 s: its progress bars are switched
# off through huggingface_hub (runners/loading.py), and the torch-free classes read tokenizers' files directly.
HEAVY = ("torch", "sentence_transformers", "transformers", "pylate")
# In a fresh interpreter: the service module, as every process of a server imports it, then one model service's
# pool and a pass of each model's rows (from stdin, tokenized beforehand: the gateway tokenizes); prints the
# heavy modules it loaded and each model's output shapes.
SCRIPT = """
import asyncio, json, sys
import service  # noqa: F401
from models.base import TokenizedText
from runners.pool import pool_for

asked = json.load(sys.stdin)
pool = pool_for(asked["service"])
rows = [TokenizedText(**row) for row in asked["rows"]]
outputs = asyncio.run(pool.run(rows))
print(json.dumps({
    "heavy": sorted(name for name in asked["heavy"] if sys.modules.get(name) is not None),
    "backends": {name: pool.models[name].info.backend for name in pool.models},
    "shapes": [list(output.shape) for output in outputs],
}))
"""


def started(folder: Path, service: str, models: list[dict], rows: list[TokenizedText]) -> dict:
    """`SCRIPT` run as `service`'s process, under a configuration of `models`."""
    config = {"cache_dir": os.environ["EMBENTO_CACHE_DIR"], "models": models}
    (folder / "embento.yaml").write_text(yaml.safe_dump(config))
    env = server_env(folder / "bentoml", EMBENTO_CONFIG=str(folder / "embento.yaml"))
    asked = {"service": service, "heavy": HEAVY, "rows": [row.model_dump() for row in rows]}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        input=json.dumps(asked),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_reranker_service_on_onnx_runtime_imports_no_torch(tmp_path, tiny_reranker_path, tiny_classifier_path):
    # `auto` for the reranker: its export and parity verdict made beforehand, as a Bento's build or an earlier
    # start leaves them; `onnx` for the classifier, whose export the service makes itself (torch's exporter then
    # runs in the process, as it must: tests/unit/models/inference/test_onnx_export_start.py).
    assert check_export(tiny_reranker_path, ModelConfig(model_id=str(tiny_reranker_path)), "rerank").matches
    exported_checkpoint(tiny_classifier_path, "sequence-classification")
    models = [
        {"model_id": str(tiny_reranker_path), "served_model_name": "reranker"},
        {"model_id": str(tiny_classifier_path), "served_model_name": "classifier", "backend": "onnx"},
    ]
    tokenizer = TextTokenizer(tiny_reranker_path, ModelConfig(model_id=str(tiny_reranker_path)), "rerank")
    ids, segments = tokenizer.encode_pair_list(list(QUERIES[:2]), list(QUERIES[1:3]))
    rows = [*TokenizedText.rows("reranker", ids, segments), *TokenizedText.rows("classifier", ids[:1])]
    answer = started(tmp_path, "Reranker", models, rows)
    assert answer["heavy"] == []
    assert answer["backends"] == {"reranker": "onnx", "classifier": "onnx"}
    assert answer["shapes"] == [[1], [1], [3]]


def test_the_text_embedder_with_colbert_on_onnx_runtime_imports_no_torch(tmp_path, minilm_path, colbert_path):
    assert check_export(minilm_path, ModelConfig(model_id=MINILM), "embed").matches
    exported_checkpoint(colbert_path, "feature-extraction")
    models = [{"model_id": MINILM}, {"model_id": str(colbert_path), "served_model_name": "colbert", "backend": "onnx"}]
    minilm = TextTokenizer(minilm_path, ModelConfig(model_id=MINILM)).encode_texts(list(QUERIES[:2]))
    colbert, expansions = TextTokenizer(colbert_path, ModelConfig(model_id=str(colbert_path)), "colbert").encode_roles(
        list(QUERIES[:2]), True
    )
    rows = [
        *TokenizedText.rows(MINILM, minilm),
        *(
            TokenizedText(model="colbert", input_ids=row, is_query=True, expansion=n)
            for row, n in zip(colbert, expansions)
        ),
    ]
    answer = started(tmp_path, "TextEmbedder", models, rows)
    assert answer["heavy"] == []
    assert answer["backends"] == {MINILM: "onnx", "colbert": "onnx"}
    assert answer["shapes"][:2] == [[384], [384]]
    assert [shape[0] for shape in answer["shapes"][2:]] == [len(row) for row in colbert]
    assert all(shape[1] > 0 for shape in answer["shapes"][2:])
