"""`embento serve`: infinity_emb v2's flags, validated here, then `bentoml serve` in production mode. Flags
become `EMBENTO_*` environment variables (a flag beats a variable already set), so the services read their
configuration through `config.settings.load_config` exactly as under a plain `bentoml serve`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from commands.flags import DEFAULT_HOST, DEFAULT_PORT, FLAGS, LOG_LEVELS, PROJECT_ROOT, dest
from config.errors import ConfigError, EmbentoError
from config.invalid_settings import InvalidSettings
from config.model_settings import store_tag
from config.settings import (
    CONFIG_FILE_NAME,
    ENV_PREFIX,
    EmbentoConfig,
    ModelConfig,
    env_names,
    load_config,
)


def build_env(args: argparse.Namespace, environ: Mapping[str, str], cwd: Path) -> dict[str, str]:
    """The environment the server runs with: the caller's, overridden by the flags given."""
    env = dict(environ)
    for flag in FLAGS:
        value = getattr(args, dest(flag))
        if value is not None:
            for alias in env_names(flag.env):  # so an aliased variable cannot beat the flag
                env.pop(ENV_PREFIX + alias, None)
            env[ENV_PREFIX + flag.env] = ";".join(value) if flag.repeats else value
    config_path = env.get(ENV_PREFIX + "CONFIG") or (
        str(cwd / CONFIG_FILE_NAME) if (cwd / CONFIG_FILE_NAME).is_file() else ""
    )
    if config_path:
        env[ENV_PREFIX + "CONFIG"] = str(Path(config_path).resolve())  # the workers run in the project root
    env.setdefault("BENTOML_DO_NOT_TRACK", "True")
    return env


def bentoml_command(env: Mapping[str, str]) -> list[str]:
    host = env.get(ENV_PREFIX + "HOST", DEFAULT_HOST)
    port = env.get(ENV_PREFIX + "PORT", DEFAULT_PORT)
    return [
        sys.executable,
        "-m",
        "bentoml",
        "serve",
        "service:Gateway",
        "--working-dir",
        str(PROJECT_ROOT),
        "--host",
        host,
        "--port",
        port,
        *LOG_LEVELS[log_level(env)],
    ]


def log_level(env: Mapping[str, str], labels: Mapping[str, str] | None = None) -> str:
    level = env.get(ENV_PREFIX + "LOG_LEVEL", "info").lower()
    if level not in LOG_LEVELS:
        name = (labels or {}).get(ENV_PREFIX + "LOG_LEVEL", ENV_PREFIX + "LOG_LEVEL")
        raise ConfigError(f"invalid configuration: {name} is '{level}'; it takes info, debug or error")
    return level


def check_port(env: Mapping[str, str], labels: Mapping[str, str]) -> None:
    """Here, not by `bentoml serve`: its refusal is its usage, naming its own `-p` and BENTOML_PORT."""
    port = env.get(ENV_PREFIX + "PORT", DEFAULT_PORT)
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        name = labels.get(ENV_PREFIX + "PORT", ENV_PREFIX + "PORT")
        raise ConfigError(f"invalid configuration: {name} is '{port}'; it takes a port number from 1 to 65535")


def flag_labels(args: argparse.Namespace) -> dict[str, str]:
    """The variable each flag given became (build_env), and the flag: a refused value is named as it was given."""
    return {ENV_PREFIX + flag.env: flag.names[0] for flag in FLAGS if getattr(args, dest(flag)) is not None}


def refusal_lines(exc: EmbentoError, labels: Mapping[str, str]) -> list[str]:
    return exc.lines(labels) if isinstance(exc, InvalidSettings) else exc.message.splitlines()


def check_models_found(config: EmbentoConfig) -> None:
    """Each checkpoint is found (downloaded when it must be) and its kind known before the server starts, so
    that a missing one is one message naming where it was looked for, not a traceback from the service."""
    from models.kinds import model_kind

    for model in config.models:
        if (tag := store_tag(model.model_id)) is not None:
            from config.served import stored_model  # BentoML: only when a store model is served

            stored_model(tag)
        else:
            model_kind(model)


