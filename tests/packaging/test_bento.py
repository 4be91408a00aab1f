"""Shipping: both Bento variants built from one project, store models pinned and carried in the archive,
the built CPU Bento served offline, and the same Bento split into one server per model service."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from commands.build import project_version
from commands.flags import ACCELERATORS
from testkit.media import IMAGES, data_uri
from testkit.sentences import make_sentences
from tests.conftest import (
    MINILM,
    ROOT,
    TINY_CLIP,
    TINY_RERANKER,
    background,
    free_port,
    in_session_cache,
    server_env,
    wait_listening,
    wait_ready,
)
from tests.tolerance import assert_close, assert_same_vectors

pytestmark = pytest.mark.server

PROJECT_FILES = (
    "service.py",
    "gateway",
    "runners",
    "bento",
    "config",
    "server_state",
    "shared_metrics.py",
    "models",
    "bentofile.yaml",
    "pyproject.toml",
    "requirements.txt",
    "requirements-cpu.txt",
    "requirements-cuda.txt",
)
VERSION = project_version(ROOT)
# The Bento's own configuration: three store models, so it holds three model services.
STORE_MODELS = [
    {"model_id": "bentoml://minilm", "served_model_name": MINILM},
    {"model_id": f"bentoml://{TINY_RERANKER}"},
    {"model_id": f"bentoml://{TINY_CLIP}"},
]
MODEL_SERVICES = {"TextEmbedder", "Reranker", "ClipEmbedder"}


def embento(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "commands", *args],
        cwd=ROOT,
        env=server_env(home, **env),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def requirement_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bentoml-home")


@pytest.fixture(scope="module")
def minilm_tag(home: Path) -> str:
    result = embento(home, "models", "import", MINILM, "--name", "minilm")
    assert result.returncode == 0, result.stderr
    return re.search(r" as (minilm:\w+);", result.stdout).group(1)


@pytest.fixture(scope="module")
def store_tags(home: Path, minilm_tag: str, tiny_reranker_path: Path, tiny_clip_path: Path) -> dict[str, str]:
    tags = {"minilm": minilm_tag}
    for name, folder in ((TINY_RERANKER, tiny_reranker_path), (TINY_CLIP, tiny_clip_path)):
        result = embento(home, "models", "import", str(folder), "--name", name)
        assert result.returncode == 0, result.stderr
        tags[name] = re.search(r" as (\S+);", result.stdout).group(1)
    return tags


@pytest.fixture(scope="module")
def bentos(home: Path, store_tags: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`embento build` on a copy of this project whose embento.yaml serves the store models."""
    project = tmp_path_factory.mktemp("project")
    for name in PROJECT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, project / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, project / name)
    (project / "embento.yaml").write_text(yaml.safe_dump(in_session_cache({"models": STORE_MODELS})))
    result = embento(home, "build", "--project-dir", str(project))
    assert result.returncode == 0, result.stderr
    assert re.findall(r"built (embento:\S+)", result.stdout) == [f"embento:{VERSION}-{a}" for a in ACCELERATORS]
    return {accel: home / "bentos" / "embento" / f"{VERSION}-{accel}" for accel in ACCELERATORS}


@pytest.mark.parametrize("accel", ACCELERATORS)
def test_bento_records_its_variant_models_and_pins(bentos, store_tags, accel):
    info = yaml.safe_load((bentos[accel] / "bento.yaml").read_text())
    assert (info["name"], info["version"], info["entry_service"]) == ("embento", f"{VERSION}-{accel}", "Embento")
    assert {k: info["labels"][k] for k in ("owner", "accel", "models")} == {
        "owner": "embento",
        "accel": accel,
        "models": f"{MINILM},{TINY_RERANKER},{TINY_CLIP}",
    }
    assert info["args"] == {"accel": accel}
    # `bentoml://<name>` (no version) is pinned to the exact version in the store at build time; each
    # model service declares the models it loads, the gateway every one (it reads their tokenizers).
    # The text services carry the ONNX exports of their models too (`backend: auto`), made by the build; CLIP
    # has none.
    pins = {service["name"]: [m["tag"] for m in service["models"]] for service in info["services"]}
    exports = {name: [tag.split(":")[0] for tag in tags if tag.startswith("onnx-")] for name, tags in pins.items()}
    pins = {name: [tag for tag in tags if not tag.startswith("onnx-")] for name, tags in pins.items()}
    assert pins == {
        "Embento": [store_tags["minilm"], store_tags[TINY_RERANKER], store_tags[TINY_CLIP]],
        "TextEmbedder": [store_tags["minilm"]],
        "Reranker": [store_tags[TINY_RERANKER]],
        "ClipEmbedder": [store_tags[TINY_CLIP]],
    }
    carried = {"cpu": {"TextEmbedder": ["onnx-all-minilm-l6-v2"], "Reranker": [f"onnx-{TINY_RERANKER}"]}, "cuda": {}}[
        accel
    ]  # `auto` serves torch on a GPU: a CUDA Bento carries no export for it
    assert exports == {"Embento": [], "TextEmbedder": [], "Reranker": [], "ClipEmbedder": [], **carried}
    gateway = next(service for service in info["services"] if service["name"] == "Embento")
    assert {d["service"] for d in gateway["dependencies"]} == MODEL_SERVICES
    carried = yaml.safe_load((bentos[accel] / "src" / "embento.yaml").read_text())
    assert [(m["model_id"], m["served_model_name"]) for m in carried["models"]] == [
        (m["model_id"], m.get("served_model_name", m["model_id"].removeprefix("bentoml://"))) for m in STORE_MODELS
    ]


