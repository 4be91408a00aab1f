"""The `embento` command.

- `embento serve`: infinity_emb v2's flags, validated here, then `bentoml serve` in production mode. Flags
  become `EMBENTO_*` environment variables (a flag beats a variable already set), so the services read
  their configuration through `models.config.load_config` exactly as under a plain `bentoml serve`.
- `embento build`: one Bento per accelerator variant, `embento:<version>-<accel>`, version from pyproject;
  its image settings (base image, package indexes, CA certificates) from flags, `embento.yaml`'s `image:` or
  `EMBENTO_*` variables.
- `embento containerize`: `bentoml containerize` of those Bentos with the engine this machine has.
- `embento models import`: a checkpoint into BentoML's model store, for `model_id: bentoml://<name>`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from models.config import (
    CONFIG_FILE_NAME,
    ENV_PREFIX,
    STORE_PREFIX,
    EmbentoConfig,
    ImageSettings,
    carried,
    env_names,
    load_config,
    store_tag,
)
from models.errors import ConfigError, EmbentoError
from runners.containerize import CONTAINER_BACKENDS

PROJECT_ROOT = Path(__file__).resolve().parent
DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = "3000"
ACCELERATORS = ("cpu", "cuda")


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    env: str  # variable name after the prefix
    help: str
    repeats: bool = False  # may be given again; the values make a `;`-list (serve's: one per model)
    is_switch: bool = False  # `--flag` alone means true; `--flag false` is allowed too


FLAGS = (
    Flag(("--model-id",), "MODEL_ID", "local folder, Hugging Face Hub id or bentoml://<store name>; repeat to serve several models",
         repeats=True),
    Flag(("--served-model-name",), "SERVED_MODEL_NAME", "name clients send as `model` (default: the id's last part)",
         repeats=True),
    Flag(("--kind",), "KIND", "auto | embed | sparse | rerank | classify | clip | clap | colpali "
         "(default auto: read from the checkpoint)",
         repeats=True),
    Flag(("--revision",), "REVISION", "Hub revision (branch, tag or commit)", repeats=True),
    Flag(("--backend", "--engine"), "BACKEND", "inference backend: torch | onnx | ctranslate2", repeats=True),
    Flag(("--device",), "DEVICE", "auto | cpu | cuda | cuda:N | mps", repeats=True),
    Flag(("--dtype",), "DTYPE", "auto | float32 | float16 | bfloat16 | int8 | int8_float16 (per backend)",
         repeats=True),
    Flag(("--batch-size",), "BATCH_SIZE", "most inputs in one forward pass", repeats=True),
    Flag(("--max-batch-tokens",), "MAX_BATCH_TOKENS", "most padded tokens in one forward pass", repeats=True),
    Flag(("--max-seq-length",), "MAX_SEQ_LENGTH", "truncate inputs to this many tokens", repeats=True),
    Flag(("--pooling-method",), "POOLING_METHOD", "mean | cls | lasttoken | max | mean_sqrt_len_tokens | "
         "weightedmean (default: the checkpoint's)",
         repeats=True),
    Flag(("--normalize",), "NORMALIZE", "L2-normalize outputs (default: the checkpoint's)", repeats=True,
         is_switch=True),
    Flag(("--default-prompt-name",), "DEFAULT_PROMPT_NAME", "prompt applied when a request names none",
         repeats=True),
    Flag(("--trust-remote-code",), "TRUST_REMOTE_CODE", "run code shipped with the checkpoint (default: false)",
         repeats=True, is_switch=True),
    Flag(("--api-key",), "API_KEY", "require `Authorization: Bearer <key>` on every route but the probes; "
         "several keys: separate them with ';'"),
    Flag(("--gateway-workers",), "GATEWAY_WORKERS", "gateway processes (default: chosen from the cores and GPUs)"),
    Flag(("--config",), "CONFIG", f"YAML configuration file (default: ./{CONFIG_FILE_NAME} if present)"),
    Flag(("--host",), "HOST", f"address to listen on (default: {DEFAULT_HOST})"),
    Flag(("--port",), "PORT", f"port to listen on (default: {DEFAULT_PORT})"),
    Flag(("--log-level",), "LOG_LEVEL", "info, debug or error: debug adds the debug logs and the traceback of a "
         "start-up failure with a known cause, which is otherwise one line; error keeps errors only (default: info)"),
)
# `--log-level` as BentoML's `serve` options.
LOG_LEVELS = {"info": [], "debug": ["--debug"], "error": ["--quiet"]}


# `embento build`'s image settings.
IMAGE_FLAGS = (
    Flag(("--base-image",), "BASE_IMAGE", "image to build on: Debian with Python 3.11 and pip "
         "(default: python:3.11-slim from Docker Hub)"),
    Flag(("--index-url",), "INDEX_URL", "Python package index used inside the build (default: PyPI)"),
    Flag(("--extra-index-url",), "EXTRA_INDEX_URL", "extra package index, replacing the variant's own (PyTorch's "
         "CPU index for cpu); repeat for several; 'none' for none", repeats=True),
    Flag(("--find-links",), "FIND_LINKS", "folder or URL of wheels searched besides the indexes; repeat for several",
         repeats=True),
    Flag(("--ca-bundle",), "CA_BUNDLE", "PEM file of CA certificates trusted inside the build and the image "
         "(where TLS to the package index is intercepted)"),
)


def _dest(flag: Flag) -> str:
    return flag.env.lower()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embento", description="Serve embedding models behind OpenAI-style routes.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="validate the configuration and start the server",
        description=(
            "Per-model flags repeat in the order of --model-id; one value applies to every model. Every flag "
            f"can also be set as {ENV_PREFIX}<FLAG> (lists separated by ';'). Flags beat variables."
        ),
    )
    for flag in FLAGS:
        kwargs: dict = {"dest": _dest(flag), "help": f"{flag.help} [env: {ENV_PREFIX}{flag.env}]"}
        if flag.repeats:
            kwargs["action"] = "append"
        if flag.is_switch:
            kwargs.update(nargs="?", const="true", metavar="BOOL")
        serve.add_argument(*flag.names, **kwargs)

    build = commands.add_parser(
        "build", help="build the Bento variants: embento:<version>-<accel>",
        description="Runs `bentoml build` once per variant. The Bento carries the configuration in force as its "
                    f"{CONFIG_FILE_NAME} ({CONFIG_FILE_NAME} in --project-dir, or EMBENTO_CONFIG's file, with "
                    "EMBENTO_* variables applied; API keys left out) and serves it; it pins its store models.",
    )
    build.add_argument("--accel", action="append", choices=ACCELERATORS,
                       help="variant to build; repeat for several (default: all)")
    build.add_argument("--version", help="Bento version before the variant suffix (default: pyproject's)")
    build.add_argument("--project-dir", type=Path, default=None,
                       help="the project to build (default: the working directory when it holds bentofile.yaml, "
                            "else this installed project)")
    for flag in IMAGE_FLAGS:
        build.add_argument(*flag.names, dest=_dest(flag), action="append" if flag.repeats else None,
                           help=f"{flag.help} [env: {ENV_PREFIX}{flag.env}; embento.yaml: image.{_dest(flag)}]")

    containerize = commands.add_parser(
        "containerize", help="build the container image of each Bento variant",
        description="Runs `bentoml containerize` on embento:<version>-<accel> with Docker when its daemon answers, "
                    "else buildah, else podman; mounts the local package folders the Bento was built with "
                    "(buildah and podman only) and labels the image with how it was made.")
    containerize.add_argument("--accel", action="append", choices=ACCELERATORS,
                              help="variant to containerize; repeat for several (default: all)")
    containerize.add_argument("--version", help="Bento version before the variant suffix (default: pyproject's)")
    containerize.add_argument("--backend", choices=CONTAINER_BACKENDS, default="auto",
                              help="container engine (default: auto)")
    containerize.add_argument("--image-tag", help="image name (default: embento:<version>-<accel>)")

    models = commands.add_parser("models", help="manage checkpoints in BentoML's model store")
    model_commands = models.add_subparsers(dest="models_command", required=True)
    import_model = model_commands.add_parser(
        "import", help="copy a checkpoint into the store; serve it as `model_id: bentoml://<name>`")
    import_model.add_argument("source", help="Hugging Face Hub id or local folder")
    import_model.add_argument("--name", help="store name (default: the id's last part, lower case)")
    import_model.add_argument("--revision", help="Hub revision (branch, tag or commit)")
    return parser


def build_env(args: argparse.Namespace, environ: Mapping[str, str], cwd: Path) -> dict[str, str]:
    """The environment the server runs with: the caller's, overridden by the flags given."""
    env = dict(environ)
    for flag in FLAGS:
        value = getattr(args, _dest(flag))
        if value is not None:
            for alias in env_names(flag.env):  # so an aliased variable cannot beat the flag
                env.pop(ENV_PREFIX + alias, None)
            env[ENV_PREFIX + flag.env] = ";".join(value) if flag.repeats else value
    config_path = env.get(ENV_PREFIX + "CONFIG") or (str(cwd / CONFIG_FILE_NAME) if (cwd / CONFIG_FILE_NAME).is_file() else "")
    if config_path:
        env[ENV_PREFIX + "CONFIG"] = str(Path(config_path).resolve())  # the workers run in the project root
    env.setdefault("BENTOML_DO_NOT_TRACK", "True")
    return env


