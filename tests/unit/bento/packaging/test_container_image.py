"""The image settings of `embento build` (base image, package indexes, CA certificates) as they land in
each variant's generated Dockerfile, requirements, arguments and labels, and how `embento containerize`
turns a Bento into its engine's command."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import certifi
import pytest
import yaml

from bento.packaging.container_image import PEM_CERTIFICATE, ca_install_command
from bento.packaging.containerize import choose_backend, containerize_command, local_package_folders, package_mount
from commands import build_parser
from commands.build import default_project_dir, image_arguments, image_settings, project_version
from commands.flags import ACCELERATORS, PROJECT_ROOT
from config.errors import ConfigError
from config.settings import EmbentoConfig, ImageSettings, load_config
from tests.conftest import ROOT, server_env

VERSION = project_version(ROOT)
MIRROR = "https://pypi.internal.example/simple"
TORCH_MIRROR = "https://torch.internal.example/whl"
WHEELS = "/srv/wheels"


def certificates(count: int) -> str:
    """The first `count` certificates of certifi's bundle, as one PEM text."""
    return "\n".join(PEM_CERTIFICATE.findall(Path(certifi.where()).read_text())[:count]) + "\n"


def build(home: Path, *flags: str, **env: str) -> dict[str, Path]:
    result = subprocess.run(
        [sys.executable, "-m", "commands", "build", "--project-dir", str(ROOT), *flags],
        cwd=ROOT,
        env=server_env(home, **env),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return {accel: home / "bentos" / "embento" / f"{VERSION}-{accel}" for accel in ACCELERATORS}


def dockerfile_runs(bento: Path) -> list[str]:
    """The Dockerfile's RUN steps, continuation lines joined."""
    text = (bento / "env" / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.removeprefix("RUN ") for line in text.splitlines() if line.startswith("RUN ")]


def requirement_options(bento: Path) -> list[str]:
    lines = (bento / "env" / "python" / "requirements.txt").read_text().splitlines()
    return [line for line in lines if line.startswith("--")]


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "corporate.pem"
    path.write_text(certificates(2))
    return path


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory: pytest.TempPathFactory, ca_file: Path) -> dict[str, Path]:
    """Both variants built behind a private mirror: flags for the base and the CA, variables for the indexes."""
    return build(
        tmp_path_factory.mktemp("home"),
        "--base-image",
        "registry.internal/debian-python:3.11",
        "--ca-bundle",
        str(ca_file),
        "--find-links",
        WHEELS,
        EMBENTO_INDEX_URL=MIRROR,
        EMBENTO_EXTRA_INDEX_URL=TORCH_MIRROR,
    )


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build(tmp_path_factory.mktemp("home"))


@pytest.mark.parametrize("accel", ACCELERATORS)
def test_defaults_build_from_docker_hub_pypi_and_the_variants_own_index(default, accel):
    bento = default[accel]
    dockerfile = (bento / "env" / "docker" / "Dockerfile").read_text()
    assert "FROM python:3.11-slim AS base-container" in dockerfile
    expected = ["--extra-index-url https://download.pytorch.org/whl/cpu"] if accel == "cpu" else []
    assert requirement_options(bento) == expected
    assert not any("ca-certificates/embento" in run for run in dockerfile_runs(bento))
    info = yaml.safe_load((bento / "bento.yaml").read_text())
    assert info["args"] == {"accel": accel}
    assert {k: v for k, v in info["labels"].items() if k not in ("owner", "models")} == {
        "accel": accel,
        "base-image": "python:3.11-slim",
        "index-url": "https://pypi.org/simple",
        "extra-index-url": expected[0].split()[1] if expected else "none",
    }


@pytest.mark.parametrize("accel", ACCELERATORS)
def test_image_installs_no_compilers_and_keeps_no_package_caches(default, accel):
    runs = dockerfile_runs(default[accel])
    assert not any(re.search(r"\b(build-essential|git|gnupg2)\b", run) for run in runs)
    apt = next(run for run in runs if "apt-get install" in run)
    assert re.search(r"--no-install-recommends ca-certificates libsndfile1 libgomp1\b", apt)
    assert apt.endswith("apt-get clean && rm -rf /var/lib/apt/lists/*")
    dockerfile = (default[accel] / "env" / "docker" / "Dockerfile").read_text()
    assert "ARG UV_NO_CACHE=1" in dockerfile and "pip install --no-cache-dir --require-hashes" in dockerfile
    packages = next(i for i, run in enumerate(runs) if "pip install -r $BENTO_PATH/env/python/requirements.txt" in run)
    removal = next(i for i, run in enumerate(runs) if run.startswith("rm -rf "))
    assert removal > packages and runs[removal].split()[2:] == [
        "/app/.venv/lib/python3.11/site-packages/torch/test",
        "/app/.venv/lib/python3.11/site-packages/torch/include",
    ]


