"""The CPU image for real, as a platform team behind a private mirror builds it: a base made locally with
mmdebstrap, the packages from the sources this machine's pip uses, its CA certificates, `embento build` and
`embento containerize`; then the container run with no network at all, probed from inside: as the image's
user, as OpenShift runs it (an arbitrary uid in group 0), and so on a read-only root with only /tmp writable.

Marked `container` (`make test-container`, its own step of .ci/run): it installs Debian's buildah, podman,
runc and mmdebstrap when they are missing, keeps every image and layer in a private storage root under a
temporary folder, and removes it at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
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

pytestmark = pytest.mark.container

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
CONTAINER = "embento-test"
STOP_GRACE_S = 30
SENTENCES = make_sentences(6)
QUERY = "what do the documents say?"
# OpenShift's default: a uid from the namespace's range, in group 0. Hardened clusters add a read-only root,
# with an emptyDir (here a tmpfs) on /tmp.
ARBITRARY_UID = "1000650000"
RUN_AS = {
    "arbitrary-uid": ["--user", f"{ARBITRARY_UID}:0"],
    "arbitrary-uid-read-only-root": ["--user", f"{ARBITRARY_UID}:0", "--read-only", "--tmpfs", "/tmp"],
}
IMAGE_HOME = "/tmp/embento"  # bento.container_image.WRITABLE_HOME, where everything written at run time goes
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
DECODE_AUDIO = """
import io, sys
import numpy as np, soundfile
sys.path.insert(0, "src")
from models.media import MediaLimits, decode_audio
clip = io.BytesIO()
soundfile.write(clip, np.sin(np.arange(44100) / 10).astype("float32"), 44100, format="WAV")
limits = MediaLimits(max_item_bytes=10**7, max_image_pixels=10**7, max_audio_seconds=10)
print(decode_audio(clip.getvalue(), 48000, limits, "clip").shape[0])
"""
# Runs inside the container: can it reach anything? It must not.
REACH_OUT = """
import socket
try:
    socket.create_connection(("pypi.org", 443), timeout=5)
    print("reached")
except OSError as exc:
    print("unreachable:", exc)