def bentoml_command(env: Mapping[str, str]) -> list[str]:
    host = env.get(ENV_PREFIX + "HOST", DEFAULT_HOST)
    port = env.get(ENV_PREFIX + "PORT", DEFAULT_PORT)
    return [sys.executable, "-m", "bentoml", "serve", "service:Gateway", "--working-dir", str(PROJECT_ROOT),
            "--host", host, "--port", port, *LOG_LEVELS[log_level(env)]]


def log_level(env: Mapping[str, str]) -> str:
    level = env.get(ENV_PREFIX + "LOG_LEVEL", "info").lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"{ENV_PREFIX}LOG_LEVEL (--log-level) is '{level}'; it takes {', '.join(LOG_LEVELS)}")
    return level


def project_version(project_dir: Path) -> str:
    return tomllib.loads((project_dir / "pyproject.toml").read_text())["project"]["version"]


def bento_build_command(project_dir: Path, accel: str, version: str, settings: ImageSettings) -> list[str]:
    return [sys.executable, "-m", "bentoml", "build", str(project_dir), "--arg", f"accel={accel}",
            *image_arguments(settings), "--version", f"{version}-{accel}", "--output", "tag"]


def image_arguments(settings: ImageSettings) -> list[str]:
    """The settings given, as `--arg`s: recorded in bento.yaml, read by runners/image.py."""
    return [part for name, text in settings.bento_arguments().items() for part in ("--arg", f"{name}={text}")]


