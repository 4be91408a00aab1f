"""Faults. An input that makes the model raise fails alone, not the 15 requests that shared its batch. A
model service killed with SIGKILL under load: the requests it held get a 503, readiness turns false within a
second and back once BentoML has restarted it, nothing hangs, and the answers after are right."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import yaml

from bento.serving.lifecycle import STARTUP_FAILED_STATUS
from bento.serving.start_failures import PREFIX, START_FAILED
from testkit.checkpoints import build_tiny_bert, copy_bert_tokenizer
from testkit.sentences import make_sentences
from tests.conftest import (
    MINILM,
    READY_POLL_S,
    ROOT,
    free_port,
    in_session_cache,
    listening_server,
    merged_batches,
    metric,
    running_server,
    server_env,
    wait_ready,
)
from tests.references import transformers_embeddings
from tests.tolerance import assert_same_vectors

pytestmark = pytest.mark.server

PROBE_TIMEOUT_S = 5
POLL_S = 0.05
POISONED = "short-positions"


@pytest.fixture(scope="module")
def short_positions_path(tmp_path_factory: pytest.TempPathFactory, tiny_bert_path) -> str:
    """A tiny BERT that has position embeddings for 64 tokens only: longer inputs make its forward raise."""
    folder = tmp_path_factory.mktemp("short-positions")
    return str(build_tiny_bert(folder, tiny_bert_path, seed=1, max_position_embeddings=64))


@pytest.fixture(scope="module")
def fragile(tmp_path_factory: pytest.TempPathFactory, short_positions_path: str) -> Iterator[tuple[str, int]]:
    # An operator's mistake, as happens: max_seq_length set past what the checkpoint can take.
    config = {
        "models": [
            {"model_id": MINILM},
            {"model_id": short_positions_path, "served_model_name": POISONED, "max_seq_length": 256},
        ]
    }
    with running_server(tmp_path_factory.mktemp("fragile"), config) as running:
        yield running


def test_an_input_that_makes_the_model_raise_fails_alone(fragile, short_positions_path):
    url, _ = fragile
    good = [f"short sentence number {i} about embeddings" for i in range(15)]
    poison = " ".join(["word"] * 150)  # 152 tokens: past the 64 positions the model has

    async def together() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            texts = good[:7] + [poison] + good[7:]
            return await asyncio.gather(
                *(http.post("/v1/embeddings", json={"input": text, "model": POISONED}) for text in texts)
            )

    metrics_before = httpx.get(f"{url}/metrics", timeout=30).text
    responses = asyncio.run(together())
    statuses = [r.status_code for r in responses]
    assert statuses == [200] * 7 + [500] + [200] * 8, statuses
    assert "the model failed on input(s) [0]" in responses[7].json()["error"]["message"]
    got = np.array([r.json()["data"][0]["embedding"] for i, r in enumerate(responses) if i != 7])
    assert_same_vectors(got, transformers_embeddings(Path(short_positions_path), good, "mean", True))
    shared = merged_batches(httpx.get(f"{url}/metrics", timeout=30).text, "TextEmbedder") - merged_batches(
        metrics_before, "TextEmbedder"
    )
    assert shared >= 1  # the poison really rode in a batch with good requests
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200


async def until(reached: Callable[[], bool | Awaitable[bool]], what: str, timeout_s: float = 60) -> None:
    """Polls `reached` (a check, or a coroutine that checks) until it holds; an AssertionError naming `what`
    after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not await _truth(reached()):
        assert time.monotonic() < deadline, f"not reached in {timeout_s} s: {what}"
        await asyncio.sleep(POLL_S)


async def _truth(outcome: bool | Awaitable[bool]) -> bool:
    return await outcome if inspect.isawaitable(outcome) else outcome


def service_pid(root: int, name: str) -> int | None:
    for child in psutil.Process(root).children(recursive=True):
        try:
            command = child.cmdline()
        except psutil.Error:  # the killed one lingers as a zombie until reaped
            continue
        if "--service-name" in command and command[command.index("--service-name") + 1] == name:
            return child.pid
    return None


