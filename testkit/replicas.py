"""The split topology as on Kubernetes, on loopback: model-service replicas behind one HAProxy backend, gateway
replicas (`--depends <Service>=<that backend>`) behind another, both health-checked on /readyz as a Service's
endpoints follow readiness; and a load of OpenAI SDK clients through it. For tests/server/test_replica_loss.py.
HAProxy is Debian's, installed when missing."""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from testkit.apt import apt_install
from testkit.ports import free_port

ROOT = Path(__file__).resolve().parent.parent

START_TIMEOUT_S = 180
WHOLE_TREE_SIGNALS = (signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT)
# As a readiness probe, but tighter than Kubernetes' default (every 10 s): a dead server leaves within ~3 s, and
# a slow /readyz on a loaded machine (5 s allowed) takes no server out.
HEALTH_CHECK = "option httpchk GET /readyz\n    timeout check 5s\n    default-server inter 1s fall 3 rise 2"


@dataclass
class Replica:
    """One server of the topology: its command, port and log, and its first process once started."""

    name: str
    command: list[str]
    port: int
    log: Path
    env: dict[str, str]
    process: subprocess.Popen | None = None
    _tree: list[psutil.Process] = field(default_factory=list)

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def signal(self, sig: signal.Signals) -> None:
        """As an orchestrator stops a pod: SIGTERM to its first process (BentoML's arbiter, which stops its
        workers gracefully); SIGKILL to every process of it at once, as a container's cgroup is killed (the
        workers run in process groups of their own). SIGSTOP and SIGCONT to every process too: a replica that
        stops answering (a hung process, a lost node), and its return."""
        assert self.process is not None
        self._tree = [psutil.Process(self.process.pid), *psutil.Process(self.process.pid).children(recursive=True)]
        for process in self._tree if sig in WHOLE_TREE_SIGNALS else self._tree[:1]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(sig)

    def wait_stopped(self) -> None:
        """Until every process the last signal found has exited."""
        assert self.process is not None
        self.process.wait(timeout=60)
        psutil.wait_procs(self._tree[1:], timeout=60)
        assert not [p for p in self._tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], self.name

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.poll() is None, self.log.read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} not ready: {self.log.read_text()[-3000:]}")