def default_project_dir(cwd: Path) -> Path:
    return cwd if (cwd / "bentofile.yaml").is_file() and (cwd / "service.py").is_file() else PROJECT_ROOT


def image_settings(args: argparse.Namespace, config: EmbentoConfig) -> ImageSettings:
    """The configuration's image settings (file, then variables), overridden by the flags given."""
    flags = {_dest(flag): getattr(args, _dest(flag)) for flag in IMAGE_FLAGS}
    given = {name: value for name, value in flags.items() if value is not None}
    try:
        return ImageSettings.model_validate({**config.image.model_dump(exclude_defaults=True), **given})
    except ValidationError as exc:
        raise ConfigError(f"invalid image settings: {exc}") from None


def build(args: argparse.Namespace) -> int:
    """Each variant from a build context holding the project's files and, as its embento.yaml, the
    configuration in force now (the file, or EMBENTO_CONFIG's, with EMBENTO_* variables applied): what the
    Bento then serves wherever it runs."""
    project_dir = (args.project_dir or default_project_dir(Path.cwd())).resolve()
    try:
        config = load_config(os.environ, cwd=project_dir)
        settings = image_settings(args, config)
    except ConfigError as exc:
        print(f"embento: {exc.message}", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}  # the Bento carries its file
    env.setdefault("BENTOML_DO_NOT_TRACK", "True")
    version = args.version or project_version(project_dir)
    with tempfile.TemporaryDirectory(prefix="embento-build-") as scratch:
        try:
            context = build_context(project_dir, Path(scratch), config, settings)
        except ConfigError as exc:
            print(f"embento: {exc.message}", file=sys.stderr)
            return 2
        for accel in args.accel or ACCELERATORS:
            result = subprocess.run(bento_build_command(context, accel, version, settings), cwd=context, env=env,
                                    stdout=subprocess.PIPE, text=True, check=False)
            if result.returncode != 0:
                return result.returncode
            print(f"embento: built {result.stdout.strip().removeprefix('__tag__:')}")
    return 0


