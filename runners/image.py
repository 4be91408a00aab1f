"""The Bento's container image, one variant per accelerator, chosen by the bento argument `accel`.

`bentoml build --arg accel=cuda --version <version>-cuda` (what `embento build --accel cuda` runs) builds
the CUDA variant; BentoML records the argument in `bento.yaml` and applies it again whenever the Bento is
served. Both variants share `requirements.txt` and add their torch and ONNX Runtime builds from
`requirements-<accel>.txt`. One Bento holds one image (BentoML 1.4 builds it for the entry service), so
every service of a variant runs on the same image.
"""

from __future__ import annotations

from typing import Literal

import bentoml
from pydantic import BaseModel

PYTHON_VERSION = "3.11"
# libsndfile: audio decoding where soundfile's wheel brings no library of its own; libgomp: OpenMP.
SYSTEM_PACKAGES = ("libsndfile1", "libgomp1")
# CTranslate2's wheel dlopens cuBLAS 12; requirements-cuda.txt installs it into the image's venv.
CUBLAS12_LIBRARY_PATH = f"/app/.venv/lib/python{PYTHON_VERSION}/site-packages/nvidia/cublas/lib"


class BuildArgs(BaseModel):
    accel: Literal["cpu", "cuda"] = "cpu"


def bento_image(accel: str) -> bentoml.images.Image:
    # Exact pins instead of a lock: locking resolves against PyPI alone and would miss PyTorch's CPU index.
    return (
        bentoml.images.Image(python_version=PYTHON_VERSION, lock_python_packages=False)
        .system_packages(*SYSTEM_PACKAGES)
        # Relative to the working directory, which BentoML sets to the project (or a Bento's src/).
        .requirements_file("requirements.txt")
        .requirements_file(f"requirements-{accel}.txt")
    )


def bento_envs(accel: str) -> list[dict[str, str]]:
    # uv, which installs the image's packages, takes each package from the first index that has it; the
    # PyTorch index mirrors numpy and others at fewer versions, so let uv pick the best match across all.
    envs = [{"name": "UV_INDEX_STRATEGY", "value": "unsafe-best-match"}]
    if accel == "cuda":
        envs.append({"name": "LD_LIBRARY_PATH", "value": CUBLAS12_LIBRARY_PATH})
    return envs


ARGS = bentoml.use_arguments(BuildArgs)
IMAGE = bento_image(ARGS.accel)
