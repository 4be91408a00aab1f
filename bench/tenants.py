"""Tenants' fair share (issue 38) on all-MiniLM-L6-v2: does a tenant that floods a model service leave a light
tenant its latency, and does the flood keep the server's throughput. The figures are docs/tenants.md's "Figures".

    python bench/tenants.py [--seconds 20] [--warm 2] [--flood 100] [--light 2]

Tenants A (`--flood` clients) and B (`--light` clients) send closed loops of single sentences, each with its key.
Two production-mode servers in turn: a fair queue (a keys file: A and B, weight 1 each) and a single queue (no
keys: one tenant, arrival order). Per server: one pass (the median time of a request of the batch size in force
on the idle server), then B alone, A alone and A + B, each `--warm` seconds unrecorded and `--seconds` recorded
(a request counts when sent and answered within them). Printed per phase, for reference, from /metrics: the mean
forward pass and its inputs and the requests per model-service call; and the cores other processes used.

Targets: B's p50 beside A <= 2 x B's p50 alone + one pass; A's inputs/s beside B >= 0.9 x A's alone. No
assertion on timing: figures printed, targets marked met or NOT met.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import LoadWatch, corpus, percentile, summed_metrics  # noqa: E402
from bench.server import free_port, start_server, stop_server  # noqa: E402
from config.keys_file import new_secret  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PASS_TRIES = 5
TEXTS_PER_CLIENT = 400  # sentences each client cycles through


@dataclass
class Tally:
    """One tenant's requests in a phase's recorded seconds."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 99)


@dataclass
class Phase:
    tallies: dict[str, Tally]
    seconds: float
    other_cores: float
    pass_ms: float  # the mean forward pass meanwhile (/metrics), nan if none
    pass_inputs: float  # inputs per pass meanwhile
    call_requests: float  # requests per model-service call meanwhile

    def rate(self, tenant: str) -> float:
        return len(self.tallies[tenant].latencies_ms) / self.seconds


@dataclass
class Server:
    """What one server measured."""

    batch_size: int
    pass_ms: float
    b_alone: Phase
    a_alone: Phase
    both: Phase


def write_keys(folder: Path) -> tuple[Path, dict[str, str]]:
    """A keys file holding the tenants A and B (weight 1, no limits), and their secrets."""
    secrets = {"A": new_secret(), "B": new_secret()}
    keys = [
        {"name": name, "key_sha256": hashlib.sha256(secret.encode()).hexdigest(), "weight": 1}
        for name, secret in secrets.items()
    ]
    path = folder / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": keys}))
    path.chmod(0o600)
    return path, secrets


def write_config(folder: Path, name: str, keys_file: Path | None) -> Path:
    config: dict = {"models": [{"model_id": MODEL}]}
    if keys_file is not None:
        config["auth"] = {"keys_file": str(keys_file)}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def tenant_clients(
    url: str, secret: str, clients: int, seed: int, opens: float, closes: float, tally: Tally
) -> None:
    """`clients` closed loops of single sentences until `closes`; those sent and answered from `opens` on count."""
    texts = corpus(clients * TEXTS_PER_CLIENT, 8, 20, seed=seed)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(
        connector=connector, headers=bearer(secret), timeout=aiohttp.ClientTimeout(total=120)
    ) as session:

        async def client(index: int) -> None:
            at = index * TEXTS_PER_CLIENT
            while (sent := time.perf_counter()) < closes:
                body = {"model": MODEL, "input": texts[at % len(texts)]}
                at += 1
                try:
                    async with session.post(f"{url}/v1/embeddings", json=body) as response:
                        text = await response.text()
                        ok = response.status == 200
                        problem = f"{response.status} {text[:200]}"
                except aiohttp.ClientError as exc:
                    ok, problem = False, repr(exc)
                answered = time.perf_counter()
                if not opens <= sent or answered > closes:
                    continue
                if ok:
                    tally.latencies_ms.append((answered - sent) * 1000)
                else:
                    tally.errors += 1
                    tally.first_error = tally.first_error or problem

        await asyncio.gather(*(client(i) for i in range(clients)))


METRICS = (
    "embento_model_forward_seconds_sum",
    "embento_model_forward_seconds_count",
    "embento_model_batch_size_sum",
    "embento_requests_per_call_sum",
    "embento_requests_per_call_count",
)


def server_counts(url: str, headers: dict[str, str]) -> dict[str, float]:
    """METRICS so far, summed over models and services: the forward passes' seconds, count and inputs
    (bench/batch_jobs.py's way), and the requests that left in the model-service calls (gateway/queue/coalesce.py)."""
    return summed_metrics(httpx.get(f"{url}/metrics", headers=headers, timeout=30).text, METRICS)


def phase(
    url: str,
    pid: int,
    loads: dict[str, tuple[str, int]],
    seconds: float,
    warm: float,
    headers: dict[str, str],
    seed: int,
) -> Phase:
    """`loads` (tenant: (secret, clients)) all at once: `warm` seconds unrecorded, then `seconds` recorded."""
    tallies = {tenant: Tally() for tenant in loads}

    async def run(opens: float) -> None:
        await asyncio.gather(
            *(
                tenant_clients(url, secret, clients, seed + i, opens, opens + seconds, tallies[name])
                for i, (name, (secret, clients)) in enumerate(loads.items())
            )
        )

    opens = time.perf_counter() + warm
    with LoadWatch(pid) as watch:
        before = server_counts(url, headers)
        asyncio.run(run(opens))
        after = server_counts(url, headers)
    delta = {name: after[name] - before[name] for name in METRICS}

    def mean(total: str, count: str) -> float:
        return delta[total] / delta[count] if delta[count] else float("nan")

    return Phase(
        tallies,
        seconds,
        watch.other_cores,
        mean("embento_model_forward_seconds_sum", "embento_model_forward_seconds_count") * 1000,
        mean("embento_model_batch_size_sum", "embento_model_forward_seconds_count"),
        mean("embento_requests_per_call_sum", "embento_requests_per_call_count"),
    )


