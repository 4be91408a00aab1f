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
from config.settings import CONFIG_FILE_NAME, ENV_PREFIX, EmbentoConfig, env_names, load_config, store_tag


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


def ready_banner(url: str, models: dict, needs_key: bool) -> str:
    """The lines `embento serve` prints once ready, from the server's /v1/models."""
    lines = [f"embento: ready on {url} (Swagger UI: {url}/, OpenAPI: {url}/docs.json)"]
    for card in models["data"]:
        routes = "; ".join(CAPABILITY_ROUTES[c] for c in card["capabilities"] if c in CAPABILITY_ROUTES)
        lines.append(f"  {card['id']} ({', '.join(card['modalities'])}): POST {routes}")
    for failed in models.get("failed", []):
        lines.append(f"  {failed['id']}  not served: {failed['error']}")
    first = models["data"][0] if models["data"] else None
    capability = next((c for c in first["capabilities"] if c in TRY_BODIES), None) if first else None
    if capability and first:
        path, body = TRY_BODIES[capability]
        key = " -H 'Authorization: Bearer <your key>'" if needs_key else ""
        data = json.dumps({"model": first["id"], **body})
        lines.append(f"  try: curl -s {url}{path} -H 'Content-Type: application/json'{key} -d '{data}'")
    return "\n".join(lines)


def announce_when_ready(url: str, api_key: str | None) -> None:
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
        models = wait_until_ready(url, api_key, server_pid)
        if models is not None:
            print(ready_banner(url, models, api_key is not None), flush=True)
    finally:
        os._exit(0)


def is_running(pid: int) -> bool:
    """Not gone, and not a zombie: a server that exited stays one until its parent reaps it."""
    import psutil  # BentoML's dependency

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until_ready(url: str, api_key: str | None, server_pid: int) -> dict | None:
    local = url.replace("://localhost:", "://127.0.0.1:")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + READY_WAIT_S
    while time.monotonic() < deadline and is_running(server_pid):
        try:
            with urllib.request.urlopen(f"{local}/readyz", timeout=5):
                pass
            request = urllib.request.Request(f"{local}/v1/models", headers=headers)
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.loads(response.read())
        except (OSError, ValueError):  # not listening yet, or 503 while warming up
            time.sleep(0.5)
    return None


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
    for model in config.models:
        print(f"embento: serving {model.model_id} as '{model.served_model_name}' ({model.backend}, {model.device})")
    sys.stdout.flush()
    announce_when_ready(server_url(env), next(iter(config.api_keys()), None))
    os.execvpe(sys.executable, bentoml_command(env), env)
    return 0  # not reached
