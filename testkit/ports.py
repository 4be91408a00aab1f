"""Loopback ports for servers started side by side (tests and benchmarks)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_PORTS_HANDED: set[int] = set()


def free_port() -> int:
    """A loopback port that is free now, below the kernel's ephemeral range and never handed out before in
    this process. A starting server binds ports of its own (its arbiter's ZeroMQ endpoints) from the
    ephemeral range: a port from below it cannot be taken by one, so servers may start side by side."""
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(max(1024, ephemeral_start - 12000), ephemeral_start)
        if port in _PORTS_HANDED:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use (perhaps by someone else's test run)
                continue
        _PORTS_HANDED.add(port)
        return port
