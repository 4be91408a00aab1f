"""The Bento's container image, one variant per accelerator, chosen by the bento argument `accel`.

`bentoml build --arg accel=cuda --version <version>-cuda` (what `embento build --accel cuda` runs) builds
the CUDA variant; BentoML records the argument in `bento.yaml` and applies it again whenever the Bento is
served. Both variants share `requirements.txt` and add their torch and ONNX Runtime builds from
`requirements-<accel>.txt`. One Bento holds one image (BentoML 1.4 builds it for the entry service), so
every service of a variant runs on the same image.

The image settings (`config.settings.ImageSettings`: base image, package indexes, extra CA certificates) are
bento arguments too, so a build behind a private mirror is recorded in `bento.yaml` and in the labels.

Everything the image writes while serving goes under its `HOME` (`WRITABLE_HOME`), so that it serves as its
own user, as an arbitrary uid in group 0 (OpenShift) and on a read-only root where only `/tmp` is writable.
"""

from __future__ import annotations

import base64
import re
import shlex
from pathlib import Path
from typing import Literal

import attrs
import bentoml

from config.settings import ImageSettings

PYTHON_VERSION = "3.11"
DEFAULT_BASE_IMAGE = f"python:{PYTHON_VERSION}-slim"
PYPI = "https://pypi.org/simple"
# libsndfile: audio decoding where soundfile's wheel brings no library of its own; libgomp: OpenMP.
SYSTEM_PACKAGES = ("ca-certificates", "libsndfile1", "libgomp1")
SITE_PACKAGES = f"/app/.venv/lib/python{PYTHON_VERSION}/site-packages"  # BentoML's venv in the image
# CTranslate2's wheel dlopens cuBLAS 12; requirements-cuda.txt installs it into the image's venv.
CUBLAS12_LIBRARY_PATH = f"{SITE_PACKAGES}/nvidia/cublas/lib"
# Written by `embento build --ca-bundle` into the build context, and so carried in the Bento's src/.
CA_FILE = "ca-certificates.pem"
# One build step holds them (as one `sh -c` argument, at most 128 KiB on Linux).
MAX_CA_COMMAND_CHARS = 100_000
SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"
# uv reads its own root store unless pointed at one, requests (huggingface_hub) certifi's, pip its own.
CA_FILE_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")
# Installed but never used in serving: torch's C++ test binaries and headers (about 145 MB; the headers
# serve C++ extensions, which would need the compilers the image leaves out). Removed after the install,
# which shrinks images built as one layer (buildah's and podman's default); Docker keeps its layers.
UNSERVED_PATHS = (f"{SITE_PACKAGES}/torch/test", f"{SITE_PACKAGES}/torch/include")
# `torch==2.13.0` also matches `2.13.0+cpu`, which sorts higher: a package source holding PyTorch's CPU wheels
# (a mirror of its CPU index, a wheel folder) would put a CPU torch in the CUDA image. The build stops instead.
CUDA_TORCH_CHECK = (
    "python -c \"import sys, torch; sys.exit(torch.version.cuda is None and 'the CUDA variant got a "
    "CPU build of torch ' + torch.__version__ + ': remove CPU wheels from its package sources')\""
)
PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----\s.*?-----END CERTIFICATE-----", re.DOTALL)
# The image's HOME, the one folder it writes to while serving: BentoML's home (~/bentoml: its stores, the
# Prometheus multiprocess files), the caches that default under ~/.cache (Hugging Face, torch, numba's for
# librosa; CUDA's ~/.nv), and Embento's `cache_dir` (~/.cache/embento: ONNX exports, int8 files, CTranslate2
# conversions). Under /tmp (mode 1777), which is writable however the image runs: as its own user, as an
# arbitrary uid in group 0 (OpenShift), or on a read-only root with a tmpfs or an emptyDir on /tmp. Setting
# HOME at run time moves all of it.
WRITABLE_HOME = "/tmp/embento"
# BentoML's template sets this BENTOML_HOME, whose folders its start-up creates, in an ENV that the Bento's
# envs cannot replace (an ENV wins over the ARG of the same name). Its entrypoint sources the venv's
# activate script first, so a line there moves that home under HOME; a BENTOML_HOME given at run time stands.
TEMPLATE_BENTOML_HOME = "/home/bentoml/"
ACTIVATE_SCRIPT = "/app/.venv/bin/activate"
BENTOML_HOME_LINE = (
    f'if [ "${{BENTOML_HOME:-}}" = {TEMPLATE_BENTOML_HOME} ]; then export BENTOML_HOME="$HOME/bentoml"; fi'
)


class BuildArgs(ImageSettings):
    accel: Literal["cpu", "cuda"] = "cpu"