@pytest.mark.parametrize("accel", ACCELERATORS)
def test_image_writes_under_a_home_in_tmp_that_it_does_not_ship(default, accel):
    """HOME in the image's ENV; the last build step removes what the build left there and has the script
    BentoML's entrypoint sources first move BentoML's home (its template's ENV) under HOME."""
    from bentoml._internal.container.generate import BENTO_HOME

    from bento.packaging.container_image import ACTIVATE_SCRIPT, TEMPLATE_BENTOML_HOME, WRITABLE_HOME

    assert TEMPLATE_BENTOML_HOME == BENTO_HOME
    bento = default[accel]
    dockerfile = (bento / "env" / "docker" / "Dockerfile").read_text()
    assert f"ENV BENTOML_HOME={BENTO_HOME}" in dockerfile and f"ARG HOME={WRITABLE_HOME}" in dockerfile
    runs = dockerfile_runs(bento)
    packages = next(i for i, run in enumerate(runs) if "pip install -r $BENTO_PATH/env/python/requirements.txt" in run)
    (home,) = [i for i, run in enumerate(runs) if ACTIVATE_SCRIPT in run]
    assert home > packages and runs[home].startswith(f"rm -rf {WRITABLE_HOME} && ")
    assert f"source {ACTIVATE_SCRIPT}" in (bento / "env" / "docker" / "entrypoint.sh").read_text()


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"HOME": "/tmp/embento", "BENTOML_HOME": "/home/bentoml/"}, "/tmp/embento/bentoml"),
        ({"HOME": "/data", "BENTOML_HOME": "/home/bentoml/"}, "/data/bentoml"),  # HOME given at run time
        ({"HOME": "/tmp/embento", "BENTOML_HOME": "/srv/bentoml"}, "/srv/bentoml"),  # BENTOML_HOME given: it stands
        ({"HOME": "/tmp/embento"}, "unset"),
    ],
)
def test_the_activate_line_moves_only_the_templates_bentoml_home(tmp_path, variables, expected):
    """As BentoML's entrypoint runs it: sourced under `set -Eeuo pipefail`."""
    from bento.packaging.container_image import BENTOML_HOME_LINE

    script = tmp_path / "activate"
    script.write_text(BENTOML_HOME_LINE + "\n")
    result = subprocess.run(
        ["bash", "-c", f"set -Eeuo pipefail; source {script}; echo ${{BENTOML_HOME:-unset}}"],
        env={"PATH": "/usr/bin:/bin", **variables},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout.strip()) == (0, expected), result.stderr


