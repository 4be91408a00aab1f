"""The CPU image the container tests build and run, the private podman engine they run it with, and what
the host computes for the same inputs. The fixtures over them are in conftest.py: one image per session,
shared by test_container.py (the image run alone) and test_kube_play.py (the Kubernetes manifests)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from testkit.apt import apt_install
from testkit.sentences import make_sentences
from tests.conftest import MINILM, ROOT, TINY_RERANKER, server_env
from tests.tolerance import assert_close, assert_same_vectors

TOOLS = ("buildah", "podman", "runc", "mmdebstrap")  # each the name of its Debian package too
# What podman and buildah need besides themselves on a minimal Debian 12 (their Recommends, named).
DEBIAN_PACKAGES = (
    *TOOLS,
    "uidmap",
    "conmon",
    "containernetworking-plugins",
    "golang-github-containers-common",
    "iptables",
)
BASE_IMAGE = "localhost/embento-base-test:bookworm"
IMAGE = "localhost/embento-test:cpu"
SENTENCES = make_sentences(6)
QUERY = "what do the documents say?"
# Runs inside the container, with its Python: waits for /readyz, then asks one embedding and one rerank.
PROBE = """
import json, sys, time, urllib.request
url = "http://127.0.0.1:3000"
def post(path, body):
    request = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(request, timeout=120))
deadline = time.monotonic() + 300
while True:
    try:
        if urllib.request.urlopen(url + "/readyz", timeout=5).status == 200:
            break
    except OSError:
        if time.monotonic() > deadline:
            raise
    time.sleep(1)
sentences, query, reranker = json.loads(sys.argv[1])
print(json.dumps({
    "embeddings": post("/v1/embeddings", {"input": sentences}),
    "rerank": post("/v1/rerank", {"model": reranker, "query": query, "documents": sentences}),
}))
"""
# Runs inside the container: a 44.1 kHz clip decoded and resampled to 48 kHz as the gateway does for CLAP
# (librosa's import compiles numba functions with an on-disk cache, which needs a writable place).


def run(command: list[str], env: dict[str, str], timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    output = f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    assert result.returncode == 0, f"{command[:4]} exited {result.returncode}:\n{output}"
    return result


def install_tools() -> None:
    missing = [name for name in TOOLS if shutil.which(name) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        pytest.fail(f"the container test needs {missing}: apt-get install {' '.join(DEBIAN_PACKAGES)} (as root)")
    result = apt_install(DEBIAN_PACKAGES)
    assert result.returncode == 0, f"apt-get: {result.stdout[-4000:]}{result.stderr[-4000:]}"


def mount_points() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of each mount."""
    return [(fields[1], fields[2]) for fields in map(str.split, Path("/proc/mounts").read_text().splitlines())]


def storage_driver(folder: Path) -> str:
    """overlay (fast), unless the folder itself lies on an overlay filesystem, which cannot hold another."""
    _, fstype = max((m for m in mount_points() if folder.is_relative_to(m[0])), key=lambda m: len(m[0]))
    return "vfs" if fstype == "overlay" else "overlay"


def engine_files(folder: Path) -> dict[str, str]:
    """A private storage root and network definitions, and the two engine settings these sandboxes need:
    ulimits within the host's hard limits (else `setrlimit RLIMIT_NOFILE: Operation not permitted`) and runc
    (crun refuses hybrid cgroups)."""
    storage, conf = folder / "storage.conf", folder / "containers.conf"
    storage.write_text(
        f'[storage]\ndriver = "{storage_driver(folder)}"\ngraphroot = "{folder}/graph"\nrunroot = "{folder}/run"\n'
    )
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    conf.write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        '[engine]\nruntime = "runc"\n'
        f'[network]\nnetwork_config_dir = "{folder}/networks"\n'
    )
    return {"CONTAINERS_STORAGE_CONF": str(storage), "CONTAINERS_CONF": str(conf)}


def host_package_flags() -> list[str]:
    """`embento build` flags for the package sources this machine's pip uses (its index, extra indexes and
    wheel folders), where it has any: on an open network, none, and the build uses PyPI and PyTorch's index."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    values: dict[str, list[str]] = {}
    for key, value in re.findall(r"^(?:\S+\.)?(index-url|extra-index-url|find-links)='(.*)'$", listed, re.MULTILINE):
        values.setdefault(key, []).extend(value.split())
    flags = [flag for key, found in values.items() for value in dict.fromkeys(found) for flag in (f"--{key}", value)]
    if values and "extra-index-url" not in values:
        flags += ["--extra-index-url", "none"]  # the host's sources replace PyTorch's index
    return flags


def host_ca_flags(folder: Path) -> list[str]:
    """The CA certificates this machine adds to Debian's (where TLS to the registries is intercepted)."""
    extra = sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))
    if not extra:
        return []
    bundle = folder / "host-ca.pem"
    bundle.write_text("".join(path.read_text() for path in extra))
    return ["--ca-bundle", str(bundle)]