def test_variant_images_differ_only_in_their_accelerator_packages(bentos):
    dockerfiles = {a: (bentos[a] / "env" / "docker" / "Dockerfile").read_text() for a in ACCELERATORS}
    requirements = {a: requirement_lines(bentos[a] / "env" / "python" / "requirements.txt") for a in ACCELERATORS}
    for accel, dockerfile in dockerfiles.items():
        assert "FROM python:3.11-slim AS base-container" in dockerfile
        assert re.search(r"apt-get install .*\blibsndfile1\b", dockerfile)  # audio decoding
        assert "pip install -r $BENTO_PATH/env/python/requirements.txt" in dockerfile
        assert "ENV UV_INDEX_STRATEGY=$UV_INDEX_STRATEGY" in dockerfile
        assert 'ENTRYPOINT [ "/home/bentoml/bento/env/docker/entrypoint.sh" ]' in dockerfile
        assert "EXPOSE 3000" in dockerfile
        assert {"ctranslate2==4.8.5", "bentoml==1.4.40"} <= set(requirements[accel])
    cpu, cuda = requirements["cpu"], requirements["cuda"]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in cpu and "torch==2.13.0+cpu" in cpu
    assert not any(line.startswith("onnxruntime-gpu") for line in cpu)
    assert "torch==2.13.0" in cuda and not any(line.startswith(("--extra-index-url", "onnxruntime==")) for line in cuda)
    assert any(line.startswith("onnxruntime-gpu==") for line in cuda)
    assert any(line.startswith("nvidia-cublas-cu12==") for line in cuda)
    assert "ENV LD_LIBRARY_PATH=" in dockerfiles["cuda"] and "LD_LIBRARY_PATH" not in dockerfiles["cpu"]
    # One ONNX Runtime release in both variants, and the CPU pins are what this test suite runs on.
    ort_versions = {line.split("==")[1] for line in cpu + cuda if line.startswith("onnxruntime")}
    assert ort_versions == {version("onnxruntime")}
    assert f"torch=={version('torch')}" in cpu


def test_built_cpu_bento_serves_offline_with_its_pinned_store_model(
    home, bentos, minilm_path, tiny_bert_path, tmp_path
):
    # A newer `minilm` (a 32-dimension model) lands in the store after the build; the Bento keeps its pin.
    newer = embento(home, "models", "import", str(tiny_bert_path), "--name", "minilm")
    assert newer.returncode == 0, newer.stderr
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "bentoml",
        "serve",
        f"embento:{VERSION}-cpu",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    # An empty export cache, as in a container: the exports come from the Bento, made at its build.
    fresh_cache = tmp_path / "fresh-cache"
    env = server_env(home, EMBENTO_CACHE_DIR=str(fresh_cache))
    with background(command, env, tmp_path / "bento.log", cwd=tmp_path) as process:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process, tmp_path / "bento.log")
        models = httpx.get(f"{url}/v1/models", timeout=30).json()["data"]
        assert [m["id"] for m in models] == [MINILM, TINY_RERANKER, TINY_CLIP]
        assert models[0]["dimension"] == 384
        assert [m["backend"] for m in models] == ["onnx", "onnx", "torch"], [m["backend_reason"] for m in models]
        assert all(m["backend_reason"].startswith("onnx: its export matches torch") for m in models[:2])
        exports = sorted(fresh_cache.glob("onnx/*/onnx/model.onnx"))
        assert len(exports) == 2 and all(
            p.is_symlink() and p.resolve().is_relative_to(home / "models") for p in exports
        ), exports
        sentences = make_sentences(8)
        response = httpx.post(f"{url}/v1/embeddings", json={"input": sentences, "model": MINILM}, timeout=60)
    assert response.status_code == 200, response.text
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(minilm_path), device="cpu").encode(sentences)
    got = np.array([item["embedding"] for item in response.json()["data"]])
    cosines = (got * expected).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    assert cosines.min() >= 0.9999