def replica(name: str, folder: Path, model_id: str, *args: str, settings: Mapping[str, str] = {}) -> Replica:
    """A server of the bundle from this checkout, as a pod runs the Bento's: `start-http-server` with `args`, and
    the environment `settings` on top of those every replica has."""
    port = free_port()
    command = [sys.executable, "-m", "bentoml_cli._internal.start", "start-http-server", "service:Gateway"]
    command += [*args, "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "BENTOML_DO_NOT_TRACK": "True", "HF_HUB_OFFLINE": "1", "EMBENTO_MODEL_ID": model_id}
    env |= {"EMBENTO_GATEWAY_WORKERS": "1", "EMBENTO_CPU_THREADS": "1", **settings}
    return Replica(name, command, port, folder / f"{name}.log", env)


def haproxy_config(front: dict[str, int], backends: dict[str, list[Replica]], admin_socket: Path) -> str:
    lines = [
        f"global\n    maxconn 4096\n    stats socket {admin_socket} level admin",
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 300s\n    timeout server 300s",
        # A connection refused is tried on another server: what a Service's endpoints give once a stopping pod
        # leaves them, without the window before the probe notices. A request a server took and dropped is
        # not retried here: the client sees it.
        "    retries 3\n    option redispatch 1\n    retry-on conn-failure",
    ]
    for name, servers in backends.items():
        lines.append(f"frontend {name}\n    bind 127.0.0.1:{front[name]}\n    default_backend {name}_servers")
        members = "\n".join(f"    server {s.name} 127.0.0.1:{s.port} check" for s in servers)
        lines.append(f"backend {name}_servers\n    balance roundrobin\n    {HEALTH_CHECK}\n{members}")
    return "\n".join(lines) + "\n"


def haproxy_command(admin_socket: Path, command: str) -> str:
    """One command of HAProxy's runtime API, and its answer."""
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(str(admin_socket))
        connection.sendall(command.encode() + b"\n")
        return b"".join(iter(lambda: connection.recv(4096), b"")).decode()


@contextlib.contextmanager
def running_haproxy(config: str, folder: Path) -> Iterator[None]:
    if subprocess.run(["which", "haproxy"], capture_output=True).returncode != 0:
        apt_install(["haproxy"], recommends=False).check_returncode()
    path = folder / "haproxy.cfg"
    path.write_text(config)
    process = subprocess.Popen(["haproxy", "-f", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


@dataclass
class Topology:
    """The servers of a split topology, and the URL clients call (the gateways' HAProxy)."""

    url: str
    model_services: list[Replica]
    gateways: list[Replica]
    admin_socket: Path

    def wait_in_service(self) -> None:
        """Until HAProxy sends requests to every server: a server ready by its own /readyz is still out of its
        backend until `rise` health checks in a row have passed (up to ~2 s), and a request then got HAProxy's 503."""
        servers = {(backend_of(self, s), s.name) for s in (*self.model_services, *self.gateways)}
        deadline = time.monotonic() + START_TIMEOUT_S
        while any((states := server_states(self.admin_socket)).get(server) != "UP" for server in servers):
            assert time.monotonic() < deadline, f"HAProxy never put every server in service: {states}"
            time.sleep(0.2)

    def leave(self, server: Replica) -> None:
        """Take `server` out of its backend, as Kubernetes takes a terminating pod out of its Service's endpoints
        while the pod's preStop runs: no new request reaches it; those it has go on."""
        self._set_state(server, "maint")

    def _set_state(self, server: Replica, state: str) -> None:
        backend = backend_of(self, server)
        answer = haproxy_command(self.admin_socket, f"set server {backend}/{server.name} state {state}")
        assert answer.strip() == "", answer


def backend_of(topology: Topology, server: Replica) -> str:
    return "gateways_servers" if server in topology.gateways else "model_services_servers"


def server_states(admin_socket: Path) -> dict[tuple[str, str], str]:
    """(backend, server) -> HAProxy's status of it (`UP`, `DOWN`, `MAINT`, ...), from its runtime API's `show stat`."""
    rows = list(csv.DictReader(haproxy_command(admin_socket, "show stat").removeprefix("# ").splitlines()))
    return {
        (row["pxname"], row["svname"]): row["status"] for row in rows if row["svname"] not in ("FRONTEND", "BACKEND")
    }


@contextlib.contextmanager
def split_topology(
    folder: Path, model_id: str, replicas: int = 2, gateway_env: Mapping[str, str] = {}
) -> Iterator[Topology]:
    """`replicas` TextEmbedder model services serving `model_id` and as many gateways (with `gateway_env`: the
    shared state's settings, testkit/shared_state.py), each a server of its own with one worker and one intra-op
    thread, all ready; each stopped (SIGTERM) when the block ends."""
    models = [
        replica(f"model-service-{i}", folder, model_id, "--service-name", "TextEmbedder") for i in range(replicas)
    ]
    front = {"model_services": free_port(), "gateways": free_port()}
    depends = f"--depends=TextEmbedder=http://127.0.0.1:{front['model_services']}"
    gateways = [replica(f"gateway-{i}", folder, model_id, depends, settings=gateway_env) for i in range(replicas)]
    admin_socket = folder / "haproxy.sock"
    config = haproxy_config(front, {"model_services": models, "gateways": gateways}, admin_socket)
    with running_haproxy(config, folder):
        try:
            for group in (models, gateways):  # the gateways warm up against the model services
                for server in group:
                    server.start()
                for server in group:
                    server.wait_ready()
            topology = Topology(f"http://127.0.0.1:{front['gateways']}", models, gateways, admin_socket)
            topology.wait_in_service()
            yield topology
        finally:
            for server in (*models, *gateways):
                if server.process is not None and server.process.poll() is None:
                    server.signal(signal.SIGTERM)
                    server.wait_stopped()


@dataclass
class Phase:
    name: str
    sent: int = 0
    retries: int = 0  # the SDK's attempts past a request's first (after a dropped connection or an error answer)
    refusals: list[str] = field(default_factory=list)  # the status and body of each answer that was not a 200
    answered: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Load:
    """`clients` threads, each an OpenAI SDK client (its default retries) sending one input at a time; outcomes,
    retries and error answers count in the phase under way when they happen (a request in flight at an event
    counts in the event's phase)."""

    def __init__(self, url: str, model: str, clients: int, corpus: list[str], api_key: str = "none") -> None:
        self.url, self.model, self.clients, self.corpus, self.api_key = url, model, clients, corpus, api_key
        self.phases: list[Phase] = [Phase("steady")]
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def next_phase(self, name: str) -> None:
        with self._lock:
            self.phases.append(Phase(name))

    def stop(self) -> None:
        """The clients stop once their request in flight has its outcome; one still waiting after two minutes is
        a request left hanging, which fails here (it would count nowhere)."""
        self._stop.set()
        deadline = time.monotonic() + 120
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        assert not any(thread.is_alive() for thread in self._threads), "requests left unanswered"

    def _count_retry(self, request: httpx.Request) -> None:
        if request.headers.get("x-stainless-retry-count", "0") != "0":  # the OpenAI SDK numbers its attempts
            with self._lock:
                self.phases[-1].retries += 1

    def _note_refusal(self, response: httpx.Response) -> None:
        if response.status_code != 200:
            refusal = f"{response.status_code} {response.read()[:160]!r}"
            with self._lock:
                self.phases[-1].refusals.append(refusal)

    def _client(self, index: int) -> None:
        from openai import OpenAI

        hooks = {"request": [self._count_retry], "response": [self._note_refusal]}
        http = httpx.Client(event_hooks=hooks, timeout=120)
        client = OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key, http_client=http)
        corpus = self.corpus
        at = index
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                client.embeddings.create(model=self.model, input=corpus[at % len(corpus)])
                outcome = None
            except Exception as exc:  # the SDK's own error, after its retries
                outcome = repr(exc)[:200]
            with self._lock:
                phase = self.phases[-1]
                phase.sent += 1
                if outcome is None:
                    phase.answered += 1
                    phase.latencies.append(time.perf_counter() - started)
                else:
                    phase.failed += 1
                    phase.errors.append(outcome)
                self._lock.notify_all()
            at += self.clients

    def wait_answered(self, count: int, timeout_s: float = 300) -> None:
        """Until the current phase has `count` outcomes, answered or failed (a phase that only fails ends too)."""
        with self._lock:
            done = self._lock.wait_for(lambda: self.phases[-1].sent >= count, timeout=timeout_s)
        assert done, f"{self.phases[-1].sent} of {count} requests in {timeout_s} s"