"""


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
    """A private storage root, and the two engine settings these sandboxes need: ulimits within the host's
    hard limits (else `setrlimit RLIMIT_NOFILE: Operation not permitted`) and runc (crun refuses hybrid
    cgroups)."""
    storage, conf = folder / "storage.conf", folder / "containers.conf"
    storage.write_text(
        f'[storage]\ndriver = "{storage_driver(folder)}"\ngraphroot = "{folder}/graph"\nrunroot = "{folder}/run"\n'
    )
    import resource

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    conf.write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        '[engine]\nruntime = "runc"\n'
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


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    install_tools()
    folder = tmp_path_factory.mktemp("containers")
    env = {**os.environ, **engine_files(folder)}
    try:
        yield env
    finally:
        remove_storage(folder, env)


def remove_storage(folder: Path, env: dict[str, str]) -> None:
    """Everything the engines made, then the folder. Not `podman system reset`: it also deletes the machine's
    podman networks."""
    for command in (
        ["podman", "rm", "--force", "--all"],
        ["buildah", "rm", "--all"],
        ["podman", "rmi", "--force", "--all"],
    ):
        subprocess.run(command, env=env, capture_output=True, check=False)
    mounts = [point for point, _ in mount_points() if Path(point).is_relative_to(folder)]
    for mount in sorted(mounts, reverse=True):  # a failed build's leftovers, innermost first
        subprocess.run(["umount", "--lazy", mount], capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def image(engine: dict[str, str], tmp_path_factory: pytest.TempPathFactory, tiny_reranker_path: Path) -> dict:
    """The CPU image of a Bento serving MiniLM (from its package) and a tiny reranker (from the store)."""
    folder = tmp_path_factory.mktemp("build")
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


@contextlib.contextmanager
def running(engine: dict[str, str], name: str, *options: str) -> Iterator[str]:
    # No network, and no HF_HUB_OFFLINE either: a download attempt fails the test instead of being skipped.
    run(["podman", "run", "--detach", "--name", name, "--network", "none", *options, IMAGE], engine)
    try:
        yield name
    finally:
        subprocess.run(["podman", "rm", "--force", name], env=engine, capture_output=True, check=False)


@pytest.fixture(scope="module")
def container(engine: dict[str, str], image: dict) -> Iterator[str]:
    with running(engine, CONTAINER) as name:
        yield name


@pytest.fixture(scope="module")
def host_results(minilm_path: Path, tiny_reranker_path: Path) -> dict[str, np.ndarray]:
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


def test_image_is_labelled_with_how_it_was_made(image):
    labels = image["labels"]
    assert labels["ai.embento.base-image"] == BASE_IMAGE and labels["ai.embento.accel"] == "cpu"
    assert labels["ai.embento.models"] == f"{MINILM},{TINY_RERANKER}"
    assert image["user"] == "bentoml"


def test_container_serves_offline_what_the_host_computes(engine, image, container, host_results, capsys):
    started = time.monotonic()
    answers = probe(engine, container, SENTENCES)
    ready_s = time.monotonic() - started
    assert_serves_what_the_host_computes(answers, host_results)
    reach = run(["podman", "exec", container, "python", "-c", REACH_OUT], engine).stdout
    assert reach.startswith("unreachable"), reach
    with capsys.disabled():
        figures = {**image["figures"], "ready_s": ready_s}
        print("\ncontainer figures: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))


def test_container_runs_as_the_unprivileged_user(engine, container):
    uids = run(["podman", "exec", container, "sh", "-c", "id -u; stat -c %u /proc/1"], engine).stdout.split()
    assert uids[0] == uids[1] != "0"


@pytest.mark.parametrize("case", RUN_AS)
def test_it_serves_under_an_arbitrary_uid_in_group_0(engine, image, host_results, case, capsys):
    """As the image's own user it serves (above); so it must under any uid in group 0, with only /tmp
    writable in the read-only case: BentoML's home, numba's cache and the ONNX export all go under HOME."""
    with running(engine, f"{CONTAINER}-{case}", *RUN_AS[case]) as container:
        started = time.monotonic()
        answers = probe(engine, container, SENTENCES)
        ready_s = time.monotonic() - started
        assert_serves_what_the_host_computes(answers, host_results)
        ids = run(["podman", "exec", container, "sh", "-c", "id -u; id -g; stat -c %u /proc/1"], engine).stdout
        assert ids.split() == [ARBITRARY_UID, "0", ARBITRARY_UID]
        environ = run(["podman", "exec", container, "cat", "/proc/1/environ"], engine).stdout.split("\0")
        assert f"BENTOML_HOME={IMAGE_HOME}/bentoml" in environ  # the server's, not BentoML's template's
        exports = run(
            ["podman", "exec", container, "find", IMAGE_HOME, "-name", "model.onnx", "-printf", "%u:%g %p -> %l\n"],
            engine,
        ).stdout.splitlines()
        assert len(exports) == 2, exports  # links to the exports the Bento carries: none was made at start
        assert all(
            line.startswith(f"{ARBITRARY_UID}:root {IMAGE_HOME}/.cache/embento/onnx/")
            and "/models/onnx-" in line.split(" -> ")[1]
            for line in exports
        ), exports
        assert run(["podman", "exec", container, "python", "-c", DECODE_AUDIO], engine).stdout.split() == ["48001"]
        if "--read-only" in RUN_AS[case]:
            write = subprocess.run(
                ["podman", "exec", container, "touch", "/home/bentoml/bento/written"],
                env=engine,
                capture_output=True,
                text=True,
                check=False,
            )
            assert write.returncode != 0 and "Read-only file system" in write.stderr, write
    with capsys.disabled():
        print(f"\n{case}: ready_s {ready_s:.2f}")


def test_sigterm_stops_it_cleanly_within_the_grace_period(engine, container):
    probe(engine, container, SENTENCES[:1])  # serving, not starting
    started = time.monotonic()
    run(["podman", "kill", "--signal", "TERM", container], engine)
    exit_code = run(["podman", "wait", container], engine, timeout=STOP_GRACE_S).stdout.strip()
    stopped_s = time.monotonic() - started
    logs = subprocess.run(["podman", "logs", container], env=engine, capture_output=True, text=True, check=False)
    logs = logs.stdout + logs.stderr
    assert exit_code == "0", logs[-3000:]
    assert stopped_s < STOP_GRACE_S
    assert "Traceback" not in logs, logs[-3000:]
    assert "Service instance cleanup finalized" in logs  # each service ran its shutdown