def test_export_carries_the_model_weights(home, bentos, minilm_tag, tmp_path):
    archive = tmp_path / "embento.tar"  # the same members as a .bento, without its xz pass (80 s here)
    result = subprocess.run(
        [sys.executable, "-m", "bentoml", "export", f"embento:{VERSION}-cpu", str(archive)],
        env=server_env(home),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    with tarfile.open(archive) as tar:
        members = {member.name.removeprefix("./"): member.size for member in tar.getmembers()}
    name, store_version = minilm_tag.split(":")
    weights = f"models/{name}/{store_version}/model.safetensors"
    assert members.get(weights, 0) == (home / "models" / name / store_version / "model.safetensors").stat().st_size
    assert {"bento.yaml", "src/embento.yaml", "src/service.py"} <= set(members)


def test_split_topology_answers_like_one_process(home, bentos, client, tmp_path):
    """The CPU Bento as one server per model service plus the gateway with `--depends`, as on Kubernetes,
    answers as the single-process server does on the same checkpoints."""
    env = server_env(home)
    start = [
        sys.executable,
        "-m",
        "bentoml_cli._internal.start",
        "start-http-server",
        str(bentos["cpu"]),
        "--host",
        "127.0.0.1",
    ]
    ports = {name: free_port() for name in sorted(MODEL_SERVICES)}
    depends = [f"--depends={name}=http://127.0.0.1:{port}" for name, port in ports.items()]
    gateway_port = free_port()
    with contextlib.ExitStack() as stack:
        # The model services side by side (free_port's ports lie outside the range their own endpoints come
        # from), the gateway once they listen.
        services = {
            name: stack.enter_context(
                background(
                    [*start, "--service-name", name, "--port", str(port)], env, tmp_path / f"{name}.log", cwd=tmp_path
                )
            )
            for name, port in ports.items()
        }
        for name, service in services.items():
            wait_listening(ports[name], service, tmp_path / f"{name}.log")
        gateway = stack.enter_context(
            background([*start, *depends, "--port", str(gateway_port)], env, tmp_path / "gateway.log", cwd=tmp_path)
        )
        url = f"http://127.0.0.1:{gateway_port}"
        wait_ready(url, gateway, tmp_path / "gateway.log")
        with httpx.Client(base_url=url, timeout=60) as split:
            assert split.get("/health").status_code == 200
            _assert_same_answers(split, client)
            _assert_a_batch_runs(split)


def _assert_same_answers(split: httpx.Client, single: httpx.Client) -> None:
    requests = [
        ("/v1/embeddings", {"model": MINILM, "input": make_sentences(6)}),
        ("/v1/rerank", {"model": TINY_RERANKER, "query": "a fox", "documents": ["a fox jumps", "a lazy dog", "x"]}),
        ("/v1/embeddings", {"model": TINY_CLIP, "modality": "image", "input": [data_uri(*IMAGES[min(IMAGES)])]}),
    ]
    for path, body in requests:
        answers = [client.post(path, json=body) for client in (split, single)]
        assert [a.status_code for a in answers] == [200, 200], answers[0].text
        split_json, single_json = (a.json() for a in answers)
        if path == "/v1/rerank":
            # The single-process server runs this reranker on ONNX Runtime, the split one on torch.
            assert [r["index"] for r in split_json["results"]] == [r["index"] for r in single_json["results"]]
            assert_close(
                [r["relevance_score"] for r in split_json["results"]],
                [r["relevance_score"] for r in single_json["results"]],
            )
        else:
            assert_same_vectors(
                [d["embedding"] for d in split_json["data"]], [d["embedding"] for d in single_json["data"]]
            )
            assert split_json["usage"] == single_json["usage"]


def _assert_a_batch_runs(gateway: httpx.Client) -> None:
    """A bulk job on the gateway pod runs its lines on the model-service pods: its bodies are the online ones."""
    bodies = [{"model": MINILM, "input": sentences} for sentences in (make_sentences(3), make_sentences(1))]
    lines = "\n".join(
        json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/embeddings", "body": body})
        for i, body in enumerate(bodies)
    )
    upload = gateway.post("/v1/files", files={"file": ("in.jsonl", lines.encode())}, data={"purpose": "batch"})
    batch = gateway.post(
        "/v1/batches",
        json={"input_file_id": upload.json()["id"], "endpoint": "/v1/embeddings", "completion_window": "24h"},
    ).json()
    deadline = time.monotonic() + 120
    while (batch := gateway.get(f"/v1/batches/{batch['id']}").json())["status"] not in ("completed", "failed"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.2)
    assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 2, batch
    content = gateway.get(f"/v1/files/{batch['output_file_id']}/content").text
    outputs = [json.loads(line) for line in content.splitlines()]
    for output, body in zip(outputs, bodies):
        assert output["response"]["body"] == gateway.post("/v1/embeddings", json=body).json()


def test_a_bento_refuses_a_configuration_that_needs_services_it_lacks(home, bentos, tiny_clap_path, tmp_path):
    config = in_session_cache(
        {"models": [*STORE_MODELS, {"model_id": str(tiny_clap_path), "served_model_name": "added"}]}
    )
    (tmp_path / "more.yaml").write_text(yaml.safe_dump(config))
    # By tag, as users serve it: BentoML first imports `embento` as a module (the installed client package),
    # then loads the Bento of that name. The refusal is one line, without that first try's traceback.
    command = [sys.executable, "-m", "bentoml", "serve", f"embento:{VERSION}-cpu", "--port", str(free_port())]
    result = subprocess.run(
        command,
        env=server_env(home, EMBENTO_CONFIG=str(tmp_path / "more.yaml")),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode != 0
    assert result.stdout + result.stderr == (
        f"embento: this Bento ({VERSION}-cpu) was built with the services "
        "['ClipEmbedder', 'Embento', 'Reranker', 'TextEmbedder'], but the configuration needs ['ClapEmbedder'] "
        "too: rebuild it with that configuration in embento.yaml\n"
    )


@contextlib.contextmanager
def started_bento(home: Path, tag: str, folder: Path, **env: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`bentoml serve <tag>` from `folder`, which holds no configuration, until the block ends: (url, process),
    not ready yet."""
    port = free_port()
    command = [sys.executable, "-m", "bentoml", "serve", tag, "--host", "127.0.0.1", "--port", str(port)]
    with background(command, server_env(home, **env), folder / "bento.log", cwd=folder) as process:
        yield f"http://127.0.0.1:{port}", process


def serve_bento(home: Path, tag: str, folder: Path, **env: str) -> Iterator[str]:
    """`started_bento` once it is ready: its url."""
    with started_bento(home, tag, folder, **env) as (url, process):
        wait_ready(url, process, folder / "bento.log")
        yield url


def test_a_bento_serves_the_configuration_it_was_built_with(home, store_tags, tmp_path):
    """Built under EMBENTO_CONFIG (a file outside the project) and a variable, served from elsewhere with no
    configuration: it serves what it was built with, not the default model."""
    (tmp_path / "other.yaml").write_text(
        yaml.safe_dump(in_session_cache({"models": [{"model_id": f"bentoml://{TINY_RERANKER}"}]}))
    )
    built = embento(
        home,
        "build",
        "--accel",
        "cpu",
        "--version",
        "from-env",
        EMBENTO_CONFIG=str(tmp_path / "other.yaml"),
        EMBENTO_MAX_CLIENT_BATCH_SIZE="16",
    )
    assert built.returncode == 0, built.stderr
    elsewhere, overridden = tmp_path / "elsewhere", tmp_path / "overridden"
    elsewhere.mkdir()
    overridden.mkdir()
    with contextlib.ExitStack() as both:  # side by side, then each one ready
        (url, process), (overridden_url, overridden_process) = [
            both.enter_context(started_bento(home, "embento:from-env-cpu", folder, **env))
            for folder, env in ((elsewhere, {}), (overridden, {"EMBENTO_MAX_CLIENT_BATCH_SIZE": "8"}))
        ]
        wait_ready(url, process, elsewhere / "bento.log")
        wait_ready(overridden_url, overridden_process, overridden / "bento.log")
        assert [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=30).json()["data"]] == [TINY_RERANKER]
        assert httpx.get(f"{url}/info", timeout=30).json()["limits"]["max_client_batch_size"] == 16
        assert httpx.get(f"{overridden_url}/info", timeout=30).json()["limits"]["max_client_batch_size"] == 8
    assert "override the configuration" not in (elsewhere / "bento.log").read_text()
    log = (overridden / "bento.log").read_text()
    assert "EMBENTO_MAX_CLIENT_BATCH_SIZE override the configuration this Bento (from-env-cpu) was built with" in log


def test_a_plain_bentoml_build_under_embento_config_serves_that_configuration(home, store_tags, tmp_path):
    """`bentoml build` itself, not `embento build`, under EMBENTO_CONFIG (a file outside the project) and a
    variable: the Bento carries that configuration in its bento.yaml, API keys left out, and serves it from
    another folder with no configuration in the environment (it used to carry the project's instead, and be
    refused at start)."""
    (tmp_path / "other.yaml").write_text(
        yaml.safe_dump(
            in_session_cache(
                {
                    "api_key": ["not-in-the-bento"],
                    "models": [{"model_id": f"bentoml://{store_tags['minilm']}", "served_model_name": "carried"}],
                }
            )
        )
    )  # newer ones come
    command = [sys.executable, "-m", "bentoml", "build", str(ROOT), "--version", "plain-build", "--output", "tag"]
    built = subprocess.run(
        command,
        cwd=ROOT,
        env=server_env(home, EMBENTO_CONFIG=str(tmp_path / "other.yaml"), EMBENTO_MAX_CLIENT_BATCH_SIZE="16"),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    bento = home / "bentos" / "embento" / "plain-build"
    assert "not-in-the-bento" not in (bento / "bento.yaml").read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with contextlib.contextmanager(serve_bento)(home, "embento:plain-build", elsewhere) as url:
        assert [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=30).json()["data"]] == ["carried"]
        assert httpx.get(f"{url}/info", timeout=30).json()["limits"]["max_client_batch_size"] == 16
        response = httpx.post(f"{url}/v1/embeddings", json={"input": ["a sentence"], "model": "carried"}, timeout=60)
    assert response.status_code == 200, response.text
    assert len(response.json()["data"][0]["embedding"]) == 384
    assert "override the configuration" not in (elsewhere / "bento.log").read_text()


def test_a_checkpoint_whose_kind_cannot_be_told_is_imported_undetected(home, tmp_path):
    """Serving it needs `kind:` (models.md: how the kind is chosen); importing it does not."""
    from transformers import Qwen3VLConfig

    Qwen3VLConfig().save_pretrained(tmp_path / "qwen3-vl")
    result = embento(home, "models", "import", str(tmp_path / "qwen3-vl"), "--name", "qwen3-vl")
    assert result.returncode == 0, result.stderr
    labels = subprocess.run(
        [sys.executable, "-c", "import bentoml; print(bentoml.models.get('qwen3-vl').info.labels['kind'])"],
        cwd=ROOT,
        env=server_env(home),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert labels.stdout.strip() == "undetected"


def test_store_errors_name_the_way_out(home, tmp_path):
    (tmp_path / "empty").mkdir()
    result = embento(home, "models", "import", str(tmp_path / "empty"))
    assert result.returncode == 2 and "holds no config.json" in result.stderr
    lookups = (
        "from config.served import stored_model\n"
        "for tag in ('nope', 'Not A Name'):\n"
        "    try:\n        stored_model(tag)\n    except Exception as exc:\n        print(exc.message)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", lookups],
        cwd=ROOT,
        env=server_env(home),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    missing, invalid = result.stdout.splitlines()
    assert missing.startswith("model 'bentoml://nope:latest' is not in the BentoML model store")
    assert "embento models import <hub id or folder> --name nope" in missing
    assert invalid.startswith("'bentoml://Not A Name:latest' does not name a store model")


def test_store_names_come_from_the_ids_last_part():
    from bento.packaging.store import store_name

    assert store_name("BAAI/bge-small-en-v1.5") == "bge-small-en-v1.5"
    assert store_name("./checkpoints/My Model_v2/") == "my-model_v2"
