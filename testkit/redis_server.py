"""A real `redis-server` (Debian's package, installed when missing) on a loopback port, for the tests of the Redis
cache tier and the Redis ledger: started, killed and restarted on the same port, or stalled with `DEBUG SLEEP`."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

START_TIMEOUT_S = 30


def redis_server_binary() -> str:
    """`redis-server`, installed from Debian's packages when missing (as the container test installs its tools)."""
    found = shutil.which("redis-server")
    if found is None:
        from testkit.apt import apt_install

        result = apt_install(["redis-server"], recommends=False)
        found = shutil.which("redis-server")
        if found is None:
            raise RuntimeError(f"redis-server could not be installed: {result.stderr[-2000:]}")
    return found


class RedisServer:
    """One redis-server on `port`, its files in `folder`; `DEBUG` commands allowed from loopback."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder = folder
        self.port = port
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.folder),
            "--protected-mode",
            "no",
            "--enable-debug-command",
            "local",
        ]
        log = open(self.folder / "redis.log", "ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {(self.folder / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: gone at once, as a crashed or evicted Redis is."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def command(self, *words: str, timeout_s: float = 5.0) -> str:
        """One command on a fresh connection (no client library needed); its first reply line."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s) as sock:
            sock.sendall(resp(*words))
            return sock.recv(65536).split(b"\r\n")[0].decode()

    def debug_sleep(self, seconds: float) -> subprocess.Popen:
        """`DEBUG SLEEP seconds` sent from a process of its own, returning once Redis has stopped answering: the
        server stalls with its sockets open."""
        script = (
            f"import socket; s = socket.create_connection(('127.0.0.1', {self.port})); "
            f"s.sendall({resp('DEBUG', 'SLEEP', str(seconds))!r}); s.recv(64)"
        )
        sleeper = subprocess.Popen([sys.executable, "-c", script])
        deadline = time.monotonic() + START_TIMEOUT_S
        while self._answers(timeout_s=0.2):
            if sleeper.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not stall on DEBUG SLEEP")
            time.sleep(0.02)
        return sleeper

    def _answers(self, timeout_s: float = 5.0) -> bool:
        with contextlib.suppress(OSError):  # refused, or no answer in time (socket.timeout is an OSError)
            return self.command("PING", timeout_s=timeout_s) == "+PONG"
        return False


def resp(*words: str) -> bytes:
    """A command in Redis's wire protocol."""
    return b"".join([f"*{len(words)}\r\n".encode(), *(f"${len(w.encode())}\r\n{w}\r\n".encode() for w in words)])


@contextlib.contextmanager
def running_redis(folder: Path, port: int) -> Iterator[RedisServer]:
    server = RedisServer(folder, port)
    server.start()
    try:
        yield server
    finally:
        server.kill()