# What `embento serve` shows once ready: the main routes of each capability a model has (api.md has them all).
CAPABILITY_ROUTES = {
    "embed": "/v1/embeddings, /v2/embed, /embed",
    "embed_sparse": "/embed_sparse",
    "rerank": "/v1/rerank, /v2/rerank, /rerank",
    "classify": "/v1/classify, /predict",
}
TRY_BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "embed": ("/v1/embeddings", {"input": "Hello, Embento"}),
    "rerank": ("/v1/rerank", {"query": "what is Embento?", "documents": ["an embedding server", "a fruit"]}),
    "classify": ("/v1/classify", {"input": "Embento works"}),
}
READY_WAIT_S = 3600.0


def server_url(env: Mapping[str, str]) -> str:
    host = env.get(ENV_PREFIX + "HOST", DEFAULT_HOST)
    host = "localhost" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{env.get(ENV_PREFIX + 'PORT', DEFAULT_PORT)}"


def start_lines(config: EmbentoConfig) -> list[str]:
    """What `embento serve` prints before the server starts: each model as configured. `auto` is chosen only as
    the model loads (models/inference/auto_backend.py), so the line says so rather than pass `auto` for a choice."""
    lines = []
    for model in config.models:
        lazy = ", lazy: loaded by its first request" if model.load == "lazy" else ""
        aliases = f" (aliases: {', '.join(model.aliases)})" if model.aliases else ""
        runs = f"backend {model.backend}, device {model.device}"
        if "auto" in (model.backend, model.device):
            runs += ": chosen as it loads (the ready message and GET /v1/models say which, and why)"
        lines.append(f"embento: serving {model.model_id} as '{model.served_model_name}'{lazy}{aliases}; {runs}")
    return lines


# Why `device: auto` took the device it did (models/inference/device.py: pick_device).
AUTO_DEVICES = {"cpu": "auto, no GPU", "cuda": "auto, the first GPU", "mps": "auto, Apple's GPU (MPS)"}


def runs_on(card: dict, device: str | None, configured: ModelConfig | None) -> str:
    """Where a loaded model runs and why: its card's backend and reason, its device from /info."""
    backend, reason = card["backend"], card.get("backend_reason") or "configured"
    backend_why = reason if reason == "configured" else "auto, " + reason.removeprefix(f"{backend}: ")
    if device is None:
        return f"    runs on {backend} (backend: {backend_why})"
    auto = configured is not None and configured.device == "auto"
    device_why = AUTO_DEVICES.get(device.split(":")[0], "auto") if auto else "configured"
    return f"    runs on {backend}, {device} (backend: {backend_why}; device: {device_why})"


def ready_banner(
    url: str, models: dict, config: EmbentoConfig, needs_key: bool, devices: Mapping[str, str | None] | None = None
) -> str:
    """The lines `embento serve` prints once ready, from the server's /v1/models and each model's device (/info):
    the loaded models with their routes and where they run, then the others (lazy ones as lazy), then aliases."""
    lines = [f"embento: ready on {url} (Swagger UI: {url}/, OpenAPI: {url}/docs.json)"]
    cards = [card for card in models["data"] if not card.get("alias_of")]
    for card in cards:
        routes = "; ".join(CAPABILITY_ROUTES[c] for c in card["capabilities"] if c in CAPABILITY_ROUTES)
        lines.append(f"  {card['id']} ({', '.join(card['modalities'])}): POST {routes}")
        lines.append(runs_on(card, (devices or {}).get(card["id"]), config.model(card["id"])))
    for failed in models.get("failed", []):
        lines.append(f"  {failed['id']}  not served: {failed['error']}")
    for other in models.get("available", []):
        lines.append(f"  {other['id']}: {not_loaded(other['status'], config.model(other['id']))}")
    lines += [f"  {alias}: an alias of {target}" for alias, target in aliases(models, config).items()]
    first = cards[0] if cards else None
    capability = next((c for c in first["capabilities"] if c in TRY_BODIES), None) if first else None
    if capability and first:
        path, body = TRY_BODIES[capability]
        key = " -H 'Authorization: Bearer <your key>'" if needs_key else ""
        data = json.dumps({"model": first["id"], **body})
        lines.append(f"  try: curl -s {url}{path} -H 'Content-Type: application/json'{key} -d '{data}'")
    return "\n".join(lines)


