"""The CPU image for real, as a platform team behind a private mirror builds it: a base made locally with
mmdebstrap, the packages from the sources this machine's pip uses, its CA certificates, `embento build` and
`embento containerize`; then the container run with no network at all, probed from inside: as the image's
user, as OpenShift runs it (an arbitrary uid in group 0), and so on a read-only root with only /tmp writable.

Marked `container` (`make test-container`, its own step of .ci/run): it installs Debian's buildah, podman,
runc and mmdebstrap when they are missing, keeps every image and layer in a private storage root under a
temporary folder, and removes it at the end (container_image.py, conftest.py).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.conftest import MINILM, TINY_RERANKER
from tests.packaging.container_image import (
    BASE_IMAGE,
    IMAGE,
    SENTENCES,
    assert_serves_what_the_host_computes,
    probe,
    run,
)

pytestmark = pytest.mark.container

CONTAINER = "embento-test"
STOP_GRACE_S = 30
# OpenShift's default: a uid from the namespace's range, in group 0. Hardened clusters add a read-only root,
# with an emptyDir (here a tmpfs) on /tmp.
ARBITRARY_UID = "1000650000"
RUN_AS = {
    "arbitrary-uid": ["--user", f"{ARBITRARY_UID}:0"],
    "arbitrary-uid-read-only-root": ["--user", f"{ARBITRARY_UID}:0", "--read-only", "--tmpfs", "/tmp"],
}
IMAGE_HOME = "/tmp/embento"  # bento.packaging.container_image.WRITABLE_HOME, where everything written at run time goes
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