def test_a_stored_checkpoint_is_readable_by_any_uid(tmp_path, tiny_reranker_path):
    """The image carries the store's copy, owned by its own user: the uid of an OpenShift pod reads it through
    the "other" bits, which save_pretrained leaves off model.safetensors and mkdtemp off a folder."""
    assert (tiny_reranker_path / "model.safetensors").stat().st_mode & 0o077 == 0  # the premises
    assert tiny_reranker_path.stat().st_mode & 0o077 == 0
    home = tmp_path / "home"
    result = subprocess.run(
        [sys.executable, "-m", "commands", "models", "import", str(tiny_reranker_path), "--name", "r"],
        cwd=ROOT,
        env=server_env(home),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    stored = [path for path in (home / "models" / "r").rglob("*") if path.is_file()]
    assert "model.safetensors" in {path.name for path in stored}
    assert all(path.stat().st_mode & 0o004 for path in stored), [oct(p.stat().st_mode) for p in stored]
    folders = [home / "models" / "r", *(path for path in (home / "models" / "r").rglob("*") if path.is_dir())]
    assert all(path.stat().st_mode & 0o005 == 0o005 for path in folders), [oct(p.stat().st_mode) for p in folders]


@pytest.mark.parametrize("accel", ACCELERATORS)
def test_mirror_settings_replace_base_and_indexes_in_both_variants(mirrored, accel):
    bento = mirrored[accel]
    dockerfile = (bento / "env" / "docker" / "Dockerfile").read_text()
    assert "FROM registry.internal/debian-python:3.11 AS base-container" in dockerfile
    assert requirement_options(bento) == [
        f"--index-url {MIRROR}",
        f"--extra-index-url {TORCH_MIRROR}",
        f"--find-links {WHEELS}",
    ]
    pins = (bento / "env" / "python" / "requirements.txt").read_text()
    assert ("torch==2.13.0+cpu" in pins) == (accel == "cpu") and "onnxruntime" in pins
    info = yaml.safe_load((bento / "bento.yaml").read_text())
    assert info["labels"]["base-image"] == "registry.internal/debian-python:3.11"
    assert (info["labels"]["index-url"], info["labels"]["extra-index-url"]) == (MIRROR, TORCH_MIRROR)
    assert info["labels"]["find-links"] == WHEELS
    assert info["args"]["find_links"] == WHEELS and info["args"]["accel"] == accel


@pytest.mark.parametrize("accel", ACCELERATORS)
def test_ca_bundle_is_trusted_before_any_package_is_fetched(mirrored, ca_file, accel):
    bento = mirrored[accel]
    runs = dockerfile_runs(bento)
    ca_step = next(i for i, run in enumerate(runs) if "update-ca-certificates" in run)
    uv_install = next(i for i, run in enumerate(runs) if "pip install --no-cache-dir --require-hashes" in run)
    packages = next(i for i, run in enumerate(runs) if "pip install -r $BENTO_PATH/env/python/requirements.txt" in run)
    apt = next(i for i, run in enumerate(runs) if "apt-get install" in run)
    assert apt < ca_step < uv_install < packages
    written = re.findall(r"echo (\S+) \| base64 -d > /usr/local/share/ca-certificates/embento-\d\.crt", runs[ca_step])
    assert [base64.b64decode(b).decode() for b in written] == PEM_CERTIFICATE.findall(certificates(2))
    dockerfile = (bento / "env" / "docker" / "Dockerfile").read_text()
    for variable in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"):
        assert f"ARG {variable}=/etc/ssl/certs/ca-certificates.crt" in dockerfile
    assert (bento / "src" / "ca-certificates.pem").read_text() == ca_file.read_text()
    assert yaml.safe_load((bento / "bento.yaml").read_text())["labels"]["ca-bundle"] == str(ca_file)


def test_cuda_variant_runs_on_wheels_of_the_cuda_runtime(mirrored):
    cuda = mirrored["cuda"]
    pins = (cuda / "env" / "python" / "requirements.txt").read_text().splitlines()
    assert {"torch==2.13.0", "onnxruntime-gpu==1.31.1", "nvidia-cublas-cu12==12.9.3.13"} <= set(pins)
    dockerfile = (cuda / "env" / "docker" / "Dockerfile").read_text()
    assert "FROM registry.internal/debian-python:3.11 AS base-container" in dockerfile  # no CUDA in the base
    # A package source offering torch 2.13.0+cpu (it matches ==2.13.0, and sorts higher) stops the build.
    runs = dockerfile_runs(cuda)
    packages = next(i for i, run in enumerate(runs) if "pip install -r $BENTO_PATH/env/python/requirements.txt" in run)
    assert "torch.version.cuda is None" in runs[packages + 1]
    assert not any("torch.version.cuda" in run for run in dockerfile_runs(mirrored["cpu"]))
    assert "ENV LD_LIBRARY_PATH=$LD_LIBRARY_PATH" in dockerfile
    assert "ARG LD_LIBRARY_PATH=/app/.venv/lib/python3.11/site-packages/nvidia/cublas/lib" in dockerfile


def test_a_bundle_without_certificates_stops_the_build(tmp_path):
    (tmp_path / "empty.pem").write_text("not a certificate\n")
    result = subprocess.run(
        [sys.executable, "-m", "commands", "build", "--accel", "cpu", "--ca-bundle", str(tmp_path / "empty.pem")],
        cwd=ROOT,
        env=server_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 2
    assert "holds no PEM certificate" in result.stderr and "empty.pem" in result.stderr
    assert not (tmp_path / "bentos").exists()


def test_a_bundle_too_large_for_one_build_step_is_refused():
    # certifi's whole bundle (about 140 roots): a build step holds it as one `sh -c` argument of at most 128 KiB.
    with pytest.raises(ValueError, match="too many for one build step"):
        ca_install_command(Path(certifi.where()).read_text())
    assert ca_install_command(certificates(3)).count("base64 -d") == 3


def test_flags_beat_variables_which_beat_the_file(tmp_path):
    (tmp_path / "embento.yaml").write_text(
        yaml.safe_dump(
            {"image": {"base_image": "from-file", "find_links": ["/file/wheels"], "index_url": "https://file/simple"}}
        )
    )
    config = load_config({"EMBENTO_BASE_IMAGE": "from-env", "EMBENTO_FIND_LINKS": "/env/a;/env/b"}, cwd=tmp_path)
    args = build_parser().parse_args(["build", "--base-image", "from-flag", "--extra-index-url", "none"])
    settings = image_settings(args, config)
    assert settings == ImageSettings(
        base_image="from-flag", index_url="https://file/simple", extra_index_url=[], find_links=["/env/a", "/env/b"]
    )
    assert image_arguments(settings) == [
        "--arg",
        "base_image=from-flag",
        "--arg",
        "index_url=https://file/simple",
        "--arg",
        "extra_index_url=none",
        "--arg",
        "find_links=/env/a;/env/b",
    ]
    assert image_arguments(ImageSettings()) == []


def test_invalid_image_settings_are_config_errors(tmp_path):
    (tmp_path / "embento.yaml").write_text(yaml.safe_dump({"image": {"base_imag": "typo"}}))
    with pytest.raises(ConfigError, match="base_imag"):
        load_config({}, cwd=tmp_path)
    args = build_parser().parse_args(["build", "--find-links", ""])
    assert image_settings(args, EmbentoConfig()).find_links == []


def test_local_package_folders_are_mounted_at_their_common_parent():
    settings = ImageSettings(
        index_url="file:///opt/pypi/simple",
        extra_index_url=["https://download.pytorch.org/whl"],
        find_links=["/opt/wheels", "https://wheels.example/"],
    )
    folders = local_package_folders(settings)
    assert folders == [Path("/opt/pypi/simple"), Path("/opt/wheels")]
    assert package_mount(folders, "buildah") == ["--opt", "volume=/opt:/opt:ro"]
    assert package_mount([Path("/srv/wheels")], "podman") == ["--opt", "volume=/srv/wheels:/srv/wheels:ro"]
    assert package_mount([], "docker") == []
    with pytest.raises(ConfigError, match="docker cannot mount"):
        package_mount(folders, "docker")
    with pytest.raises(ConfigError, match="share no parent"):
        package_mount([Path("/opt/wheels"), Path("/srv/wheels")], "buildah")


def test_containerize_command_labels_the_image_with_how_it_was_made():
    bento = {
        "args": {"accel": "cpu", "find_links": "/opt/wheels", "extra_index_url": "none"},
        "labels": {"accel": "cpu", "base-image": "localhost/base:1", "find-links": "/opt/wheels"},
    }
    command = containerize_command("embento:1.0-cpu", "buildah", "localhost/embento:1.0-cpu", bento)
    assert command[1:8] == ["-m", "bentoml", "containerize", "embento:1.0-cpu", "--backend", "buildah", "--image-tag"]
    assert "volume=/opt/wheels:/opt/wheels:ro" in command and "network=host" in command
    options = [command[i + 1] for i, part in enumerate(command) if part == "--opt"]
    labels = [option for option in options if option.startswith("label=")]
    assert labels == [
        "label=ai.embento.accel=cpu",
        "label=ai.embento.base-image=localhost/base:1",
        "label=ai.embento.find-links=/opt/wheels",
    ]
    docker = containerize_command("embento:1.0-cuda", "docker", "embento:1.0-cuda", {"args": {"accel": "cuda"}})
    assert "network=host" not in docker and not any(part.startswith("volume=") for part in docker)


def test_containerize_names_the_missing_bento(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "commands", "containerize", "--accel", "cuda"],
        cwd=ROOT,
        env=server_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 2
    assert f"no Bento embento:{VERSION}-cuda: build it first (`embento build --accel cuda`)" in result.stderr


def test_build_defaults_to_the_working_directory_when_it_is_a_project(tmp_path):
    assert default_project_dir(tmp_path) == PROJECT_ROOT
    (tmp_path / "bentofile.yaml").write_text("service: service:Gateway\n")
    (tmp_path / "service.py").write_text("")
    assert default_project_dir(tmp_path) == tmp_path


def fake_engines(folder: Path, **exit_codes: int) -> str:
    """Executables named after engines, each exiting with its code (`docker info` answers with docker's)."""
    for name, code in exit_codes.items():
        (folder / name).write_text(f"#!/bin/sh\nexit {code}\n")
        (folder / name).chmod(0o755)
    return str(folder)


def test_auto_backend_is_docker_when_its_daemon_answers_else_buildah_else_podman(tmp_path, monkeypatch):
    cases = (
        ({"docker": 0, "buildah": 0}, "docker"),
        ({"docker": 1, "buildah": 0, "podman": 0}, "buildah"),
        ({"docker": 1, "podman": 0}, "podman"),
        ({"docker": 1}, None),
    )
    for engines, chosen in cases:
        folder = tmp_path / "-".join(engines)
        folder.mkdir()
        monkeypatch.setenv("PATH", fake_engines(folder, **engines))
        if chosen is None:  # docker's daemon down, no other engine
            with pytest.raises(ConfigError, match="no container engine"):
                choose_backend("auto")
        else:
            assert choose_backend("auto") == chosen
    with pytest.raises(ConfigError, match="'buildah' is not installed"):
        choose_backend("buildah")
