"""The `embento` command, run by the installed package's `embento.cli` from this bundle.

- `embento serve` (commands/serve.py): validate the configuration and start `bentoml serve`.
- `embento build` and `embento containerize` (commands/build.py): the Bento variants and their images.
- `embento models import` (commands/store.py): a checkpoint into BentoML's model store.
- `embento keys add` (commands/keys.py): a tenant's API key into the keys file.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from bento.packaging.containerize import CONTAINER_BACKENDS
from commands.build import build, containerize, project_version
from commands.flags import ACCELERATORS, FLAGS, IMAGE_FLAGS, PROJECT_ROOT, dest
from commands.keys import add_key
from commands.keys import add_parser as add_keys_parser
from commands.serve import serve
from commands.store import import_model
from config.settings import CONFIG_FILE_NAME, ENV_PREFIX
from embento.overview import COMMANDS, DESCRIPTION

Subcommands = argparse._SubParsersAction  # what `add_subparsers` returns: argparse names it nowhere public


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embento", description=DESCRIPTION)
    # The installed command answers it before finding the bundle (embento/cli.py); here for `python -m commands`.
    parser.add_argument(
        "-V",
        "--version",
        action="version",
        version=f"embento {project_version(PROJECT_ROOT)}",
        help="print the version and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(commands)
    add_build_parser(commands)
    add_containerize_parser(commands)
    add_models_parser(commands)
    add_keys_parser(commands)
    return parser


def add_serve_parser(commands: Subcommands) -> None:
    serve = commands.add_parser(
        "serve",
        help=COMMANDS["serve"],
        description=(
            "Per-model flags repeat in the order of --model-id; one value applies to every model. Every flag "
            f"can also be set as {ENV_PREFIX}<FLAG> (lists separated by ';'). Flags beat variables."
        ),
    )
    for flag in FLAGS:
        kwargs: dict = {"dest": dest(flag), "help": f"{flag.help} [env: {ENV_PREFIX}{flag.env}]"}
        if flag.repeats:
            kwargs["action"] = "append"
        if flag.is_switch:
            kwargs.update(nargs="?", const="true", metavar="BOOL")
        serve.add_argument(*flag.names, **kwargs)


def add_build_parser(commands: Subcommands) -> None:
    build = commands.add_parser(
        "build",
        help=COMMANDS["build"],
        description="Runs `bentoml build` once per variant. The Bento carries the configuration in force as its "
        f"{CONFIG_FILE_NAME} ({CONFIG_FILE_NAME} in --project-dir, or EMBENTO_CONFIG's file, with "
        "EMBENTO_* variables applied; API keys left out) and serves it; it pins its store models.",
    )
    build.add_argument(
        "--accel", action="append", choices=ACCELERATORS, help="variant to build; repeat for several (default: all)"
    )
    build.add_argument("--version", help="Bento version before the variant suffix (default: pyproject's)")
    build.add_argument(
        "--project-dir",
        type=Path,
        default=None,
        help="the project to build (default: the working directory when it holds bentofile.yaml, "
        "else this installed project)",
    )
    for flag in IMAGE_FLAGS:
        build.add_argument(
            *flag.names,
            dest=dest(flag),
            action="append" if flag.repeats else "store",
            help=f"{flag.help} [env: {ENV_PREFIX}{flag.env}; embento.yaml: image.{dest(flag)}]",
        )


def add_containerize_parser(commands: Subcommands) -> None:
    containerize = commands.add_parser(
        "containerize",
        help=COMMANDS["containerize"],
        description="Runs `bentoml containerize` on embento:<version>-<accel> with Docker when its daemon answers, "
        "else buildah, else podman; mounts the local package folders the Bento was built with "
        "(buildah and podman only) and labels the image with how it was made.",
    )
    containerize.add_argument(
        "--accel",
        action="append",
        choices=ACCELERATORS,
        help="variant to containerize; repeat for several (default: all)",
    )
    containerize.add_argument("--version", help="Bento version before the variant suffix (default: pyproject's)")
    containerize.add_argument(
        "--backend", choices=CONTAINER_BACKENDS, default="auto", help="container engine (default: auto)"
    )
    containerize.add_argument("--image-tag", help="image name (default: embento:<version>-<accel>)")


def add_models_parser(commands: Subcommands) -> None:
    models = commands.add_parser("models", help=COMMANDS["models"])
    model_commands = models.add_subparsers(dest="models_command", required=True)
    import_model = model_commands.add_parser(
        "import", help="copy a checkpoint into the store; serve it as `model_id: bentoml://<name>`"
    )
    import_model.add_argument("source", help="Hugging Face Hub id or local folder")
    import_model.add_argument("--name", help="store name (default: the id's last part, lower case)")
    import_model.add_argument("--revision", help="Hub revision (branch, tag or commit)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "build":
        return build(args)
    if args.command == "containerize":
        return containerize(args)
    if args.command == "models":
        return import_model(args)
    if args.command == "keys":
        return add_key(args)
    return serve(args)
