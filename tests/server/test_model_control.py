"""Models that come and go without a restart (issue 53), in real servers: the admin API behind its own key; a model
loaded at run time and embedded with, unloaded (then 404) and loaded again; a lazy model answered on its first
request; a model unloaded after its `keep_alive`; the budget evicting the least recently used idle model, and
refusing a load that cannot fit, with the figures; an alias moved under 32 clients with no failed request; a model
not in the configuration added at run time, served by both gateway workers, kept across a restart with the admin's
other changes (an unload, an alias moved), then removed.

The injected-clock half of idle eviction, and a load refused because every held model has calls in flight, are
tests/unit/runners/test_residency.py's (the real pool, no sleep): here a request's `keep_alive: 0` ends the idle time
at once, and waits poll observable state under a deadline.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from config.keys_file import digest
from tests.asserts import assert_openai_error
from tests.conftest import MINILM, running_server
from tests.references import transformers_embeddings
from tests.tolerance import assert_same_vectors

ADMIN_KEY = "admin-secret"
TENANT_KEY = "tenant-key"  # the tenant `resident`, which may set `keep_alive`
PLAIN_KEY = "plain-key"  # the tenant `plain`, which may not
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TENANT = {"Authorization": f"Bearer {TENANT_KEY}"}
PLAIN = {"Authorization": f"Bearer {PLAIN_KEY}"}
TEXT = "the quick brown fox"
WAIT_S = 120.0
CLIENTS = 32
AFTER_SWAP = 96  # requests sent after the swap answered before the clients stop


def embed(url: str, model: str, headers: dict = TENANT, **extra: object) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/embeddings", json={"input": [TEXT], "model": model, **extra}, headers=headers, timeout=120
    )


def admin_models(url: str) -> dict[str, dict]:
    answer = httpx.get(f"{url}/admin/models", headers=ADMIN, timeout=30)
    assert answer.status_code == 200, answer.text
    return {model["id"]: model for model in answer.json()["models"]}


def wait_for(check: Callable[[], bool], what: str) -> None:
    """Poll observable state under a deadline (the model services step every 0.1 s)."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.05)


def log_lines(log: Path) -> list[str]:
    return log.read_text(errors="replace").splitlines()


def logged(log: Path, pattern: str, since: int = 0) -> list[str]:
    """The server log's lines (every process's), from line `since` on, that match `pattern`."""
    return [line for line in log_lines(log)[since:] if re.search(pattern, line)]


def wait_logged(log: Path, pattern: str, since: int = 0) -> list[str]:
    """The lines matching `pattern` once there is one: a model service writes its lines as it steps."""
    wait_for(lambda: bool(logged(log, pattern, since)), f"a log line matching {pattern!r}")
    return logged(log, pattern, since)


def vector(answer: httpx.Response) -> np.ndarray:
    assert answer.status_code == 200, answer.text
    return np.asarray(answer.json()["data"][0]["embedding"], dtype=np.float32)


@pytest.fixture(scope="module")
def references(minilm_path: Path, tiny_bert_path: Path) -> dict[str, np.ndarray]:
    from sentence_transformers import SentenceTransformer

    minilm = SentenceTransformer(str(minilm_path), device="cpu").encode([TEXT], normalize_embeddings=True)[0]
    tiny = transformers_embeddings(tiny_bert_path, [TEXT], "mean", True)[0]
    return {"minilm": minilm, "tiny": tiny}


@pytest.fixture(scope="module")
def broken_path(tmp_path_factory: pytest.TempPathFactory, tiny_bert_path: Path) -> Path:
    """The tiny BERT with its weights file cut short: its tokenizer loads (the gateway's part), its weights not."""
    folder = tmp_path_factory.mktemp("broken-bert")
    shutil.copytree(tiny_bert_path, folder, dirs_exist_ok=True)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return folder


