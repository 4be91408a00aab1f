"""Every (kind, backend) pair of the support matrix (models/inference/backends.py) in every dtype it allows on a CPU,
through a real server: it loads, warms up through every modality, answers, and agrees with float32.

`dtype: auto` is bfloat16 on an H100 or H200, so the bf16 column here is what most GPU users run. float32
references come from the session's main server, or for the kinds it does not serve (ColBERT, BGE-M3: their
checkpoints come from the reference venv's fixtures) from this server's own float32 torch model, which other
tests compare with PyLate and FlagEmbedding.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from config.model_settings import BACKEND_DTYPES
from models.inference.backends import CPU_ONLY, GPU_ONLY
from models.kinds import KIND_SPECS
from testkit.media import audio_bytes, data_uri, image_bytes
from tests.conftest import (
    MINILM_CLASSIFIER,
    MINILM_RERANKER,
    TINY_CLAP,
    TINY_CLIP,
    TINY_COLPALI,
    TINY_MEAN,
    TINY_MEAN_CT2,
    TINY_MEAN_ONNX,
    TINY_SPLADE,
)
from tests.retrieval import DOCUMENTS
from tests.servers import SharedServer
from tests.tolerance import cosines

pytestmark = pytest.mark.server
# Agreement with float32. int8 is bounded by ONNX Runtime's dynamic quantization, which scales activations per tensor,
# over the whole padded batch: a scorer's few logits moved by 0.95-0.99 here (batch- and CPU-dependent);
# all-MiniLM-L6-v2's embeddings keep a mean of 0.99 (tests/unit/models/inference/test_backends.py, README).
MIN_COSINE = {"float32": 0.999, "bfloat16": 0.999, "int8": 0.9}
# A classifier's raw logits in bfloat16: the fine-tuned-from-MiniLM head here answers logits of about 0.02, and
# bfloat16's rounding of the hidden states (2^-9 of them, through the head's weights) moves each by about 6e-4,
# whatever the logit: 0.99895 on a CPU with native bfloat16 kernels (AVX512-BF16), where the AVX2 path gave
# over 0.999. Bounded at ten times that distance from 1.
MIN_LOGIT_COSINE_BF16 = 0.99
# The tiny random Qwen3-VL-Reranker's centred logits spread over about ±0.03 and bfloat16 moves each by about 1e-3
# through its 2 text and 2 vision layers: 0.9969 measured on a 2-core AMD EPYC (AVX2). Bounded at ten times that
# distance from 1.
MIN_VL_LOGIT_COSINE_BF16 = 0.97
QUERY = "how do platform teams keep their embeddings private"
TEXTS = DOCUMENTS[:8]  # sentences about different things: scores that differ by more than rounding
IMAGE_INPUTS = [{"image": data_uri(image_bytes(seed=seed), "image/png")} for seed in (1, 2)]
VL_INPUTS = [*IMAGE_INPUTS, {"text": QUERY, **IMAGE_INPUTS[0]}]  # images, and a text with an image as one input
AUDIO_INPUTS = [{"audio": data_uri(audio_bytes(rate=48000, seed=seed), "audio/wav")} for seed in (1, 2)]
# kind -> (its checkpoint fixture, the main server's float32 model of it by backend; none: this server's own)
KINDS = {
    "embed": ("tiny_bert_path", {"torch": TINY_MEAN, "onnx": TINY_MEAN_ONNX, "ctranslate2": TINY_MEAN_CT2}),
    "sparse": ("splade_path", {"torch": TINY_SPLADE}),
    "rerank": ("minilm_reranker_path", {"torch": MINILM_RERANKER}),
    "classify": ("minilm_classifier_path", {"torch": MINILM_CLASSIFIER}),
    "clip": ("tiny_clip_path", {"torch": TINY_CLIP}),
    "clap": ("tiny_clap_path", {"torch": TINY_CLAP}),
    "colpali": ("tiny_colpali_path", {"torch": TINY_COLPALI}),
    "colbert": ("colbert_path", {}),
    "hybrid": ("bge_m3_path", {}),
    "vl-embed": ("vl_embedder_path", {}),
    "vl-rerank": ("vl_reranker_path", {}),
}


def cpu_dtypes(backend: str) -> list[str]:
    """What the matrix allows on a CPU for this backend ("auto" is float32 there)."""
    return [d for d in BACKEND_DTYPES[backend] if d != "auto" and (backend, d) not in GPU_ONLY]


# Every pair and CPU dtype but those the main server already serves (and other tests compare with
# sentence-transformers and transformers directly).
VARIANTS = [
    (kind, backend, dtype)
    for kind, kind_spec in KIND_SPECS.items()
    for backend in kind_spec.backends
    for dtype in cpu_dtypes(backend)
    if not (dtype == "float32" and backend in KINDS[kind][1])
]


def name(kind: str, backend: str, dtype: str) -> str:
    return f"{kind}-{backend}-{dtype}"


def float32_reference(kind: str, backend: str) -> tuple[bool, str]:
    """The float32 model of this kind to agree with: the main server's (True), on the same backend where it has
    one; else this server's own float32 torch model (False)."""
    served = KINDS[kind][1]
    if not served:
        return False, name(kind, "torch", "float32")
    return True, served.get(backend) or next(iter(served.values()))


