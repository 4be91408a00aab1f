"""A real PostgreSQL server (Debian's package, installed when missing) on a loopback port: a throwaway cluster in
the caller's folder, run by the `postgres` user (PostgreSQL refuses to run as root), trusting every local login."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

USER = "embento"  # the cluster's superuser and its database, both named in the URL
COMMAND_TIMEOUT_S = 120  # pg_ctl waits at most 60 s on its own (-t 60)


@functools.cache
def postgres_bin() -> Path:
    """The newest installed server's bin folder (Debian's `/usr/bin` holds only wrappers), installed when missing."""
    found = newest_bin()
    if found is None:
        from testkit.apt import apt_install

        result = apt_install(["postgresql"], recommends=False)
        found = newest_bin()
        if found is None:
            raise RuntimeError(f"postgresql could not be installed: {result.stderr[-2000:]}")
    return found


def newest_bin() -> Path | None:
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda pg_ctl: tuple(int(part) for part in pg_ctl.parent.parent.name.split(".")),
    )
    return versions[-1].parent if versions else None


def traversable_by_others(folder: Path) -> None:
    """o+x (pass through, not list) on every parent that lacks it: pytest's folders (/tmp/pytest-of-root/...) are
    mode 700, and the `postgres` user must reach the cluster. Done rather than keeping the cluster elsewhere so
    that the data lives as long as the caller's folder (a restart on it finds the data; pytest cleans it up) and
    nothing outside it is created; redone on each start, as pytest takes the bit off again when a session starts."""
    for parent in folder.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def kill_postmaster(folder: Path) -> None:
    """SIGKILL to the postmaster and its children (each in a session of its own, so not one process group), then
    its lock files away (data/postmaster.pid, the socket's .lock): a killed postmaster can linger as a zombie where
    init reaps late (this machine's does), and a start that finds a lock naming a live pid refuses to run."""
    pid_file = folder / "data" / "postmaster.pid"
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):  # no file, or the process is gone
        pid = int(pid_file.read_text().splitlines()[0])
        if str(folder).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():  # ours, not a reused pid
            os.kill(pid, signal.SIGSTOP)  # it forks no backend while its children are killed
            for child in children(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}/cmdline").read_bytes() and time.monotonic() < deadline:  # a zombie's is empty
                time.sleep(0.02)  # until it has exited, freeing its port
    for lock in [pid_file, *folder.glob(".s.PGSQL.*.lock")]:
        lock.unlink(missing_ok=True)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, read from /proc (slim images have no procps)."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # exited meanwhile
            if stat_file.read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                found.append(int(stat_file.parent.name))
    return found


class PostgresServer:
    """One PostgreSQL cluster in `folder` (data/, pg.log, its Unix socket) listening on 127.0.0.1:`port`."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder = folder.resolve()
        self.port = port
        self.data = self.folder / "data"

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{USER}"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        traversable_by_others(self.folder)
        subprocess.run(["chown", "-R", "postgres:postgres", str(self.folder)], check=True)
        if not (self.data / "PG_VERSION").exists():  # initdb once: a restart keeps the data
            self._run("initdb", "-D", self.data, "-U", USER, "--auth=trust", "-E", "UTF8", "--locale=C")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        started = self._run(
            "pg_ctl",
            "-D",
            self.data,
            "-l",
            self.folder / "pg.log",
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
            check=False,
        )
        if started.returncode != 0:
            log = (self.folder / "pg.log").read_text(errors="replace") if (self.folder / "pg.log").exists() else ""
            raise RuntimeError(f"postgres did not start: {started.stdout}{started.stderr}\n{log[-2000:]}")
        if self._psql("postgres", f"select 1 from pg_database where datname = '{USER}'") != "1":  # createdb once
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, USER)

    def stop(self) -> None:
        """A fast shutdown (clients cut off, the data kept); SIGKILL if that fails."""
        if self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop", check=False).returncode != 0:
            kill_postmaster(self.folder)

    def sql(self, statement: str) -> str:
        """One statement (or several, `;`-separated) in the `embento` database; the rows psql prints, unaligned."""
        return self._psql(USER, statement)

    def _psql(self, database: str, statement: str) -> str:
        return self._run(
            "psql", "-Atq", "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, "-d", database, "-c", statement
        ).stdout.strip()

    def _run(self, program: str, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess:
        """A PostgreSQL program as the `postgres` user, in `folder` (root's working directory may be closed to it)."""
        command = ["runuser", "-u", "postgres", "--", str(postgres_bin() / program), *map(str, args)]
        result = subprocess.run(command, cwd=self.folder, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        if check and result.returncode != 0:
            raise RuntimeError(f"{program} failed ({result.returncode}): {result.stderr[-2000:]}")
        return result


@contextlib.contextmanager
def running_postgres(folder: Path, port: int) -> Iterator[PostgresServer]:
    server = PostgresServer(folder, port)
    try:  # start inside: a start that fails after pg_ctl (createdb) must not leave a server running
        server.start()
        yield server
    finally:
        server.stop()
