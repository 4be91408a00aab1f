"""What a model service reads while it drains: whether a gateway worker of its server still runs."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from server_state import server_files


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(server_files, "server_file", lambda name: tmp_path / f"embento-1-2-{name}")
    return tmp_path


def mark(folder: Path, pid: int) -> None:
    (folder / f"embento-1-2-{server_files.GATEWAY_MARK}{pid}").touch()


def test_without_a_marked_gateway_worker_the_answer_is_unknown(folder):
    assert server_files.gateway_workers_alive() is None


def test_a_running_worker_counts(folder):
    mark(folder, os.getpid())
    assert server_files.gateway_workers_alive() is True


def test_an_exited_worker_does_not_count_even_before_it_is_reaped(folder):
    reaped = subprocess.Popen(["true"])
    reaped.wait()
    zombie = subprocess.Popen(["true"])  # exits, and stays a zombie until waited for
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.01)
    mark(folder, reaped.pid)
    mark(folder, zombie.pid)
    assert server_files.gateway_workers_alive() is False
    zombie.wait()