@pytest.fixture(scope="module")
def control_server(
    tmp_path_factory: pytest.TempPathFactory, tiny_bert_path: Path, broken_path: Path
) -> Iterator[tuple[str, Path]]:
    """MiniLM (eager, alias `prod`), a tiny BERT loaded on its first request, one more eager tiny BERT, and a lazy
    one whose weights cannot load; two gateway workers; two tenants, `resident` allowed to set `keep_alive` and
    `plain` not. Its URL and its log, at the default level."""
    folder = tmp_path_factory.mktemp("model-control")
    tenants = [
        {"name": "resident", "key_sha256": digest(TENANT_KEY).hex(), "may_set_keep_alive": True},
        {"name": "plain", "key_sha256": digest(PLAIN_KEY).hex()},
    ]
    (folder / "keys.yaml").write_text(yaml.safe_dump({"keys": tenants}))
    config = {
        "models": [
            {"model_id": MINILM, "served_model_name": "minilm", "backend": "torch", "aliases": ["prod"]},
            {"model_id": str(tiny_bert_path), "served_model_name": "tiny", "backend": "torch", "load": "lazy"},
            {"model_id": str(tiny_bert_path), "served_model_name": "spare", "backend": "torch"},
            {"model_id": str(broken_path), "served_model_name": "broken", "backend": "torch", "load": "lazy"},
        ],
        "admin_key": ADMIN_KEY,
        "auth": {"keys_file": str(folder / "keys.yaml")},
        "gateway_workers": 2,  # every change seen by both: a request goes to either
    }
    with running_server(folder, config) as (url, _):
        yield url, folder / "server.log"


@pytest.fixture(scope="module")
def controlled(control_server: tuple[str, Path]) -> str:
    return control_server[0]


@pytest.mark.server
def test_the_admin_api_takes_the_admin_key_only_and_is_listed_apart(control_server):
    url, log = control_server
    calls = [
        ("GET", "/admin/models", None),
        ("POST", "/admin/models/tiny/load", None),
        ("POST", "/admin/models/tiny/unload", None),
        ("POST", "/admin/models", {"model_id": "any"}),
        ("DELETE", "/admin/models/tiny", None),
        ("PUT", "/admin/aliases/prod", {"model": "minilm"}),
        ("DELETE", "/admin/aliases/prod", None),
    ]
    callers = (
        (TENANT, 403, "tenant 'resident'"),
        ({}, 401, "no key"),
        ({"Authorization": "Bearer wrong"}, 401, "an unknown key"),
    )
    for method, path, body in calls:
        for headers, status, who in callers:
            answer = httpx.request(method, f"{url}{path}", json=body, headers=headers, timeout=30)
            assert_openai_error(answer, status)
            # Each refusal is one line of the log, naming who asked by its tenant, never by its key.
            line = re.escape(f"admin: {method} {path} refused, asked by {who}: {status} ")
            assert len(wait_logged(log, line)) == 1, logged(log, line)
    assert not logged(log, "wrong|" + TENANT_KEY)
    assert httpx.get(f"{url}/v1/models", headers=ADMIN, timeout=30).status_code == 401  # no tenant key either
    schema = httpx.get(f"{url}/docs.json", headers=TENANT, timeout=30).json()
    admin = {path: ops for path, ops in schema["paths"].items() if path.startswith("/admin/")}
    assert set(admin) == {
        "/admin/models",
        "/admin/models/{name}",
        "/admin/models/{name}/load",
        "/admin/models/{name}/unload",
        "/admin/aliases/{alias}",
    }
    assert all(
        op["tags"] == ["Admin"] and op["security"] == [{"adminKey": []}]
        for ops in admin.values()
        for op in ops.values()
    )
    others = [op for path, ops in schema["paths"].items() if path not in admin for op in ops.values()]
    assert others and not any("Admin" in op.get("tags", []) for op in others)
    assert schema["components"]["securitySchemes"]["adminKey"] == {"type": "http", "scheme": "bearer"}


@pytest.mark.server
def test_a_lazy_model_is_unloaded_until_its_first_request_answers(controlled, references):
    url = controlled
    assert admin_models(url)["tiny"]["state"] == "unloaded"
    ready = httpx.get(f"{url}/readyz", timeout=30).json()
    assert ready["ready"] and ready["states"] == {
        "minilm": "loaded",
        "tiny": "unloaded",
        "spare": "loaded",
        "broken": "unloaded",
    }
    listed = httpx.get(f"{url}/v1/models", headers=TENANT, timeout=30).json()
    assert {"id": "tiny", "status": "unloaded"} in listed["available"]
    answer = embed(url, "tiny")
    assert answer.json()["model"] == "tiny"
    assert_same_vectors([vector(answer)], [references["tiny"]])
    state = admin_models(url)["tiny"]
    assert state["state"] == "loaded" and state["load_seconds"] > 0 and state["weight_bytes"] > 0


