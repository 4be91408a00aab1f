"""`embento build`: one Bento per accelerator variant, `embento:<version>-<accel>`, version from pyproject; its
image settings (base image, package indexes, CA certificates) from flags, `embento.yaml`'s `image:` or
`EMBENTO_*` variables. `embento containerize`: `bentoml containerize` of those Bentos with the engine this
machine has."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import yaml
from pydantic import ValidationError

from commands.flags import ACCELERATORS, IMAGE_FLAGS, PROJECT_ROOT, dest
from config.errors import ConfigError
from config.settings import CONFIG_FILE_NAME, ENV_PREFIX, EmbentoConfig, ImageSettings, carried, load_config
from embento.bundle import is_bundle


def project_version(project_dir: Path) -> str:
    return tomllib.loads((project_dir / "pyproject.toml").read_text())["project"]["version"]


def bento_build_command(project_dir: Path, accel: str, version: str, settings: ImageSettings) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bentoml",
        "build",
        str(project_dir),
        "--arg",
        f"accel={accel}",
        *image_arguments(settings),
        "--version",
        f"{version}-{accel}",
        "--output",
        "tag",
    ]


def image_arguments(settings: ImageSettings) -> list[str]:
    """The settings given, as `--arg`s: recorded in bento.yaml, read by bento/packaging/container_image.py."""
    return [part for name, text in settings.bento_arguments().items() for part in ("--arg", f"{name}={text}")]


def default_project_dir(cwd: Path) -> Path:
    return cwd if is_bundle(cwd) else PROJECT_ROOT


def image_settings(args: argparse.Namespace, config: EmbentoConfig) -> ImageSettings:
    """The configuration's image settings (file, then variables), overridden by the flags given."""
    flags = {dest(flag): getattr(args, dest(flag)) for flag in IMAGE_FLAGS}
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
        print("".join(f"embento: {line}\n" for line in exc.message.splitlines()), end="", file=sys.stderr)
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
            result = subprocess.run(
                bento_build_command(context, accel, version, settings),
                cwd=context,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
                check=False,
            )
            if result.returncode != 0:
                return result.returncode
            print(f"embento: built {result.stdout.strip().removeprefix('__tag__:')}")
    return 0


def build_context(project_dir: Path, context: Path, config: EmbentoConfig, settings: ImageSettings) -> Path:
    """The files bentofile.yaml includes, `config` written as the context's embento.yaml, and the settings'
    CA bundle, checked, as the context's CA_FILE. The configuration is what a Bento carries of it
    (`config.settings.carried`: no API keys, no image settings)."""
    from bento.packaging.container_image import CA_FILE, ca_install_command  # BentoML: only for this command

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

    from bento.packaging.containerize import choose_backend, containerize_command

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