@contextlib.contextmanager
def peak_disk_use(path: Path) -> Iterator[dict[str, float]]:
    """The most disk `path`'s filesystem used beyond its use at the start, sampled twice a second."""
    figures = {"peak_gb": 0.0}
    start = shutil.disk_usage(path).used
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            figures["peak_gb"] = max(figures["peak_gb"], (shutil.disk_usage(path).used - start) / 1e9)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield figures
    finally:
        done.set()
        sampler.join()


def remove_storage(folder: Path, env: dict[str, str]) -> None:
    """Everything the engines made, then the folder. Not `podman system reset`: it also deletes the machine's
    podman networks (the tests' own are in the folder's network_config_dir)."""
    for command in (
        ["podman", "pod", "rm", "--force", "--all"],
        ["podman", "rm", "--force", "--all"],
        ["podman", "network", "prune", "--force"],
        ["buildah", "rm", "--all"],
        ["podman", "rmi", "--force", "--all"],
    ):
        subprocess.run(command, env=env, capture_output=True, check=False)
    mounts = [point for point, _ in mount_points() if Path(point).is_relative_to(folder)]
    for mount in sorted(mounts, reverse=True):  # a failed build's leftovers, innermost first
        subprocess.run(["umount", "--lazy", mount], capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)


def build_image(engine: dict[str, str], folder: Path, tiny_reranker_path: Path) -> dict:
    """The CPU image of a Bento serving MiniLM (from its package) and a tiny reranker (from the store): its
    build figures, labels and user."""
    home = folder / "bentoml"
    env = {**server_env(home), **{k: engine[k] for k in ("CONTAINERS_STORAGE_CONF", "CONTAINERS_CONF")}}
    figures: dict = {}
    started = time.monotonic()
    run([str(ROOT / "deploy" / "image" / "base-image.sh"), BASE_IMAGE], env)
    figures["base_image_s"] = time.monotonic() - started
    embento = [sys.executable, "-m", "commands"]
    run([*embento, "models", "import", str(tiny_reranker_path), "--name", TINY_RERANKER], env, cwd=ROOT)
    config = folder / "embento.yaml"
    # MiniLM on `backend: auto` and the reranker on `onnx`: both run on ONNX Runtime from exports the build made
    # and the Bento carries; each start links them into cache_dir, which must be writable.
    config.write_text(
        json.dumps({"models": [{"model_id": MINILM}, {"model_id": f"bentoml://{TINY_RERANKER}", "backend": "onnx"}]})
    )
    run(
        [
            *embento,
            "build",
            "--accel",
            "cpu",
            "--project-dir",
            str(ROOT),
            "--base-image",
            BASE_IMAGE,
            *host_package_flags(),
            *host_ca_flags(folder),
        ],
        {**env, "EMBENTO_CONFIG": str(config)},
        cwd=ROOT,
    )
    started = time.monotonic()
    with peak_disk_use(folder) as disk:
        run([*embento, "containerize", "--accel", "cpu", "--image-tag", IMAGE], env, cwd=ROOT)
    figures["containerize_s"] = time.monotonic() - started
    figures["peak_disk_gb"] = disk["peak_gb"]
    inspect = json.loads(run(["podman", "image", "inspect", IMAGE], env).stdout)[0]
    figures["image_gb"] = inspect["Size"] / 1e9
    return {"figures": figures, "labels": inspect["Config"].get("Labels") or {}, "user": inspect["Config"].get("User")}


def compute_host_results(minilm_path: Path, tiny_reranker_path: Path) -> dict[str, np.ndarray]:
    """What sentence-transformers computes on the host: the embeddings, and the reranker's scores."""
    from sentence_transformers import CrossEncoder, SentenceTransformer

    cross_encoder = CrossEncoder(str(tiny_reranker_path), local_files_only=True, device="cpu")
    return {
        "embeddings": SentenceTransformer(str(minilm_path), device="cpu").encode(SENTENCES),
        "scores": cross_encoder.predict([(QUERY, s) for s in SENTENCES]),
    }


def probe(engine: dict[str, str], container: str, sentences: list[str]) -> dict:
    """The answers of the server in the container once it is ready; its log if it never is."""
    result = subprocess.run(
        ["podman", "exec", container, "python", "-c", PROBE, json.dumps([sentences, QUERY, TINY_RERANKER])],
        env=engine,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    if result.returncode != 0:
        logs = subprocess.run(["podman", "logs", container], env=engine, capture_output=True, text=True, check=False)
        pytest.fail(
            f"{container} never answered ({result.stderr[-2000:]}); its log:\n{(logs.stdout + logs.stderr)[-4000:]}"
        )
    return json.loads(result.stdout)


def assert_serves_what_the_host_computes(answers: dict, host_results: dict[str, np.ndarray]) -> None:
    got = np.array([item["embedding"] for item in answers["embeddings"]["data"]])
    assert_same_vectors(got, host_results["embeddings"])  # cosine >= 0.99999 per row
    scores = np.zeros(len(SENTENCES))
    for result in answers["rerank"]["results"]:
        scores[result["index"]] = result["relevance_score"]
    assert_close(scores, host_results["scores"])
