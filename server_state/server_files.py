"""Files every process of one server shares: its gateway workers (gateway/shared_memory.py) and its model services."""

from __future__ import annotations

import atexit
import os
import tempfile
from pathlib import Path

from bentoml._internal.context import server_context


def server_file(name: str) -> Path | None:
    """A file every worker process of this server shares (None outside BentoML's arbiter). Named by the
    arbiter's pid and start time, so a later server that gets the same pid never reads this one's; in
    shared memory where there is some. The arbiter removes them when it exits (`remove_server_files`)."""
    if server_context.worker_index is None:
        return None
    return _server_folder() / f"embento-{_process_key(os.getppid())}-{name}"


def arbiter_file(name: str) -> Path:
    """In the arbiter: the file its workers know as `server_file(name)`."""
    return _server_folder() / f"embento-{_process_key(os.getpid())}-{name}"


GATEWAY_MARK = "gateway-"
RELOAD_MARK = "keys-reload"  # touched by the arbiter on SIGHUP (bento/serving/patches.py): the keys file is read again


def mark_gateway_worker() -> None:
    """In a gateway worker: leave its pid where the server's model services look while they drain."""
    path = server_file(f"{GATEWAY_MARK}{os.getpid()}")
    if path is not None:
        path.touch()


def gateway_workers_alive() -> bool | None:
    """Whether a gateway worker of this server still runs; None outside a server holding gateway workers (a
    model service started alone, as in a split topology, cannot see its gateway)."""
    marker = server_file(GATEWAY_MARK)
    marks = list(marker.parent.glob(f"{marker.name}*")) if marker is not None else []
    if not marks:
        return None
    return any(_running(int(path.name.rsplit("-", 1)[1])) for path in marks)


def _running(pid: int) -> bool:
    """Alive and not a zombie: an exited worker stays one until its arbiter reaps it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def remove_server_files() -> None:
    """In the arbiter, at exit: the files its workers shared."""
    if server_context.worker_index is not None:
        return
    pattern = f"embento-{_process_key(os.getpid())}-*"

    def remove() -> None:
        for path in _server_folder().glob(pattern):
            path.unlink(missing_ok=True)

    atexit.register(remove)


def _server_folder() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _process_key(pid: int) -> str:
    try:  # field 22 of /proc/<pid>/stat: the start time in clock ticks (after the parenthesised name)
        started = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        started = "0"
    return f"{pid}-{started}"
