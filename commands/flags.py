"""The command's flags: `embento serve`'s (each an EMBENTO_* variable) and `embento build`'s image settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from config.settings import CONFIG_FILE_NAME
from models.kinds import KIND_SPECS

PROJECT_ROOT = Path(__file__).resolve().parent.parent
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
    Flag(
        ("--model-id",),
        "MODEL_ID",
        "local folder, Hugging Face Hub id or bentoml://<store name>; repeat to serve several models",
        repeats=True,
    ),
    Flag(
        ("--served-model-name",),
        "SERVED_MODEL_NAME",
        "name clients send as `model` (default: the id's last part)",
        repeats=True,
    ),
    Flag(
        ("--kind",),
        "KIND",
        " | ".join(("auto", *KIND_SPECS)) + " (default auto: read from the checkpoint)",
        repeats=True,
    ),
    Flag(("--revision",), "REVISION", "Hub revision (branch, tag or commit)", repeats=True),
    Flag(
        ("--backend", "--engine"),
        "BACKEND",
        "inference backend: auto (the default) | torch | onnx | ctranslate2",
        repeats=True,
    ),
    Flag(("--device",), "DEVICE", "auto | cpu | cuda | cuda:N | mps", repeats=True),
    Flag(
        ("--dtype",), "DTYPE", "auto | float32 | float16 | bfloat16 | int8 | int8_float16 (per backend)", repeats=True
    ),
    Flag(("--batch-size",), "BATCH_SIZE", "most inputs in one forward pass", repeats=True),
    Flag(("--max-batch-tokens",), "MAX_BATCH_TOKENS", "most padded tokens in one forward pass", repeats=True),
    Flag(
        ("--pass-budget-ms",),
        "PASS_BUDGET_MS",
        "longest call to the model while live queries wait, in ms (default: 30 on CPU, 10 on a GPU)",
        repeats=True,
    ),
    Flag(("--max-seq-length",), "MAX_SEQ_LENGTH", "truncate inputs to this many tokens", repeats=True),
    Flag(
        ("--pooling-method",),
        "POOLING_METHOD",
        "mean | cls | lasttoken | max | mean_sqrt_len_tokens | weightedmean (default: the checkpoint's)",
        repeats=True,
    ),
    Flag(
        ("--normalize",), "NORMALIZE", "L2-normalize outputs (default: the checkpoint's)", repeats=True, is_switch=True
    ),
    Flag(("--default-prompt-name",), "DEFAULT_PROMPT_NAME", "prompt applied when a request names none", repeats=True),
    Flag(
        ("--trust-remote-code",),
        "TRUST_REMOTE_CODE",
        "run code shipped with the checkpoint (default: false)",
        repeats=True,
        is_switch=True,
    ),
    Flag(
        ("--cache",),
        "CACHE",
        "keep the model's outputs per input in the embedding cache (default: false)",
        repeats=True,
        is_switch=True,
    ),
    Flag(("--cache-memory-bytes",), "CACHE_MEMORY_BYTES", "the cache's memory tier, per gateway worker"),
    Flag(("--cache-redis-url",), "CACHE_REDIS_URL", "redis://host:port/db of the cache's shared tier"),
    Flag(
        ("--api-key",),
        "API_KEY",
        "require `Authorization: Bearer <key>` on every route but the probes; several keys: separate them with ';'",
    ),
    Flag(("--gateway-workers",), "GATEWAY_WORKERS", "gateway processes (default: chosen from the cores and GPUs)"),
    Flag(("--config",), "CONFIG", f"YAML configuration file (default: ./{CONFIG_FILE_NAME} if present)"),
    Flag(("--host",), "HOST", f"address to listen on (default: {DEFAULT_HOST})"),
    Flag(("--port",), "PORT", f"port to listen on (default: {DEFAULT_PORT})"),
    Flag(
        ("--log-level",),
        "LOG_LEVEL",
        "info, debug or error: debug adds the debug logs and the traceback of a "
        "start-up failure with a known cause, which is otherwise one line; error keeps errors only (default: info)",
    ),
)
# `--log-level` as BentoML's `serve` options.
LOG_LEVELS = {"info": [], "debug": ["--debug"], "error": ["--quiet"]}


# `embento build`'s image settings.
IMAGE_FLAGS = (
    Flag(
        ("--base-image",),
        "BASE_IMAGE",
        "image to build on: Debian with Python 3.11 and pip (default: python:3.11-slim from Docker Hub)",
    ),
    Flag(("--index-url",), "INDEX_URL", "Python package index used inside the build (default: PyPI)"),
    Flag(
        ("--extra-index-url",),
        "EXTRA_INDEX_URL",
        "extra package index, replacing the variant's own (PyTorch's "
        "CPU index for cpu); repeat for several; 'none' for none",
        repeats=True,
    ),
    Flag(
        ("--find-links",),
        "FIND_LINKS",
        "folder or URL of wheels searched besides the indexes; repeat for several",
        repeats=True,
    ),
    Flag(
        ("--ca-bundle",),
        "CA_BUNDLE",
        "PEM file of CA certificates trusted inside the build and the image "
        "(where TLS to the package index is intercepted)",
    ),
)


def dest(flag: Flag) -> str:
    return flag.env.lower()