def one_pass(url: str, headers: dict[str, str]) -> tuple[int, float]:
    """(the batch size in force, the median milliseconds of a request of that many sentences on the idle server)."""
    batch_size = httpx.get(f"{url}/info", headers=headers, timeout=30).json()["models"][0]["batch_size"]
    texts = corpus(batch_size * (PASS_TRIES + 1), 8, 20, seed=77)
    times = []
    with httpx.Client(headers=headers, timeout=120) as client:
        for i in range(PASS_TRIES + 1):  # the first unrecorded
            started = time.perf_counter()
            response = client.post(
                f"{url}/v1/embeddings", json={"model": MODEL, "input": texts[i * batch_size : (i + 1) * batch_size]}
            )
            response.raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return batch_size, statistics.median(times[1:])


def show(label: str, found: Phase) -> None:
    for tenant, tally in found.tallies.items():
        print(
            f"   {label:<10} {tenant}: {found.rate(tenant):6.1f} inputs/s, p50 {tally.p50:6.1f} ms, p99 "
            f"{tally.p99:6.1f} ms"
            + (f"; {tally.errors} errors, the first: {tally.first_error}" if tally.errors else ""),
            flush=True,
        )
    print(
        f"   {'':<10} server: passes {found.pass_ms:.1f} ms of {found.pass_inputs:.1f} inputs, calls of "
        f"{found.call_requests:.1f} requests; other processes {found.other_cores:.2f} cores",
        flush=True,
    )


def measure(name: str, config: Path, home: Path, secrets: dict[str, str], args: argparse.Namespace) -> Server:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    headers = bearer(secrets["A"])  # /info and /metrics want a key where keys are configured
    a, b = {"A": (secrets["A"], args.flood)}, {"B": (secrets["B"], args.light)}
    print(f"{name}:", flush=True)
    process = start_server(port, EMBENTO_CONFIG=str(config), BENTOML_HOME=str(home))
    try:
        phase(url, process.pid, {**a, **b}, min(args.warm, 3.0), 0.0, headers, seed=90)  # warm the server
        batch_size, pass_ms = one_pass(url, headers)
        print(
            f"   one pass   a request of {batch_size} sentences (the batch size in force) on the idle server: "
            f"{pass_ms:.1f} ms",
            flush=True,
        )
        b_alone = phase(url, process.pid, b, args.seconds, args.warm, headers, seed=10)
        show("B alone", b_alone)
        a_alone = phase(url, process.pid, a, args.seconds, args.warm, headers, seed=20)
        show("A alone", a_alone)
        both = phase(url, process.pid, {**a, **b}, args.seconds, args.warm, headers, seed=30)
        show("A + B", both)
    finally:
        stop_server(process)
    return Server(batch_size, pass_ms, b_alone, a_alone, both)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def summary(fair: Server, single: Server) -> None:
    print("summary (fair queue | single queue):", flush=True)
    rows = []
    for server in (fair, single):
        idle, beside = server.b_alone.tallies["B"].p50, server.both.tallies["B"].p50
        target = 2 * idle + server.pass_ms
        alone, with_b = server.a_alone.rate("A"), server.both.rate("A")
        rows.append(
            {
                "B p50 alone": f"{idle:.1f} ms",
                "B p50 beside A": f"{beside:.1f} ms (p99 {server.both.tallies['B'].p99:.1f} ms)",
                "B target": f"<= 2 x {idle:.1f} + {server.pass_ms:.1f} = {target:.1f} ms: {verdict(beside <= target)}",
                "A alone": f"{alone:.1f} inputs/s",
                "A beside B": f"{with_b:.1f} inputs/s",
                "A target": f"{with_b / alone if alone else float('nan'):.2f} x alone (>= 0.9): "
                f"{verdict(with_b >= 0.9 * alone)}",
            }
        )
    width = max(len(value) for value in rows[0].values())
    for key in rows[0]:
        print(f"   {key:<15} {rows[0][key]:<{width}} | {rows[1][key]}", flush=True)
    single_alone = single.a_alone.rate("A")
    ratio = fair.a_alone.rate("A") / single_alone if single_alone else float("nan")
    print(
        f"   A alone, fair queue against single queue: {ratio:.2f} x (the keys' and the fair queue's own cost, "
        f"within the run's noise)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="recorded seconds per phase")
    parser.add_argument("--warm", type=float, default=2.0, help="unrecorded seconds before each phase")
    parser.add_argument("--flood", type=int, default=100, help="tenant A's clients")
    parser.add_argument("--light", type=int, default=2, help="tenant B's clients")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        keys_file, secrets = write_keys(folder)
        fair = measure(
            "1. fair queue (keys file: tenants A and B, weight 1 each)",
            write_config(folder, "fair", keys_file),
            folder / "home-fair",
            secrets,
            args,
        )
        single = measure(
            "2. single queue (no keys: one tenant, arrival order)",
            write_config(folder, "single", None),
            folder / "home-single",
            secrets,
            args,
        )
    summary(fair, single)


if __name__ == "__main__":
    main()