def dtype_models(request: pytest.FixtureRequest) -> list[dict]:
    """The matrix's models, each named `name(kind, backend, dtype)`: served by `kinds_and_dtypes_server`
    (tests/servers.py) beside other files' models."""
    return [
        {
            "model_id": str(request.getfixturevalue(KINDS[kind][0])),
            "kind": kind,
            "backend": backend,
            "dtype": dtype,
            "device": "cpu",
            "served_model_name": name(kind, backend, dtype),
        }
        for kind, backend, dtype in VARIANTS
    ]


@pytest.fixture(scope="module")
def dtype_server(kinds_and_dtypes_server: SharedServer) -> str:
    return kinds_and_dtypes_server.url


def outputs(http: httpx.Client, kind: str, model: str) -> list[np.ndarray]:
    """One array per answer of the model to every input its kind takes: vectors, or raw logits."""
    if kind in ("rerank", "vl-rerank"):  # a vision-language reranker's documents: texts and images' data URIs
        images = [item["image"] for item in IMAGE_INPUTS] if kind == "vl-rerank" else []
        documents = TEXTS + images
        body = http.post(
            "/v1/rerank", json={"model": model, "query": QUERY, "documents": documents, "raw_scores": True}
        )
        assert body.status_code == 200, body.text
        scores = {r["index"]: r["relevance_score"] for r in body.json()["results"]}
        return [np.array([scores[i] for i in range(len(documents))])]
    if kind == "classify":
        body = http.post("/v1/classify", json={"model": model, "input": TEXTS, "raw_scores": True})
        assert body.status_code == 200, body.text
        return [
            np.array([item["score"] for item in sorted(row, key=lambda i: i["label"])]) for row in body.json()["data"]
        ]
    if kind == "sparse":  # the active entries, as dense vectors: an entry near zero may be active in one only
        body = http.post("/v1/embeddings", json={"model": model, "input": TEXTS})
        assert body.status_code == 200, body.text
        return [_dense(item["embedding"]) for item in body.json()["data"]]
    inputs = {"clip": IMAGE_INPUTS, "colpali": IMAGE_INPUTS, "clap": AUDIO_INPUTS, "vl-embed": VL_INPUTS}.get(kind, [])
    body = http.post("/v1/embeddings", json={"model": model, "input": [{"text": t} for t in TEXTS[:3]] + inputs})
    assert body.status_code == 200, body.text
    return [np.asarray(item["embedding"]) for item in body.json()["data"]]


def _dense(sparse: dict) -> np.ndarray:
    vector = np.zeros(30522)
    vector[sparse["indices"]] = sparse["values"]
    return vector


@pytest.mark.parametrize("kind, backend, dtype", VARIANTS, ids=[name(*v) for v in VARIANTS])
def test_every_pair_and_cpu_dtype_serves_and_agrees_with_float32(client, dtype_server, kind, backend, dtype):
    on_main_server, reference = float32_reference(kind, backend)
    with httpx.Client(base_url=dtype_server, timeout=120) as http:
        ours = outputs(http, kind, name(kind, backend, dtype))
        expected = outputs(client if on_main_server else http, kind, reference)
    assert len(ours) == len(expected)
    for got, want in zip(ours, expected):
        # rerank logits: one vector over the documents, centred so that a shared offset cannot hide a change
        got, want = (got - want.mean(), want - want.mean()) if kind in ("rerank", "vl-rerank") else (got, want)
        bound = {
            ("classify", "bfloat16"): MIN_LOGIT_COSINE_BF16,
            ("vl-rerank", "bfloat16"): MIN_VL_LOGIT_COSINE_BF16,
        }.get((kind, dtype), MIN_COSINE[dtype])
        assert cosines(got, want).min() >= bound


def test_the_matrix_covers_what_the_configuration_allows_on_a_cpu():
    assert ("onnx", "int8") in CPU_ONLY and ("torch", "float16") in GPU_ONLY
    assert {dtype for _, _, dtype in VARIANTS} == {"float32", "bfloat16", "int8"}
    assert ("clap", "torch", "bfloat16") in VARIANTS and ("embed", "ctranslate2", "int8") in VARIANTS
    assert ("colbert", "onnx", "int8") in VARIANTS and ("hybrid", "torch", "bfloat16") in VARIANTS
    assert ("vl-embed", "torch", "bfloat16") in VARIANTS and ("vl-rerank", "torch", "bfloat16") in VARIANTS
    # 32 pairs and dtypes, less the 9 float32 ones the main server has (vl-embed's and vl-rerank's float32 are this
    # server's)
    assert len(VARIANTS) == 23