@pytest.mark.server
def test_an_unloaded_model_answers_404_until_loaded_again(control_server, references):
    url, log = control_server
    since = len(log_lines(log))
    before = vector(embed(url, "spare"))
    unloaded = httpx.post(f"{url}/admin/models/spare/unload", headers=ADMIN, timeout=120)
    assert unloaded.status_code == 200 and unloaded.json()["state"] == "unloaded", unloaded.text
    assert_openai_error(embed(url, "spare"), 404, param="model")
    assert embed(url, "spare").json()["error"]["code"] == "model_not_found"
    listed = httpx.get(f"{url}/v1/models", headers=TENANT, timeout=30).json()
    assert "spare" not in [card["id"] for card in listed["data"]]
    assert {"id": "spare", "status": "unloaded"} in listed["available"]
    assert vector(embed(url, "minilm")).shape == (384,)  # the others serve on
    loaded = httpx.post(f"{url}/admin/models/spare/load", headers=ADMIN, timeout=120)
    assert loaded.status_code == 200 and loaded.json()["state"] == "loaded", loaded.text
    assert_same_vectors([vector(embed(url, "spare"))], [before])
    assert_same_vectors([before], [references["tiny"]])
    for line in (  # each change one line, from the gateway (the admin call) and the model service (what it did)
        r"model 'spare' unloaded from TextEmbedder-\d+, asked by admin",
        r"admin: model 'spare' unloaded, asked by admin",
        r"model 'spare' loaded in \d+\.\d s in TextEmbedder-\d+, asked by admin",
        r"admin: model 'spare' loaded, asked by admin$",
    ):
        assert len(wait_logged(log, line, since)) == 1, line


@pytest.mark.server
def test_a_failed_load_says_why_and_the_others_serve_on(controlled):
    url = controlled
    loaded = httpx.post(f"{url}/admin/models/broken/load", headers=ADMIN, timeout=120)
    reason = assert_openai_error(loaded, 503, param="model")["message"]
    assert "model 'broken' did not load" in reason and "deserializing header" in reason, reason
    assert admin_models(url)["broken"]["state"] == "failed"
    requested = assert_openai_error(embed(url, "broken"), 503, param="model")
    assert requested["code"] == "model_unavailable" and "failed to load" in requested["message"]
    assert vector(embed(url, "minilm")).shape == (384,)
    failed = httpx.get(f"{url}/v1/models", headers=TENANT, timeout=30).json()["failed"]
    assert [entry["id"] for entry in failed] == ["broken"] and failed[0]["status"] == "failed"
    metrics = httpx.get(f"{url}/metrics", headers=TENANT, timeout=30).text
    assert 'embento_model_loads_total{model="broken",outcome="failed"} 1.0' in metrics


@pytest.mark.server
def test_admin_mistakes_get_clear_errors(controlled):
    url = controlled
    assert_openai_error(httpx.post(f"{url}/admin/models/nope/load", headers=ADMIN, timeout=30), 404)
    assert_openai_error(httpx.put(f"{url}/admin/aliases/minilm", json={"model": "spare"}, headers=ADMIN), 400)
    assert_openai_error(httpx.put(f"{url}/admin/aliases/x", json={"model": 3}, headers=ADMIN), 400, param="model")
    assert_openai_error(httpx.delete(f"{url}/admin/aliases/nope", headers=ADMIN), 404)


@pytest.mark.server
def test_keep_alive_zero_unloads_the_model_once_answered_and_the_next_request_loads_it(controlled, references):
    url = controlled
    assert vector(embed(url, "tiny")).shape == (32,)
    assert embed(url, "tiny", keep_alive=0).status_code == 200
    wait_for(lambda: admin_models(url)["tiny"]["state"] == "unloaded", "tiny unloaded after keep_alive 0")
    assert admin_models(url)["tiny"]["reason"] == "idle"
    answer = embed(url, "tiny", keep_alive="1h")  # loads it again, and keeps it an hour from now on
    assert_same_vectors([vector(answer)], [references["tiny"]])
    assert admin_models(url)["tiny"]["keep_alive_s"] == 3600
    assert_openai_error(embed(url, "tiny", keep_alive="soon"), 400, param="keep_alive")