@attrs.define
class WheelsOnlyImage(bentoml.images.Image):
    """BentoML's image without its first step, which installs build-essential, git and gnupg2 (about 300 MB):
    every package here comes as a wheel, so nothing in the image compiles or clones."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # BentoML puts that step first, when the image is made and again whenever the build evolves it.
        self.commands.pop(0)


def bento_image(args: BuildArgs) -> bentoml.images.Image:
    # Exact pins instead of a lock: locking resolves against PyPI alone and would miss PyTorch's CPU index.
    image = WheelsOnlyImage(
        base_image=args.base_image or DEFAULT_BASE_IMAGE, python_version=PYTHON_VERSION, lock_python_packages=False
    )
    image.run(system_packages_command())
    if args.ca_bundle:
        if not Path(CA_FILE).is_file():
            raise FileNotFoundError(
                f"ca_bundle {args.ca_bundle} is not in the build context as {CA_FILE}: "
                "build with `embento build --ca-bundle`, which puts it there"
            )
        image.run(ca_install_command(Path(CA_FILE).read_text()))
    image.python_packages(*python_requirements(args))
    if args.accel == "cuda":
        image.run(CUDA_TORCH_CHECK)
    image.run(f"rm -rf {' '.join(UNSERVED_PATHS)}")
    return image.run(writable_home_command())


def writable_home_command() -> str:
    """No HOME in the image, so the uid that serves makes its own in /tmp: the build steps (which run with it)
    may leave files there, and podman's `--tmpfs /tmp` copies the image's /tmp into the tmpfs without the
    modes (a folder owned by group 0 with g=u came back 755, which the uid of an OpenShift pod could not
    write). Then BentoML's home under HOME, in the activate script."""
    return f"rm -rf {WRITABLE_HOME} && echo {shlex.quote(BENTOML_HOME_LINE)} >> {ACTIVATE_SCRIPT}"


def system_packages_command() -> str:
    return (
        "apt-get update && apt-get install -q -y --no-install-recommends "
        + " ".join(SYSTEM_PACKAGES)
        + " && apt-get clean && rm -rf /var/lib/apt/lists/*"
    )


def requirement_lines(accel: str) -> list[str]:
    """`requirements.txt` and the variant's file, relative to the working directory (BentoML sets it to the
    project, or a Bento's src/)."""
    return [
        line.strip()
        for name in ("requirements.txt", f"requirements-{accel}.txt")
        for line in Path(name).read_text().splitlines()
    ]


def extra_index_urls(args: BuildArgs) -> list[str]:
    """The settings' extra indexes, or the variant's own (its files' `--extra-index-url` lines)."""
    if args.extra_index_url is not None:
        return args.extra_index_url
    return [line.split()[1] for line in requirement_lines(args.accel) if line.startswith("--extra-index-url")]


def python_requirements(args: BuildArgs) -> list[str]:
    """The pins of the requirement files, after the index options in force."""
    options = [f"--index-url {args.index_url}"] if args.index_url else []
    options += [f"--extra-index-url {url}" for url in extra_index_urls(args)]
    options += [f"--find-links {link}" for link in args.find_links]
    return options + [line for line in requirement_lines(args.accel) if line and not line.startswith(("#", "--"))]


def bento_envs(args: BuildArgs) -> list[dict[str, str]]:
    # uv, which installs the image's packages, takes each package from the first index that has it; the
    # PyTorch index mirrors numpy and others at fewer versions, so let uv pick the best match across all.
    # No uv cache in the image: it serves nothing once installed (BentoML installs uv itself with no pip cache).
    envs = [{"name": "UV_INDEX_STRATEGY", "value": "unsafe-best-match"}, {"name": "UV_NO_CACHE", "value": "1"}]
    # In the image's ENV. A local `bentoml serve` passes it to its workers only where its own environment has
    # no HOME.
    envs.append({"name": "HOME", "value": WRITABLE_HOME})
    if args.ca_bundle:
        envs += [{"name": name, "value": SYSTEM_CA_FILE} for name in CA_FILE_VARIABLES]
    if args.accel == "cuda":
        envs.append({"name": "LD_LIBRARY_PATH", "value": CUBLAS12_LIBRARY_PATH})
    return envs


def image_labels(args: BuildArgs) -> dict[str, str]:
    """How the image was made, in the Bento's labels (and the image's, through `embento containerize`)."""
    labels = {
        "accel": args.accel,
        "base-image": args.base_image or DEFAULT_BASE_IMAGE,
        "index-url": args.index_url or PYPI,
        "extra-index-url": " ".join(extra_index_urls(args)) or "none",
    }
    if args.find_links:
        labels["find-links"] = " ".join(args.find_links)
    if args.ca_bundle:
        labels["ca-bundle"] = args.ca_bundle
    return labels


def ca_install_command(pem: str) -> str:
    """A build step that adds the bundle's certificates to the image's trust store before any package is
    fetched, one file each (Debian's update-ca-certificates links one certificate per file)."""
    certificates = PEM_CERTIFICATE.findall(pem)
    if not certificates:
        raise ValueError("holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    writes = [
        f"echo {base64.b64encode(cert.encode()).decode()} | base64 -d "
        f"> /usr/local/share/ca-certificates/embento-{i}.crt"
        for i, cert in enumerate(certificates, start=1)
    ]
    command = " && ".join(["mkdir -p /usr/local/share/ca-certificates", *writes, "update-ca-certificates"])
    if len(command) > MAX_CA_COMMAND_CHARS:
        raise ValueError(
            f"its {len(certificates)} certificates are too many for one build step: keep those the "
            "package index needs (the proxy's or the company's roots)"
        )
    return command


ARGS = bentoml.use_arguments(BuildArgs)
IMAGE = bento_image(ARGS)