def test_killed_model_service_is_restarted_and_nothing_hangs(fragile):
    url, root = fragile
    body = {"input": ["a sentence to embed"], "model": MINILM}
    before = np.array(httpx.post(f"{url}/v1/embeddings", json=body, timeout=60).json()["data"][0]["embedding"])
    victim = service_pid(root, "TextEmbedder")

    async def scenario() -> tuple[list, list]:
        answers: list[tuple[float, int | str, str]] = []
        probes: list[tuple[float, int | str]] = []
        stop = asyncio.Event()

        async def client() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                while not stop.is_set():
                    try:
                        response = await http.post("/v1/embeddings", json=body)
                        answers.append((time.monotonic(), response.status_code, response.text))
                    except httpx.HTTPError as exc:
                        answers.append((time.monotonic(), type(exc).__name__, ""))

        clients = [asyncio.create_task(client()) for _ in range(8)]
        await until(lambda: len(answers) >= len(clients), "the load on")
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        async with httpx.AsyncClient(base_url=url, timeout=PROBE_TIMEOUT_S) as http:
            while time.monotonic() - killed_at < 90:
                for path in ("/readyz", "/health"):  # BentoML's probe, and infinity's
                    try:
                        probes.append((time.monotonic(), (await http.get(path)).status_code))
                    except httpx.HTTPError as exc:
                        probes.append((time.monotonic(), type(exc).__name__))
                if probes[-1][1] == probes[-2][1] == 200 and any(status != 200 for _, status in probes):
                    break
                await asyncio.sleep(0.3)
        back_at = time.monotonic()
        await until(lambda: sum(t > back_at for t, _, _ in answers) >= len(clients), "answers after the restart")
        stop.set()
        await asyncio.gather(*clients)
        return (
            [(t - killed_at, s, m) for t, s, m in answers if t >= killed_at],
            [(t - killed_at, s) for t, s in probes],
            back_at - killed_at,
        )

    answers, probes, back_after = asyncio.run(scenario())
    probe_statuses = [status for _, status in probes]
    assert set(probe_statuses) == {503, 200}, probes  # false while it restarts, never a hang or a 500
    assert probe_statuses[-1] == 200
    statuses = Counter(status for _, status, _ in answers)
    assert set(statuses) <= {200, 503}, statuses
    assert all("model service is unavailable" in text for _, status, text in answers if status == 503)
    assert all(status == 200 for t, status, _ in answers if t > back_after)  # recovered, no hand needed
    assert statuses[200] > 0
    restarted = service_pid(root, "TextEmbedder")
    assert restarted is not None and restarted != victim
    after = np.array(httpx.post(f"{url}/v1/embeddings", json=body, timeout=60).json()["data"][0]["embedding"])
    assert_same_vectors(after, before)


async def inputs_sent(http: httpx.AsyncClient) -> float:
    """Inputs the gateway has sent towards the model service: their requests were read and are in flight."""
    return metric((await http.get("/metrics")).text, "embento_request_inputs_total", model=MINILM)


def test_sigterm_lets_in_flight_requests_finish_then_exits_0(tmp_path):
    """What an orchestrator does on a rollout: SIGTERM to the main process, as a container's PID 1 gets it."""
    texts = make_sentences(64, seed=3)
    with running_server(tmp_path, {"models": [{"model_id": MINILM}]}) as (url, pid):
        server = psutil.Process(pid)

        async def stop_while_busy() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                before = await inputs_sent(http)
                busy = [asyncio.create_task(http.post("/v1/embeddings", json={"input": texts})) for _ in range(6)]

                async def all_in_flight() -> bool:
                    return await inputs_sent(http) - before >= len(busy) * len(texts)

                await until(all_in_flight, "all six requests in flight")
                os.kill(pid, signal.SIGTERM)
                return await asyncio.gather(*busy)

        responses = asyncio.run(stop_while_busy())
        assert [r.status_code for r in responses] == [200] * 6
        assert all(len(r.json()["data"]) == len(texts) for r in responses)
        assert server.wait(timeout=60) == 0