@pytest.mark.server
def test_an_alias_moves_under_32_clients_with_no_failure(control_server, references):
    url, log = control_server
    assert httpx.post(f"{url}/admin/models/tiny/load", headers=ADMIN, timeout=120).status_code == 200
    answers: list[tuple[float, float, int, str, np.ndarray]] = []  # (sent, answered, status, model, vector)
    lock = threading.Lock()
    stop = threading.Event()
    swapped_at: list[float] = []

    def client() -> None:
        with httpx.Client(headers=TENANT, timeout=120) as session:
            while not stop.is_set():
                sent = time.monotonic()
                answer = session.post(f"{url}/v1/embeddings", json={"input": [TEXT], "model": "prod"})
                body = answer.json()
                got = np.asarray(body["data"][0]["embedding"], np.float32) if answer.status_code == 200 else None
                with lock:
                    answers.append((sent, time.monotonic(), answer.status_code, body.get("model"), got))
                    done_after = sum(1 for a in answers if swapped_at and a[0] > swapped_at[0])
                if done_after >= AFTER_SWAP:
                    stop.set()

    with ThreadPoolExecutor(CLIENTS) as pool:
        futures = [pool.submit(client) for _ in range(CLIENTS)]
        try:
            wait_for(lambda: len(answers) >= CLIENTS, "every client answered once before the swap")
            started = time.monotonic()
            moved = httpx.put(f"{url}/admin/aliases/prod", json={"model": "tiny"}, headers=ADMIN, timeout=60)
            assert moved.status_code == 200, moved.text
            swapped_at.append(time.monotonic())
        except BaseException:
            stop.set()  # the clients stop on their own only once the swap is done
            raise
        for future in futures:
            future.result()
    try:
        assert [a[2] for a in answers if a[2] != 200] == []
        assert {a[3] for a in answers} == {"prod"}  # the name asked for, echoed
        before = [a[4] for a in answers if a[1] < started]
        after = [a[4] for a in answers if a[0] > swapped_at[0]]
        assert before and len(after) >= AFTER_SWAP
        assert_same_vectors(np.stack(before), np.tile(references["minilm"], (len(before), 1)))
        assert_same_vectors(np.stack(after), np.tile(references["tiny"], (len(after), 1)))
        cards = {card["id"]: card for card in httpx.get(f"{url}/v1/models", headers=TENANT).json()["data"]}
        assert cards["prod"]["alias_of"] == "tiny" and cards["prod"]["dimension"] == 32
    finally:
        back = httpx.put(f"{url}/admin/aliases/prod", json={"model": "minilm"}, headers=ADMIN, timeout=60)
        assert back.status_code == 200, back.text
    assert_same_vectors([vector(embed(url, "prod"))], [references["minilm"]])
    assert len(logged(log, r"admin: alias 'prod' moved from 'minilm' to 'tiny', asked by admin")) == 1
    assert len(logged(log, r"admin: alias 'prod' moved from 'tiny' to 'minilm', asked by admin")) == 1


@pytest.mark.server
def test_keep_alive_is_refused_to_a_tenant_the_keys_file_does_not_allow(controlled):
    url = controlled
    before = admin_models(url)["minilm"]["keep_alive_s"]
    for keep_alive in (0, -1, "5m"):
        refused = assert_openai_error(embed(url, "minilm", PLAIN, keep_alive=keep_alive), 403, param="keep_alive")
        assert refused["code"] == "forbidden" and "may_set_keep_alive" in refused["message"], refused
    assert admin_models(url)["minilm"]["keep_alive_s"] == before  # never a silent change
    assert admin_models(url)["minilm"]["state"] == "loaded"
    assert vector(embed(url, "minilm", PLAIN)).shape == (384,)  # without it, the tenant is served


@pytest.mark.server
def test_in_flight_reads_0_right_after_a_load_while_nothing_runs(controlled):
    """MiniLM's warm-up calls take long enough that a model service used to report one of them still in flight."""
    url = controlled
    assert httpx.post(f"{url}/admin/models/minilm/unload", headers=ADMIN, timeout=120).status_code == 200
    loaded = httpx.post(f"{url}/admin/models/minilm/load", headers=ADMIN, timeout=120)
    assert loaded.status_code == 200 and loaded.json()["in_flight"] == 0, loaded.text
    assert admin_models(url)["minilm"]["in_flight"] == 0


