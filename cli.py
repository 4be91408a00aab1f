"""The `embento` command.

- `embento serve`: infinity_emb v2's flags, validated here, then `bentoml serve` in production mode. Flags
  become `EMBENTO_*` environment variables (a flag beats a variable already set), so the services read
  their configuration through `models.config.load_config` exactly as under a plain `bentoml serve`.
- `embento build`: one Bento per accelerator variant, `embento:<version>-<accel>`, version from pyproject.
- `embento models import`: a checkpoint into BentoML's model store, for `model_id: bentoml://<name>`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from models.config import CONFIG_FILE_NAME, ENV_PREFIX, STORE_PREFIX, EmbentoConfig, env_names, load_config
from models.errors import ConfigError, EmbentoError

PROJECT_ROOT = Path(__file__).resolve().parent
DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = "3000"
ACCELERATORS = ("cpu", "cuda")


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    env: str  # variable name after the prefix
    help: str
    per_model: bool = False
    is_switch: bool = False  # `--flag` alone means true; `--flag false` is allowed too


FLAGS = (
    Flag(("--model-id",), "MODEL_ID", "local folder, Hugging Face Hub id or bentoml://<store name>; repeat to serve several models",
         per_model=True),
    Flag(("--served-model-name",), "SERVED_MODEL_NAME", "name clients send as `model` (default: the id's last part)",
         per_model=True),
    Flag(("--kind",), "KIND", "auto | embed | rerank | classify | clip | clap | colpali (default auto: read from the checkpoint)",
         per_model=True),
    Flag(("--revision",), "REVISION", "Hub revision (branch, tag or commit)", per_model=True),
    Flag(("--backend", "--engine"), "BACKEND", "inference backend: torch | onnx | ctranslate2", per_model=True),
    Flag(("--device",), "DEVICE", "auto | cpu | cuda | cuda:N | mps", per_model=True),
    Flag(("--dtype",), "DTYPE", "auto | float32 | float16 | bfloat16 | int8 | int8_float16 (per backend)",
         per_model=True),
    Flag(("--batch-size",), "BATCH_SIZE", "most inputs in one forward pass", per_model=True),
    Flag(("--max-batch-tokens",), "MAX_BATCH_TOKENS", "most padded tokens in one forward pass", per_model=True),
    Flag(("--max-seq-length",), "MAX_SEQ_LENGTH", "truncate inputs to this many tokens", per_model=True),
    Flag(("--pooling-method",), "POOLING_METHOD", "mean | cls | lasttoken | max (default: the checkpoint's)",
         per_model=True),
    Flag(("--normalize",), "NORMALIZE", "L2-normalize outputs (default: the checkpoint's)", per_model=True,
         is_switch=True),
    Flag(("--default-prompt-name",), "DEFAULT_PROMPT_NAME", "prompt applied when a request names none",
         per_model=True),
    Flag(("--trust-remote-code",), "TRUST_REMOTE_CODE", "run code shipped with the checkpoint (default: false)",
         per_model=True, is_switch=True),
    Flag(("--api-key",), "API_KEY", "require `Authorization: Bearer <key>` on every route but the probes; "
         "several keys: separate them with ';'"),
    Flag(("--gateway-workers",), "GATEWAY_WORKERS", "gateway processes (default: chosen from the cores and GPUs)"),
    Flag(("--config",), "CONFIG", f"YAML configuration file (default: ./{CONFIG_FILE_NAME} if present)"),
    Flag(("--host",), "HOST", f"address to listen on (default: {DEFAULT_HOST})"),
    Flag(("--port",), "PORT", f"port to listen on (default: {DEFAULT_PORT})"),
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
        if flag.per_model:
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
    build.add_argument("--project-dir", type=Path, default=PROJECT_ROOT, help="build context (default: this project)")

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
            env[ENV_PREFIX + flag.env] = ";".join(value) if flag.per_model else value
    config_path = env.get(ENV_PREFIX + "CONFIG") or (str(cwd / CONFIG_FILE_NAME) if (cwd / CONFIG_FILE_NAME).is_file() else "")
    if config_path:
        env[ENV_PREFIX + "CONFIG"] = str(Path(config_path).resolve())  # the workers run in the project root
    env.setdefault("BENTOML_DO_NOT_TRACK", "True")
    return env


def bentoml_command(env: Mapping[str, str]) -> list[str]:
    host = env.get(ENV_PREFIX + "HOST", DEFAULT_HOST)
    port = env.get(ENV_PREFIX + "PORT", DEFAULT_PORT)
    return [sys.executable, "-m", "bentoml", "serve", "service:Gateway", "--working-dir", str(PROJECT_ROOT),
            "--host", host, "--port", port]


def project_version(project_dir: Path) -> str:
    return tomllib.loads((project_dir / "pyproject.toml").read_text())["project"]["version"]


def bento_build_command(project_dir: Path, accel: str, version: str) -> list[str]:
    return [sys.executable, "-m", "bentoml", "build", str(project_dir), "--arg", f"accel={accel}",
            "--version", f"{version}-{accel}", "--output", "tag"]


def build(args: argparse.Namespace) -> int:
    """Each variant from a build context holding the project's files and, as its embento.yaml, the
    configuration in force now (the file, or EMBENTO_CONFIG's, with EMBENTO_* variables applied): what the
    Bento then serves wherever it runs."""
    project_dir = args.project_dir.resolve()
    try:
        config = load_config(os.environ, cwd=project_dir)
    except ConfigError as exc:
        print(f"embento: {exc.message}", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}  # the Bento carries its file
    env.setdefault("BENTOML_DO_NOT_TRACK", "True")
    version = args.version or project_version(project_dir)
    with tempfile.TemporaryDirectory(prefix="embento-build-") as scratch:
        context = build_context(project_dir, Path(scratch), config)
        for accel in args.accel or ACCELERATORS:
            result = subprocess.run(bento_build_command(context, accel, version), cwd=context, env=env,
                                    stdout=subprocess.PIPE, text=True, check=False)
            if result.returncode != 0:
                return result.returncode
            print(f"embento: built {result.stdout.strip().removeprefix('__tag__:')}")
    return 0


def build_context(project_dir: Path, context: Path, config: EmbentoConfig) -> Path:
    """The files bentofile.yaml includes, and `config` written as the context's embento.yaml. API keys stay
    out: they are secrets of a deployment, set where it runs, not baked into an image."""
    bentofile = yaml.safe_load((project_dir / "bentofile.yaml").read_text())
    for pattern in [*bentofile.get("include", []), "bentofile.yaml", "pyproject.toml"]:
        for source in project_dir.glob(pattern):
            if source.is_file():
                target = context / source.relative_to(project_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    served = config.model_dump(mode="json", exclude={"api_key", "api_key_file"})
    (context / CONFIG_FILE_NAME).write_text(yaml.safe_dump(served, sort_keys=False))
    return context


def import_model(args: argparse.Namespace) -> int:
    from runners.store import import_checkpoint  # BentoML and transformers: only for this command

    try:
        model = import_checkpoint(args.source, args.name, args.revision)
    except EmbentoError as exc:
        print(f"embento: {exc.message}", file=sys.stderr)
        return 2
    print(f"embento: imported {args.source} as {model.tag}; serve it with `model_id: {STORE_PREFIX}{model.tag.name}`")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "build":
        return build(args)
    if args.command == "models":
        return import_model(args)
    env = build_env(args, os.environ, Path.cwd())
    try:
        config = load_config(env, cwd=Path.cwd())
    except ConfigError as exc:
        print(f"embento: {exc.message}", file=sys.stderr)
        return 2
    for model in config.models:
        print(f"embento: serving {model.model_id} as '{model.served_model_name}' ({model.backend}, {model.device})")
    os.execvpe(sys.executable, bentoml_command(env), env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
