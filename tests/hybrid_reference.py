"""Issue 35's references: what PyLate and FlagEmbedding themselves answer for a tiny ColBERT and a tiny BGE-M3,
computed in a venv of their own (.venv-reference, `make reference-venv`), since neither installs beside the
project's pins (requirements-reference.txt says why). Each checkpoint is one run of a script of tests/reference/
in that venv; texts go in and outputs come back through files (JSON, .npz)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.reference_venvs import wait_for_background_build

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_PYTHON = ROOT / ".venv-reference" / "bin" / "python"
SCRIPTS = ROOT / "tests" / "reference"
VENV_BUILD_TIMEOUT_S = 1800  # a fresh build is about a minute here; generous for a slow mirror
SCRIPT_TIMEOUT_S = 600

# The ColBERT checkpoint's settings: short lengths, so one query and one document pass them.
COLBERT_EMBEDDING_SIZE = 16
COLBERT_QUERY_LENGTH = 12
COLBERT_DOCUMENT_LENGTH = 24
M3_WEIGHTS = (0.4, 0.2, 0.4)  # FlagEmbedding's compute_score weights: dense, sparse, colbert

# Words of testkit.checkpoints.WORDS (what the M3 tokenizer was trained on) and punctuation. The third query is longer
# than COLBERT_QUERY_LENGTH tokens and the last query holds punctuation (queries keep it). Documents carry
# punctuation (PyLate's skiplist drops it), repeat words (M3's sparse weight is the max over a token's
# occurrences), and the fifth is longer than COLBERT_DOCUMENT_LENGTH tokens. `&` and `7` are outside the M3
# tokenizer's corpus: `<unk>`, which M3's sparse output drops and its ColBERT output keeps; `<mask>`, a special
# token FlagEmbedding does not drop, stays in both.
QUERIES = (
    "quick brown fox",
    "engineers deploy embedding servers",
    "graphics cards and processors keep the costs of clusters fixed across their own machines",
    "music, sound and rain?",
)
DOCUMENTS = (
    "the quick brown fox jumps over a lazy dog.",
    "engineers deploy embedding servers on their own machines, to keep data private!",
    "graphics cards and processors: clusters of machines; costs fixed.",
    "rain, bird & sound: music 7 <mask>.",
    "a page of the document: a chart, a table and an image; the question and the answer describe the page, "
    "while the lazy dog jumps over the quick brown fox.",
    "rain",
)


@dataclass(frozen=True)
class ColbertReference:
    """PyLate's answers for QUERIES and DOCUMENTS: one float32 (tokens, COLBERT_EMBEDDING_SIZE) array per text
    (queries: COLBERT_QUERY_LENGTH rows each), and `colbert_scores` (MaxSim sums), (queries, documents)."""

    queries: list[np.ndarray]
    documents: list[np.ndarray]
    scores: np.ndarray


@dataclass(frozen=True)
class M3Reference:
    """BGEM3FlagModel's answers for QUERIES + DOCUMENTS (in that order): `dense` (texts, hidden), `sparse` one
    {token id: weight} per text, `colbert` one (tokens - 1, hidden) array per text, and `scores` from
    `compute_score` with M3_WEIGHTS, one pair a call, under "dense", "sparse", "colbert" and "hybrid" (its
    'colbert+sparse+dense'), each (queries, documents). `sparse_margin`: the smallest |sparse_linear(h)| over the
    tokens the sparse output may keep, so how safely its ids can be compared exactly."""

    dense: np.ndarray
    sparse: list[dict[int, float]]
    colbert: list[np.ndarray]
    scores: dict[str, np.ndarray]
    sparse_margin: float


class ReferenceFailed(RuntimeError):
    """The reference venv could not be built, or a reference script failed: the tests that need it cannot run."""


def _tail(process: subprocess.CompletedProcess, chars: int = 4000) -> str:
    return ((process.stdout or "") + (process.stderr or ""))[-chars:]


def ensure_reference_venv() -> Path:
    """`make reference-venv` (a no-op once built and current); its python."""
    try:
        wait_for_background_build(VENV_BUILD_TIMEOUT_S)
        process = subprocess.run(
            ["make", "reference-venv"], cwd=ROOT, capture_output=True, text=True, timeout=VENV_BUILD_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as error:
        raise ReferenceFailed(f"`make reference-venv` ran past {VENV_BUILD_TIMEOUT_S} s") from error
    if process.returncode != 0 or not REFERENCE_PYTHON.is_file():
        raise ReferenceFailed(
            f"`make reference-venv` failed ({process.returncode}): the reference venv of PyLate "
            f"and FlagEmbedding (requirements-reference.txt) is needed:\n{_tail(process)}"
        )
    return REFERENCE_PYTHON


def run_reference(script: str, *args: str | Path) -> None:
    """tests/reference/<script> in the reference venv, offline; a failure raises with the script's output."""
    python = ensure_reference_venv()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)  # nothing of .venv's or the project's may leak into the reference
    command = [str(python), str(SCRIPTS / script), *map(str, args)]
    try:
        process = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        raise ReferenceFailed(f"tests/reference/{script} ran past {SCRIPT_TIMEOUT_S} s") from error
    if process.returncode != 0:
        raise ReferenceFailed(f"tests/reference/{script} failed ({process.returncode}):\n{_tail(process)}")


def _write_texts(folder: Path) -> Path:
    path = folder / "texts.json"
    path.write_text(json.dumps({"queries": list(QUERIES), "documents": list(DOCUMENTS)}))
    return path


def build_colbert_reference(tiny_bert: Path, folder: Path, seed: int = 0) -> tuple[Path, ColbertReference]:
    """PyLate's ColBERT over `tiny_bert` saved by PyLate into `folder`/colbert, and its answers for the texts."""
    checkpoint, result = folder / "colbert", folder / "colbert-reference.npz"
    run_reference(
        "colbert.py",
        tiny_bert,
        checkpoint,
        _write_texts(folder),
        result,
        "--embedding-size",
        str(COLBERT_EMBEDDING_SIZE),
        "--query-length",
        str(COLBERT_QUERY_LENGTH),
        "--document-length",
        str(COLBERT_DOCUMENT_LENGTH),
        "--seed",
        str(seed),
    )
    with np.load(result) as arrays:
        reference = ColbertReference(
            queries=[arrays[f"query_{i}"] for i in range(len(QUERIES))],
            documents=[arrays[f"document_{j}"] for j in range(len(DOCUMENTS))],
            scores=arrays["scores"],
        )
    return checkpoint, reference


def compute_m3_reference(checkpoint: Path, folder: Path) -> M3Reference:
    """BGEM3FlagModel's answers for the BGE-M3 folder `checkpoint`; files in `folder`."""
    arrays_path, json_path = folder / "m3-reference.npz", folder / "m3-reference.json"
    run_reference(
        "bge_m3.py", checkpoint, _write_texts(folder), arrays_path, json_path, "--weights", *map(str, M3_WEIGHTS)
    )
    extra = json.loads(json_path.read_text())
    with np.load(arrays_path) as arrays:
        return M3Reference(
            dense=arrays["dense"],
            # FlagEmbedding keys lexical weights by token-id strings
            sparse=[{int(token): weight for token, weight in weights.items()} for weights in extra["sparse"]],
            colbert=[arrays[f"colbert_{i}"] for i in range(len(QUERIES) + len(DOCUMENTS))],
            scores={mode: arrays[f"scores_{mode}"] for mode in ("dense", "sparse", "colbert", "hybrid")},
            sparse_margin=float(extra["sparse_margin"]),
        )