@pytest.mark.server
def test_an_admin_load_wins_over_the_keep_alive_a_request_set(control_server):
    """A request's `keep_alive: 0` used to outlive the admin's unload, so that the next admin load was evicted again
    before it warmed up, and waited out `request_timeout_s` for a 503 (MiniLM: a tiny model's warm-up could win the
    race). Every change is one line of the log."""
    url, log = control_server
    since = len(log_lines(log))
    assert vector(embed(url, "minilm", keep_alive=0)).shape == (384,)
    wait_for(lambda: admin_models(url)["minilm"]["state"] == "unloaded", "minilm unloaded after keep_alive 0")
    assert admin_models(url)["minilm"]["reason"] == "idle"
    unloaded = httpx.post(f"{url}/admin/models/minilm/unload", headers=ADMIN, timeout=120)
    assert unloaded.status_code == 200, unloaded.text
    loaded = httpx.post(f"{url}/admin/models/minilm/load", headers=ADMIN, timeout=120)
    assert loaded.status_code == 200, loaded.text
    entry = loaded.json()
    assert entry["state"] == "loaded" and entry["keep_alive_s"] is None  # the configured one: forever
    assert entry["reset"] == {"keep_alive_s": {"was": 0, "set_by": "tenant 'resident'"}}
    assert admin_models(url)["minilm"]["keep_alive_s"] is None
    assert vector(embed(url, "minilm")).shape == (384,)
    for line in (
        r"model 'minilm' keep_alive set to 0 s by tenant 'resident' \(it was forever\)",
        r"model 'minilm' evicted from TextEmbedder-\d+: idle for \d+\.\d s, past its keep_alive of 0 s \(set by "
        r"tenant 'resident'\)",
        r"admin: model 'minilm' unloaded, asked by admin",  # already evicted: no model service unloads it
        r"admin: model 'minilm' loaded, asked by admin; keep_alive reset to the configured forever \(it was 0 s, set "
        r"by tenant 'resident'\)",
    ):
        assert len(wait_logged(log, line, since)) == 1, line
    assert len(wait_logged(log, r"model 'minilm' loaded in \d+\.\d s in TextEmbedder-\d+, asked by admin", since)) == 1
    assert not logged(log, f"{ADMIN_KEY}|{TENANT_KEY}")


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory, tiny_bert_path: Path) -> Iterator[tuple[str, Path]]:
    """Every model lazy; room for two models, and for the bytes of three tiny BERTs (never MiniLM's); no API key
    (anyone may call), an admin key. Its URL and its log."""
    tiny_bytes = sum(p.stat().st_size for p in tiny_bert_path.rglob("*.safetensors"))
    lazy = {"backend": "torch", "load": "lazy"}
    config = {
        "models": [
            *({"model_id": str(tiny_bert_path), "served_model_name": name, **lazy} for name in ("a", "b", "c")),
            {"model_id": MINILM, "served_model_name": "minilm", **lazy},
        ],
        "admin_key": ADMIN_KEY,
        "max_loaded_models": 2,
        "max_loaded_bytes": 3 * tiny_bytes,
    }
    folder = tmp_path_factory.mktemp("model-budget")
    with running_server(folder, config) as (url, _):
        yield url, folder / "server.log"


@pytest.mark.server
def test_the_budget_evicts_the_least_recently_used_and_refuses_what_cannot_fit(budgeted, references):
    url, log = budgeted
    states = lambda: {name: model["state"] for name, model in admin_models(url).items()}  # noqa: E731
    assert httpx.get(f"{url}/readyz", timeout=30).json()["ready"]  # ready with nothing loaded: all are lazy
    assert states() == {"a": "unloaded", "b": "unloaded", "c": "unloaded", "minilm": "unloaded"}
    for name in ("a", "b", "a"):  # `a` used last: `b` is the least recently used
        assert_same_vectors([vector(embed(url, name, headers={}))], [references["tiny"]])
    assert_same_vectors([vector(embed(url, "c", headers={}))], [references["tiny"]])
    assert states() == {"a": "loaded", "b": "unloaded", "c": "loaded", "minilm": "unloaded"}
    assert admin_models(url)["b"]["reason"] == "budget"
    refused = embed(url, "minilm", headers={})
    message = assert_openai_error(refused, 503)["message"]
    assert "max_loaded_bytes" in message and "bytes" in message, message
    assert states() == {"a": "loaded", "b": "unloaded", "c": "loaded", "minilm": "failed"}
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    assert 'embento_model_unloads_total{model="b",reason="budget"} 1.0' in metrics
    assert 'embento_model_loads_total{model="minilm",outcome="refused"}' in metrics
    evicted = (
        r"model 'b' evicted from TextEmbedder-\d+ by the budget \(max_loaded_models 2, max_loaded_bytes [\d,]+\): "
    )
    assert len(wait_logged(log, evicted + r"room for 'c', asked by tenant 'default'")) == 1