def not_loaded(status: str, configured: ModelConfig | None) -> str:
    if status == "loading":
        return "loading"
    lazy = configured is not None and configured.load == "lazy"
    return "lazy, not loaded: its first request loads it" if lazy else "not loaded: its first request loads it"


def aliases(models: dict, config: EmbentoConfig) -> dict[str, str]:
    """Alias -> model: as /v1/models has them (an alias of a loaded model is a card of its own), and the configured
    ones of models not loaded (no card)."""
    named = {card["id"]: card["alias_of"] for card in models["data"] if card.get("alias_of")}
    listed = {card["id"] for card in models["data"]}
    configured = {
        alias: m.served_model_name for m in config.models if m.served_model_name not in listed for alias in m.aliases
    }
    return {**named, **{alias: target for alias, target in configured.items() if alias not in named}}


def announce_when_ready(url: str, api_key: str | None, config: EmbentoConfig) -> None:
    """Leave a watcher behind (the server replaces this process) that prints the banner once /readyz answers
    200, or goes quietly when the server is gone."""
    server_pid = os.getpid()
    watcher = os.fork()
    if watcher:
        os.waitpid(watcher, 0)  # it forks again and exits at once: the server never has a child to reap
        return
    if os.fork():
        os._exit(0)
    # Only stdout, for the banner: a caller reading the server's stderr to its end must not wait on this.
    devnull = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 2):
        os.dup2(devnull, stream)
    os.close(devnull)
    try:
        ready = wait_until_ready(url, api_key, server_pid)
        if ready is not None:
            print(ready_banner(url, ready[0], config, api_key is not None, ready[1]), flush=True)
    finally:
        os._exit(0)


def is_running(pid: int) -> bool:
    """Not gone, and not a zombie: a server that exited stays one until its parent reaps it."""
    import psutil  # BentoML's dependency

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until_ready(url: str, api_key: str | None, server_pid: int) -> tuple[dict, dict[str, str | None]] | None:
    """Once ready: /v1/models, and each model's device (from /info: a model card has none)."""
    local = url.replace("://localhost:", "://127.0.0.1:")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + READY_WAIT_S
    while time.monotonic() < deadline and is_running(server_pid):
        try:
            with urllib.request.urlopen(f"{local}/readyz", timeout=5):
                pass
            models, info = (get_json(f"{local}{path}", headers) for path in ("/v1/models", "/info"))
            return models, {model["id"]: model["device"] for model in info["models"]}
        except (OSError, ValueError):  # not listening yet, or 503 while warming up
            time.sleep(0.5)
    return None


def get_json(url: str, headers: Mapping[str, str]) -> Any:
    with urllib.request.urlopen(urllib.request.Request(url, headers=dict(headers)), timeout=5) as response:
        return json.loads(response.read())


def serve(args: argparse.Namespace) -> int:
    env = build_env(args, os.environ, Path.cwd())
    labels = flag_labels(args)
    try:
        log_level(env, labels)
        check_port(env, labels)
        config = load_config(env, cwd=Path.cwd())
        check_models_found(config)
    except EmbentoError as exc:
        print("".join(f"embento: {line}\n" for line in refusal_lines(exc, labels)), end="", file=sys.stderr)
        return 2
    print("\n".join(start_lines(config)), flush=True)
    announce_when_ready(server_url(env), next(iter(config.api_keys()), None), config)
    os.execvpe(sys.executable, bentoml_command(env), env)
    return 0  # not reached