def build_context(project_dir: Path, context: Path, config: EmbentoConfig, settings: ImageSettings) -> Path:
    """The files bentofile.yaml includes, `config` written as the context's embento.yaml, and the settings'
    CA bundle, checked, as the context's CA_FILE. The configuration is what a Bento carries of it
    (`models.config.carried`: no API keys, no image settings)."""
    from runners.image import CA_FILE, ca_install_command  # BentoML: only for this command

    bentofile = yaml.safe_load((project_dir / "bentofile.yaml").read_text())
    for pattern in [*bentofile.get("include", []), "bentofile.yaml", "pyproject.toml"]:
        for source in project_dir.glob(pattern):
            if source.is_file():
                target = context / source.relative_to(project_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    (context / CONFIG_FILE_NAME).write_text(yaml.safe_dump(carried(config), sort_keys=False))
    if settings.ca_bundle:
        try:
            pem = Path(settings.ca_bundle).expanduser().read_text()
            ca_install_command(pem)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"ca_bundle {settings.ca_bundle}: {exc}") from None
        (context / CA_FILE).write_text(pem)
    return context


def containerize(args: argparse.Namespace) -> int:
    import bentoml  # only for this command

    from runners.containerize import choose_backend, containerize_command

    version = args.version or project_version(default_project_dir(Path.cwd()))
    env = {**os.environ, "BENTOML_DO_NOT_TRACK": os.environ.get("BENTOML_DO_NOT_TRACK", "True")}
    try:
        bentos = {}
        for accel in args.accel or ACCELERATORS:
            tag = f"embento:{version}-{accel}"
            try:
                bentos[tag] = yaml.safe_load((Path(bentoml.get(tag).path) / "bento.yaml").read_text())
            except bentoml.exceptions.NotFound:
                raise ConfigError(f"no Bento {tag}: build it first (`embento build --accel {accel}`)") from None
        backend = choose_backend(args.backend)
        for tag, bento in bentos.items():
            image_tag = args.image_tag or tag
            if subprocess.run(containerize_command(tag, backend, image_tag, bento), env=env, check=False).returncode:
                print(f"embento: `bentoml containerize {tag}` failed (its output is above)", file=sys.stderr)
                return 1
            print(f"embento: built image {image_tag} with {backend}")
    except ConfigError as exc:
        print(f"embento: {exc.message}", file=sys.stderr)
        return 2
    return 0


def import_model(args: argparse.Namespace) -> int:
    from runners.store import import_checkpoint  # BentoML and transformers: only for this command

    try:
        model = import_checkpoint(args.source, args.name, args.revision)
    except EmbentoError as exc:
        print(f"embento: {exc.message}", file=sys.stderr)
        return 2
    print(f"embento: imported {args.source} as {model.tag}; serve it with `model_id: {STORE_PREFIX}{model.tag.name}`")
    return 0


# What `embento serve` shows once ready: the main routes of each capability a model has (api.md has them all).
CAPABILITY_ROUTES = {
    "embed": "/v1/embeddings, /v2/embed, /embed",
    "embed_sparse": "/embed_sparse",
    "rerank": "/v1/rerank, /v2/rerank, /rerank",
    "classify": "/v1/classify, /predict",
}
TRY_BODIES = {
    "embed": ("/v1/embeddings", {"input": "Hello, Embento"}),
    "rerank": ("/v1/rerank", {"query": "what is Embento?", "documents": ["an embedding server", "a fruit"]}),
    "classify": ("/v1/classify", {"input": "Embento works"}),
}
READY_WAIT_S = 3600.0


def check_models_found(config: EmbentoConfig) -> None:
    """Each checkpoint is found (downloaded when it must be) and its kind known before the server starts, so
    that a missing one is one message naming where it was looked for, not a traceback from the service."""
    from models.kinds import model_kind

    for model in config.models:
        if store_tag(model.model_id) is not None:
            from runners.store import stored_model  # BentoML: only when a store model is served

            stored_model(store_tag(model.model_id))
        else:
            model_kind(model)


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
    if capability:
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
    try:
        log_level(env)
        config = load_config(env, cwd=Path.cwd())
        check_models_found(config)
    except EmbentoError as exc:
        print(f"embento: {exc.message}", file=sys.stderr)
        return 2
    for model in config.models:
        print(f"embento: serving {model.model_id} as '{model.served_model_name}' ({model.backend}, {model.device})")
    sys.stdout.flush()
    announce_when_ready(server_url(env), next(iter(config.api_keys()), None))
    os.execvpe(sys.executable, bentoml_command(env), env)
    return 0  # not reached


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "build":
        return build(args)
    if args.command == "containerize":
        return containerize(args)
    if args.command == "models":
        return import_model(args)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