@pytest.mark.server
def test_on_a_server_without_api_keys_only_the_admin_key_sets_keep_alive(budgeted):
    url, _ = budgeted
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        refused = assert_openai_error(embed(url, "a", headers, keep_alive=-1), 403, param="keep_alive")
        assert "admin key" in refused["message"], refused
    assert admin_models(url)["a"]["keep_alive_s"] is None
    assert vector(embed(url, "a", ADMIN, keep_alive="1h")).shape == (32,)
    assert admin_models(url)["a"]["keep_alive_s"] == 3600


@pytest.mark.server
def test_a_model_a_request_may_load_keeps_the_server_ready_and_serves_requests_naming_none(budgeted):
    """One rule: a model loaded, or one a request may load (lazy, evicted), makes the server ready and answers a
    request that names no model; with neither (every model unloaded by the admin API) /readyz is a 503, and so is
    such a request: the server's state, not the client's mistake."""
    url, _ = budgeted
    assert vector(embed(url, "a", ADMIN, keep_alive=0)).shape == (32,)
    wait_for(lambda: admin_models(url)["a"]["state"] == "unloaded", "a evicted after keep_alive 0")
    assert httpx.get(f"{url}/readyz", timeout=30).json()["ready"]
    unnamed = httpx.post(f"{url}/v1/embeddings", json={"input": [TEXT]}, timeout=120)
    assert unnamed.status_code == 200 and unnamed.json()["model"] == "a", unnamed.text  # the first configured
    for name in ("a", "b", "c", "minilm"):
        assert httpx.post(f"{url}/admin/models/{name}/unload", headers=ADMIN, timeout=120).status_code == 200
    ready = httpx.get(f"{url}/readyz", timeout=30)
    assert ready.status_code == 503 and not ready.json()["ready"], ready.text
    refused = assert_openai_error(httpx.post(f"{url}/v1/embeddings", json={"input": [TEXT]}, timeout=30), 503)
    assert refused["code"] == "model_unavailable" and refused["param"] == "model", refused
    assert_openai_error(embed(url, "a", {}), 404, param="model")  # one the admin unloaded, as before
    assert httpx.post(f"{url}/admin/models/c/load", headers=ADMIN, timeout=120).status_code == 200
    assert httpx.get(f"{url}/readyz", timeout=30).json()["ready"]
    unnamed = httpx.post(f"{url}/v1/embeddings", json={"input": [TEXT]}, timeout=120)
    assert unnamed.status_code == 200 and unnamed.json()["model"] == "c", unnamed.text


def kept(cache: Path) -> dict:
    """The wanted set the server keeps across restarts, as its file under `cache_dir` holds it (empty: none yet)."""
    path = cache / "run-time-models.json"
    return json.loads(path.read_text()) if path.exists() else {}


def kept_names(cache: Path) -> list[str]:
    """The models added at run time that the server keeps across restarts."""
    return [entry["served_model_name"] for entry in kept(cache).get("added", [])]


