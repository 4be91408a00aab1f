"""Issue 50's references: a tiny Qwen3-VL-Embedding built, and encoded by the model card's own computation
(sentence-transformers 6: `SentenceTransformer(folder).encode` of a text, a PIL image and `{"text", "image"}`), in
the Qwen3-VL reference venv (.venv-vl-reference, `make vl-reference-venv`): transformers' `Qwen3VLProcessor`
needs torchvision, which does not import beside .venv's CPU torch (requirements-vl-reference.txt). Likewise a tiny
Qwen3-VL-Reranker, its pairs scored by `CrossEncoder(folder).predict`."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from testkit.media import image_bytes
from tests.hybrid_reference import ReferenceFailed
from tests.reference_venvs import wait_for_background_build

ROOT = Path(__file__).resolve().parent.parent
VL_PYTHON = ROOT / ".venv-vl-reference" / "bin" / "python"
VENV_BUILD_TIMEOUT_S = 1800  # about 2 minutes here
SCRIPT_TIMEOUT_S = 600

# The three input shapes: a text, an image, and a text with an image as one input (images of two sizes, so their
# grids and token counts differ).
TEXT = "a red cat on the street"
MIXED_TEXT = "a photo of a house at night"
IMAGE_SIZES = {"wide": (130, 90), "small": (70, 64)}


@dataclass(frozen=True)
class VlReference:
    """The checkpoint, its test images' bytes (PNG), and sentence-transformers' vectors for `TEXT`, the wide image,
    `MIXED_TEXT` with the small image, and `TEXT` under the "query" prompt."""

    folder: Path
    images: dict[str, bytes]
    text: np.ndarray
    image: np.ndarray
    mixed: np.ndarray
    query: np.ndarray  # `TEXT` under the "query" prompt (the card's query instruction as the system message)


def _run(*args: str | Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)  # nothing of .venv's may leak into the reference
    try:
        process = subprocess.run(
            [str(VL_PYTHON), "-m", "testkit.vl_checkpoints", *map(str, args)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as error:
        raise ReferenceFailed(f"testkit.vl_checkpoints {args[0]} ran past {SCRIPT_TIMEOUT_S} s") from error
    if process.returncode != 0:
        output = (process.stdout + process.stderr)[-4000:]
        raise ReferenceFailed(f"testkit.vl_checkpoints {args[0]} failed ({process.returncode}):\n{output}")


def ensure_vl_venv() -> None:
    wait_for_background_build(VENV_BUILD_TIMEOUT_S)
    process = subprocess.run(
        ["make", "vl-reference-venv"], cwd=ROOT, capture_output=True, text=True, timeout=VENV_BUILD_TIMEOUT_S
    )
    if process.returncode != 0 or not VL_PYTHON.is_file():
        output = (process.stdout + process.stderr)[-4000:]
        raise ReferenceFailed(f"`make vl-reference-venv` failed ({process.returncode}):\n{output}")


def write_images(work: Path) -> dict[str, bytes]:
    """The test images (PNG) by name, also written to `work` as `<name>.png` for the reference venv to open."""
    images = {name: image_bytes(w, h, seed=seed) for seed, (name, (w, h)) in enumerate(IMAGE_SIZES.items())}
    for name, data in images.items():
        (work / f"{name}.png").write_bytes(data)
    return images


def build_vl_reference(work: Path) -> VlReference:
    """Build the checkpoint and encode the three inputs, one `encode` call each, in the reference venv."""
    ensure_vl_venv()
    folder = work / "qwen3-vl-embedding"
    _run("build", folder)
    images = write_images(work)
    spec = [
        {"text": TEXT},
        {"image": str(work / "wide.png")},
        {"text": MIXED_TEXT, "image": str(work / "small.png")},
        {"text": TEXT, "prompt_name": "query"},
    ]
    (work / "inputs.json").write_text(json.dumps(spec))
    _run("encode", folder, work / "inputs.json", work / "vectors.npy")
    vectors = np.load(work / "vectors.npy")
    return VlReference(folder, images, vectors[0], vectors[1], vectors[2], vectors[3])


# The reranker's query and documents: a text, the wide image, a text with the small image (in-process only: no wire
# format carries such a document), and the text again under an instruction.
RERANK_QUERY = "a red cat"
RERANK_TEXT = "a cat on the street"
RERANK_INSTRUCTION = "Given a photo caption, find the matching picture"


@dataclass(frozen=True)
class VlRerankReference:
    """The checkpoint, its test images' bytes (PNG), and the CrossEncoder's scores (activated, raw) of
    `RERANK_QUERY` with `RERANK_TEXT`, the wide image, `MIXED_TEXT` with the small image, and `RERANK_TEXT` under
    `RERANK_INSTRUCTION`."""

    folder: Path
    images: dict[str, bytes]
    scores: np.ndarray  # (4, 2): activated, raw
    instructed: np.ndarray  # (2,): `RERANK_TEXT` under the instruction, activated and raw


def build_vl_rerank_reference(work: Path) -> VlRerankReference:
    ensure_vl_venv()
    folder = work / "qwen3-vl-reranker"
    _run("build-reranker", folder)
    images = write_images(work)
    documents = [
        {"text": RERANK_TEXT},
        {"image": str(work / "wide.png")},
        {"text": MIXED_TEXT, "image": str(work / "small.png")},
    ]
    outputs = []
    for name, instruction, picked in (("plain", None, documents), ("instructed", RERANK_INSTRUCTION, documents[:1])):
        spec = {"query": RERANK_QUERY, "instruction": instruction, "documents": picked}
        (work / f"{name}.json").write_text(json.dumps(spec))
        _run("rank", folder, work / f"{name}.json", work / f"{name}.npy")
        outputs.append(np.load(work / f"{name}.npy"))
    return VlRerankReference(folder, images, outputs[0], outputs[1][0])
