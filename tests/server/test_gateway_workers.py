"""Limits hold for the server with several gateway workers: the concurrency limit and the queue bounds are
counted across processes, not per process. Readiness is the server's too: once /readyz says ready, every
worker answers."""

from __future__ import annotations

import multiprocessing
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import MINILM, running_server

MAX_CONCURRENT = 4
ATTEMPTS = 12  # fresh connections past the limit, each handed to either worker by the kernel


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    config = {"models": [{"model_id": MINILM}], "gateway_workers": 2, "max_concurrent_requests": MAX_CONCURRENT}
    with running_server(tmp_path_factory.mktemp("two-workers"), config) as running:
        yield running


def _held_request(port: int) -> socket.socket:
    """A POST whose body never finishes arriving: in flight, at whichever worker took it, until closed."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"input": '
    )
    return sock


def _embed(url: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/embeddings", json={"input": "hello", "model": MINILM}, timeout=60, headers={"Connection": "close"}
    )


@pytest.mark.server
def test_once_ready_every_worker_answers(two_workers):
    """The first test on the fresh server: fresh connections go to either worker, and none is still warming up."""
    url, _ = two_workers
    answers = [_embed(url) for _ in range(ATTEMPTS)]
    assert [a.status_code for a in answers] == [200] * ATTEMPTS, [a.text for a in answers if a.status_code != 200]


@pytest.mark.server
def test_two_gateway_workers_run(two_workers):
    url, pid = two_workers
    commands = [" ".join(p.cmdline()) for p in psutil.Process(pid).children(recursive=True)]
    assert sum("--service-name Embento" in c for c in commands) == 2, commands
    assert _embed(url).status_code == 200


@pytest.mark.server
def test_the_concurrency_limit_holds_across_workers(two_workers):
    url, _ = two_workers
    port = int(url.rsplit(":", 1)[1])
    held = [_held_request(port) for _ in range(MAX_CONCURRENT)]
    try:
        deadline = time.monotonic() + 30
        while (status := _embed(url).status_code) != 429 and time.monotonic() < deadline:
            time.sleep(0.1)  # the held requests may still be on their way in
        assert status == 429
        # Counted per process, a worker holding fewer than 4 of them would let these through.
        statuses = [_embed(url).status_code for _ in range(ATTEMPTS)]
        assert statuses == [429] * ATTEMPTS, statuses
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 30
    while (status := _embed(url).status_code) != 200 and time.monotonic() < deadline:
        time.sleep(0.1)  # the workers notice the closed connections
    assert status == 200  # the slots of requests whose clients left are given back


def _admit_and_hold(worker_index: int, items: int, started, release, result) -> None:
    """In a worker process of its own: admit `items`, say so, hold them until released."""
    from bentoml._internal.context import server_context

    from config import errors
    from gateway.queue.admission import Admission, admission_counters
    from gateway.shared_memory import SharedCounters

    server_context.worker_index = worker_index
    admission = Admission(
        "TextEmbedder",
        max_items=16,
        max_tokens=10**6,
        counters=SharedCounters(admission_counters("TextEmbedder"), file_name="test-admission"),
    )
    try:
        with admission.admit(items, items):
            result.put(("admitted", admission.items))
            started.set()
            release.wait(60)
    except errors.Overloaded:
        result.put(("refused", admission.items))
        started.set()


def test_a_queue_bound_refuses_past_its_total_whichever_worker_counts(tmp_path):
    from server_state.server_files import _process_key, _server_folder

    context = multiprocessing.get_context("spawn")
    release, result = context.Event(), context.Queue()

    def start(worker_index: int, items: int) -> multiprocessing.Process:
        started = context.Event()
        process = context.Process(target=_admit_and_hold, args=(worker_index, items, started, release, result))
        process.start()
        assert started.wait(60)
        return process

    processes = [start(1, 10)]
    try:
        assert result.get(timeout=10) == ("admitted", 10)
        processes.append(start(2, 10))  # 20 would pass 16: refused, though worker 2 holds nothing itself
        assert result.get(timeout=10) == ("refused", 10)
        processes.append(start(2, 6))  # 16 in all: taken
        assert result.get(timeout=10) == ("admitted", 16)
    finally:
        release.set()
        for process in processes:
            process.join(30)
        for path in Path(_server_folder()).glob(f"embento-{_process_key(os.getpid())}-*"):
            path.unlink()
    assert [p.exitcode for p in processes] == [0, 0, 0]


def test_workers_agree_on_the_first_calibration_offered(monkeypatch):
    """Two workers calibrating apart may differ in the last float digits; both keep the first one's."""
    import numpy as np
    from bentoml._internal.context import server_context

    from gateway.shared_memory import agreed
    from server_state.server_files import _process_key, _server_folder

    monkeypatch.setattr(server_context, "worker_index", 1)
    first, second = np.full((3, 4), 0.25, np.float32), np.full((3, 4), 0.2500001, np.float32)
    try:
        assert np.array_equal(agreed("calibration m", first), first)
        assert np.array_equal(agreed("calibration m", second), first)  # another worker, later: the first wins
        assert np.array_equal(agreed("calibration other", second), second)
    finally:
        for path in Path(_server_folder()).glob(f"embento-{_process_key(os.getppid())}-*"):
            path.unlink()