@pytest.mark.server
def test_a_model_added_at_run_time_serves_survives_a_restart_and_is_removed(
    tmp_path_factory, tiny_bert_path, references
):
    """The tiny BERT, in no configuration, added to a server of two gateway workers that runs MiniLM: embedded with
    by either worker as transformers embeds it; refused with the field for a bad entry, with a 409 for a kind no
    service of the server runs; kept under `cache_dir` and served again after a restart; removed, then a 404. The
    whole wanted set is kept: a configured model the admin unloaded is still unloaded (a 404) after the restart, and
    an alias the admin moved onto the added model still names it. Its own cache folder: a model added to the
    session's would reach every later server of the suite."""
    folder = tmp_path_factory.mktemp("model-add")
    cache = folder / "cache"
    config = {
        "models": [
            {"model_id": MINILM, "served_model_name": "minilm", "backend": "torch", "aliases": ["prod"]},
            {"model_id": str(tiny_bert_path), "served_model_name": "spare", "backend": "torch"},
        ],
        "admin_key": ADMIN_KEY,
        "gateway_workers": 2,
        "cache_dir": str(cache),
    }
    entry = {"model_id": str(tiny_bert_path), "served_model_name": "added", "backend": "torch", "aliases": ["fresh"]}
    for run in ("first", "second"):
        (folder / run).mkdir()
    with running_server(folder / "first", config) as (url, _):
        assert_openai_error(
            httpx.post(f"{url}/admin/models", json={**entry, "pooling": "median"}, headers=ADMIN), 400, param="pooling"
        )
        other_kind = {**entry, "served_model_name": "ranker", "kind": "rerank"}
        refused = assert_openai_error(
            httpx.post(f"{url}/admin/models", json=other_kind, headers=ADMIN, timeout=60), 409
        )
        assert "Reranker" in refused["message"] and "'embed'" in refused["message"], refused
        assert kept_names(cache) == []  # a refused entry changes nothing
        added = httpx.post(f"{url}/admin/models", json=entry, headers=ADMIN, timeout=120)
        assert added.status_code == 200 and added.json()["state"] == "loaded", added.text
        assert added.json()["aliases"] == ["fresh"] and added.json()["kind"] == "embed"
        for name in ("added", "fresh", "added", "fresh"):  # either gateway worker answers each: both serve it
            answer = embed(url, name, ADMIN)
            assert answer.json()["model"] == name
            assert_same_vectors([vector(answer)], [references["tiny"]])
        taken = httpx.post(f"{url}/admin/models", json={**entry, "aliases": []}, headers=ADMIN, timeout=60)
        assert_openai_error(taken, 409, param="served_model_name")
        assert kept_names(cache) == ["added"]
        assert "added" in admin_models(url) and admin_models(url)["minilm"]["state"] == "loaded"
        assert httpx.post(f"{url}/admin/models/spare/unload", headers=ADMIN, timeout=120).status_code == 200
        moved = httpx.put(f"{url}/admin/aliases/prod", json={"model": "added"}, headers=ADMIN, timeout=120)
        assert moved.status_code == 200, moved.text
        assert kept(cache)["aliases"]["prod"] == "added" and not kept(cache)["models"]["spare"]["on_request"]
    with running_server(folder / "second", config) as (url, _):  # the same cache_dir: the wanted set comes back
        wait_for(lambda: admin_models(url).get("added", {}).get("state") == "loaded", "the added model loaded again")
        assert_same_vectors([vector(embed(url, "fresh", ADMIN))], [references["tiny"]])
        # the moved alias names the added model, not the configured MiniLM
        assert_same_vectors([vector(embed(url, "prod", ADMIN))], [references["tiny"]])
        assert_openai_error(embed(url, "spare", ADMIN), 404, param="model")  # unloaded by the admin: until loaded
        assert admin_models(url)["spare"]["state"] == "unloaded"
        assert_openai_error(httpx.delete(f"{url}/admin/models/minilm", headers=ADMIN, timeout=60), 409, param="model")
        assert_openai_error(httpx.delete(f"{url}/admin/models/nope", headers=ADMIN, timeout=60), 404)
        removed = httpx.delete(f"{url}/admin/models/added", headers=ADMIN, timeout=120)
        assert removed.status_code == 200 and removed.json() == {"id": "added", "deleted": True}, removed.text
        for name in ("added", "fresh", "added", "fresh"):
            assert assert_openai_error(embed(url, name, ADMIN), 404, param="model")["code"] == "model_not_found"
        assert "added" not in admin_models(url) and kept_names(cache) == []
        assert vector(embed(url, "minilm", ADMIN)).shape == (384,)
        log = (folder / "second" / "server.log").read_text()
        assert "admin: model 'added' removed, asked by admin" in log