def checkpoint_without_weights(folder: Path, minilm_path: Path) -> Path:
    """MiniLM's config and tokenizer without its weights: fails to load, every time, once the tokenizer is read."""
    folder.mkdir()
    copy_bert_tokenizer(minilm_path, folder)
    (folder / "config.json").write_bytes((minilm_path / "config.json").read_bytes())
    return folder


@pytest.fixture(scope="module")
def no_weights(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    return checkpoint_without_weights(tmp_path_factory.mktemp("checkpoints") / "no-weights", minilm_path)


def tiny_mpnet(folder: Path, minilm_path: Path) -> Path:
    """An MPNet, which CTranslate2 has no converter for."""
    import torch
    from transformers import MPNetConfig, MPNetModel

    torch.manual_seed(2)
    MPNetModel(
        MPNetConfig(vocab_size=30527, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    ).save_pretrained(folder)
    copy_bert_tokenizer(minilm_path, folder)
    return folder


def serve_until_it_stops(
    folder: Path, config: dict, command: list[str] | None = None, timeout_s: float = 300
) -> tuple[int, str]:
    """`bentoml serve` (or `command`) with this configuration, run until it exits: (status, log)."""
    folder.mkdir(exist_ok=True)
    (folder / "embento.yaml").write_text(yaml.safe_dump(in_session_cache(config)))
    command = command or [sys.executable, "-m", "bentoml", "serve", "service:Gateway", "--port", str(free_port())]
    env = server_env(folder / "home", EMBENTO_CONFIG=str(folder / "embento.yaml"))
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    return result.returncode, result.stdout + result.stderr


def embento_serve(*args: str) -> list[str]:
    return [sys.executable, "-m", "commands", "serve", *args, "--host", "127.0.0.1", "--port", str(free_port())]


def refused_on_import(debug: bool) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bentoml",
        "serve",
        "service:Gateway",
        "--port",
        str(free_port()),
        *(["--debug"] if debug else []),
    ]


REFUSED_DTYPE = "dtype 'bfloat16' with backend 'ctranslate2' needs a CUDA device, and it runs on 'cpu'"
NO_INT8_ON_TORCH = "dtype 'int8' is not available with backend 'torch'"


@pytest.fixture(scope="module")
def stopped(
    tmp_path_factory: pytest.TempPathFactory,
    minilm_path: Path,
    tiny_bert_path: Path,
    minilm_reranker_path: Path,
    no_weights: Path,
) -> Iterator[dict[str, Future[tuple[int, str]]]]:
    """The servers that stop at start-up, each test's case, run three at a time as the module starts (each
    spends seconds importing and loading before it stops): case -> its (status, log) once it has stopped.
    Their ports come from free_port, outside the range the servers' own endpoints come from."""
    root = tmp_path_factory.mktemp("stopped")
    minilm = {"models": [{"model_id": MINILM}]}
    mpnet = tiny_mpnet(root / "tiny-mpnet", minilm_path)
    # `embento serve` probes /readyz all along, for its ready banner. A probe used to start a warm-up try of
    # its own, which waited on the dying model service for the client's timeout (request_timeout_s + 30 s),
    # and the stopping server waited for that probe: 150 s instead of about 6. 90 s tells the two apart.
    cases: dict[str, tuple[dict, list[str] | None, float]] = {
        "warm-up": ({"models": [{"model_id": MINILM}, too_short_reranker(minilm_reranker_path)]}, None, 300),
        "no weights": ({"models": [{"model_id": MINILM}, {"model_id": str(no_weights)}]}, None, 300),
        "no converter": (minilm, embento_serve("--model-id", str(mpnet), "--backend", "ctranslate2"), 90),
        "debug dtype": (
            minilm,
            embento_serve(
                "--model-id",
                str(tiny_bert_path),
                "--backend",
                "ctranslate2",
                "--dtype",
                "bfloat16",
                "--log-level",
                "debug",
            ),
            120,
        ),
        **{
            f"on import, debug={debug}": (
                {"models": [{"model_id": MINILM, "backend": "torch", "dtype": "int8"}]},
                refused_on_import(debug),
                120,
            )
            for debug in (False, True)
        },
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        yield {
            case: pool.submit(serve_until_it_stops, root / case, config, command, timeout_s)
            for case, (config, command, timeout_s) in cases.items()
        }


def assert_said_once(log: str, reason: str) -> None:
    """A start-up failure with a known cause: its reason once, as the server's last word, and no traceback."""
    assert log.count(reason) == 1, log
    assert next(line for line in log.splitlines() if reason in line).startswith(START_FAILED)
    assert "Traceback" not in log and "Initializing service error" not in log, log


def test_a_model_that_cannot_load_stops_the_server_naming_it_and_the_cause(stopped, no_weights):
    """Without weights the checkpoint fails on every try: the server stops instead of restarting it forever,
    and exits non-zero, so that systemd, a Kubernetes Job or `embento serve && ...` see a failure."""
    status, log = stopped["no weights"].result()
    assert f"cannot load '{no_weights}'" in log and "no file named" in log  # the model, and the cause
    assert_said_once(log, f"cannot load '{no_weights}'")
    assert status == STARTUP_FAILED_STATUS


def test_embento_serve_exits_non_zero_when_the_backend_cannot_run_the_model(stopped):
    """CTranslate2 has no converter for MPNet: the model service fails to load, and `embento serve` passes
    BentoML's status on."""
    status, log = stopped["no converter"].result()
    assert_said_once(log, "No conversion is registered for the model configuration MPNetConfig")
    assert status == STARTUP_FAILED_STATUS


def test_at_debug_level_a_refused_dtype_shows_its_traceback(stopped, tiny_bert_path):
    """CTranslate2 in bfloat16 on a CPU, refused as the model service loads: one line at the default level, as
    for the failures above (it used to come five times, three with a traceback: the service's own line,
    BentoML's "Initializing service error", uvicorn's lifespan failure twice, the closing line); at debug
    level, with BentoML's tracebacks too."""
    status, log = stopped["debug dtype"].result()
    assert status == STARTUP_FAILED_STATUS
    assert f"{START_FAILED}model '{tiny_bert_path.name}': {REFUSED_DTYPE}" in log
    assert "Traceback (most recent call last)" in log and "Initializing service error" in log
    assert "config.errors.ConfigError: model" in log


@pytest.mark.parametrize("debug", [False, True])
def test_a_configuration_refused_as_bentoml_serve_imports_the_service_is_one_line(stopped, debug):
    """Read as `bentoml serve`'s own process imports the service, before any worker starts."""
    status, log = stopped[f"on import, debug={debug}"].result()
    assert status != 0 and log.count(NO_INT8_ON_TORCH) == (2 if debug else 1), log  # with --debug: the cause's too
    assert (f"{PREFIX}invalid configuration" in log) != debug
    assert ("Traceback" in log) == debug


def too_short_reranker(minilm_reranker_path: Path) -> dict:
    """An operator's mistake: a reranker limited to 4 tokens, which no query and document fit in. It loads,
    and its warm-up (a real rerank) fails, as every request would."""
    return {"model_id": str(minilm_reranker_path), "served_model_name": "too-short", "max_seq_length": 4}


def test_a_warm_up_that_cannot_succeed_stops_the_server(stopped):
    status, log = stopped["warm-up"].result()
    assert "model 'too-short': its warm-up failed: query is 3 tokens" in log and "4-token limit" in log
    assert_said_once(log, "model 'too-short': its warm-up failed: query is 3 tokens")
    assert status == STARTUP_FAILED_STATUS


@pytest.fixture(scope="module")
def partial(
    tmp_path_factory: pytest.TempPathFactory, minilm_reranker_path: Path, no_weights: Path
) -> Iterator[dict[str, tuple[str, subprocess.Popen, Path]]]:
    """The servers with allow_partial, each test's own, started side by side (each once the one before
    listens): case -> (url, process, log). Each test waits for what it needs of its own."""
    configs = {
        "failed warm-up": [{"model_id": MINILM}, too_short_reranker(minilm_reranker_path)],
        "nothing left": [too_short_reranker(minilm_reranker_path)],
        "no weights": [
            {"model_id": MINILM},
            {"model_id": str(no_weights), "served_model_name": "broken"},
            # the Reranker service's only model: that service serves nothing, and is no reason to be unready
            {"model_id": str(no_weights), "served_model_name": "broken-reranker", "kind": "rerank"},
        ],
    }
    with contextlib.ExitStack() as stack:
        started = {}
        for case, models in configs.items():
            folder = tmp_path_factory.mktemp("partial")
            url, process = stack.enter_context(listening_server(folder, {"allow_partial": True, "models": models}))
            started[case] = (url, process, folder / "server.log")
        yield started


def test_with_allow_partial_a_failed_warm_up_is_reported_and_the_others_serve(partial):
    url, process, log = partial["failed warm-up"]
    wait_ready(url, process, log)
    ready = httpx.get(f"{url}/readyz", timeout=30)
    assert ready.status_code == 200 and ready.json()["models"] == [MINILM]
    assert list(ready.json()["failed"]) == ["too-short"]
    assert "warm-up failed: query is 3 tokens" in ready.json()["failed"]["too-short"]
    listed = httpx.get(f"{url}/v1/models", timeout=30).json()
    assert [card["id"] for card in listed["data"]] == [MINILM]
    assert [entry["id"] for entry in listed["failed"]] == ["too-short"]
    refused = httpx.post(f"{url}/v1/rerank", json={"model": "too-short", "query": "q", "documents": ["d"]}, timeout=30)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "model_unavailable"
    assert httpx.post(f"{url}/v1/embeddings", json={"input": "still here"}, timeout=30).status_code == 200
    warnings = [line for line in log.read_text().splitlines() if "too-short" in line]
    assert any("WARNING" in line and "warm-up failed" in line for line in warnings), warnings


def test_readyz_answers_its_report_when_not_ready(partial):
    """No model left to serve: never ready, and the probe's body is the report itself, not an error wrapping it."""
    url, process, log = partial["nothing left"]
    probe = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            probe = httpx.get(f"{url}/readyz", timeout=5)
            if probe.json().get("failed"):
                break
        time.sleep(READY_POLL_S)
    assert probe is not None and process.poll() is None, log.read_text()[-3000:]
    assert probe.status_code == 503
    assert probe.json() == {
        "ready": False,
        "models": [],
        "failed": {"too-short": probe.json()["failed"]["too-short"]},
        "states": {"too-short": "failed"},  # loaded by its model service, but its warm-up here failed
    }
    assert "warm-up failed" in probe.json()["failed"]["too-short"]


def test_with_allow_partial_the_other_models_serve_and_the_failures_are_reported(partial):
    url, process, log = partial["no weights"]
    wait_ready(url, process, log)
    ready = httpx.get(f"{url}/readyz", timeout=30)
    assert ready.status_code == 200
    assert ready.json()["models"] == [MINILM]
    assert set(ready.json()["failed"]) == {"broken", "broken-reranker"}
    assert all("no file named" in reason for reason in ready.json()["failed"].values())

    listed = httpx.get(f"{url}/v1/models", timeout=30).json()
    assert [card["id"] for card in listed["data"]] == [MINILM]
    assert {entry["id"] for entry in listed["failed"]} == {"broken", "broken-reranker"}

    for path, body in (
        ("/v1/embeddings", {"model": "broken", "input": "x"}),
        ("/v1/rerank", {"model": "broken-reranker", "query": "q", "documents": ["d"]}),
    ):
        refused = httpx.post(f"{url}{path}", json=body, timeout=30)
        assert refused.status_code == 503
        error = refused.json()["error"]
        assert error["code"] == "model_unavailable" and "failed to load" in error["message"]
        assert error["param"] == "model"
    served = httpx.post(f"{url}/v1/embeddings", json={"input": "still here"}, timeout=30)  # the default
    assert served.status_code == 200 and served.json()["model"] == MINILM
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200
