# ruff: noqa: E501  (the markdown table rows below are one line each)
"""Writes docs/configuration.md from the configuration object (config/settings.py) and the command's flags
(commands/flags.py), so the reference cannot drift from the code: `make docs`; `--check` fails when the file is stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402
from pydantic_core import PydanticUndefined  # noqa: E402

from commands.flags import FLAGS, IMAGE_FLAGS, Flag  # noqa: E402
from config.settings import (  # noqa: E402
    AUTH_ENV_FIELDS,
    BENTO_CONFIG_ENV,
    CACHE_ENV_FIELDS,
    CONFIG_FILE_NAME,
    ENV_PREFIX,
    IMAGE_ENV_FIELDS,
    JOBS_ENV_FIELDS,
    LIMITS_ENV_FIELDS,
    LOG_ENV_FIELDS,
    MODEL_ENV_FIELDS,
    SERVER_ENV_FIELDS,
    AuthSettings,
    CacheSettings,
    EmbentoConfig,
    ImageSettings,
    JobSettings,
    LimitSettings,
    LogSettings,
    ModelConfig,
)
from embento.cli import BUNDLE_ENV  # noqa: E402

TARGET = ROOT / "docs" / "configuration.md"

INTRO = f"""# Configuration

Written by `make docs` (`python docs/make_configuration.py`) from the configuration object in
`config/settings.py` (a model's: `config/model_settings.py`) and the flags in `commands/flags.py`; do not edit by hand.

One validated object, read in one place. Sources, lowest priority first:

1. the built-in defaults below;
2. a YAML file: `{CONFIG_FILE_NAME}` in the working directory, or the path in `{ENV_PREFIX}CONFIG`;
3. `{ENV_PREFIX}*` environment variables;
4. `embento serve` and `embento build` flags, which set the same variables, so they win.

```yaml
api_key: [change-me]          # clients send "Authorization: Bearer change-me"
models:
  - model_id: sentence-transformers/all-MiniLM-L6-v2
  - model_id: /models/e5-small-v2          # a local folder, a Hub id or bentoml://<name>
    served_model_name: e5-small
    prompts: {{query: "query: ", passage: "passage: "}}
    default_prompt_name: passage
    batch_size: 64
image:                                     # read by `embento build` only
  index_url: https://pypi.internal.example/simple
```

List settings take `;`-separated text in a variable (`a;b`). Per-model variables hold one value for every
model, or `;`-separated values, one per model in the order of `{ENV_PREFIX}MODEL_ID`; per-model flags repeat
in the order of `--model-id`:

```bash
embento serve --model-id BAAI/bge-small-en-v1.5 --batch-size 64 \\
              --model-id ./my-model --served-model-name mine --pooling-method cls
{ENV_PREFIX}MODEL_ID="BAAI/bge-small-en-v1.5;./my-model" {ENV_PREFIX}BATCH_SIZE=64 embento serve
```

An invalid configuration stops `embento serve` (exit 2) and the server before anything loads, with one line per
setting refused: the flag, the variable (with its setting) or the place in the file it came from, the value given,
and what the setting takes:

```text
embento: invalid configuration: --backend is 'foo'; it takes auto, torch, onnx or ctranslate2
embento: invalid configuration: EMBENTO_BATCH_SIZE (batch_size) is '0'; it takes 1 or more
embento: invalid configuration: models[1].poolin in /srv/embento.yaml: not a setting (did you mean pooling?)
```
"""

OUTRO = f"""## Settings outside the file

| variable | flag | what it does |
|---|---|---|
{{command_rows}}
| `{BUNDLE_ENV}` | | The Embento checkout the `embento` command runs. Unset: the working directory when it is one, else the checkout the package was installed from. |
| `{BENTO_CONFIG_ENV}` | | Written by the build into a Bento's `bento.yaml`: the configuration the Bento serves (deployment.md). Not set by hand. |

## Other variables Embento honours

| variable | what it does |
|---|---|
| `HF_HUB_OFFLINE`, `HF_HOME`, `HF_HUB_CACHE`, `HF_TOKEN` | Hugging Face Hub access and cache, as `huggingface_hub` reads them. |
| `BENTOML_HOME` | Where BentoML keeps its model store and Bentos (`embento models import`, `embento build`). |
| `BENTOML_DO_NOT_TRACK` | BentoML's usage tracking; `embento` sets it to `True` unless it is set. |
| `OTEL_*` | OpenTelemetry's exporter settings, when `tracing` is true. |
"""


def default_text(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "see below"
        if isinstance(value, list) and value and isinstance(value[0], BaseModel):
            return "one model with the defaults below"
        return "none" if not value else f"`{value}`"
    if field.default is PydanticUndefined or field.default is None or field.default == "":
        return "unset"
    if isinstance(field.default, bool):
        return f"`{str(field.default).lower()}`"
    if isinstance(field.default, int | float) and field.default >= 10_000:
        return f"`{field.default:_}`".replace("_", " ")
    return f"`{field.default}`"


def flags_for(names: list[str], flags: tuple[Flag, ...]) -> str:
    return ", ".join(f"`{name}`" for flag in flags if flag.env in names for name in flag.names)


def table(model: type[BaseModel], env_fields: dict[str, str], flags: tuple[Flag, ...]) -> str:
    rows = ["| setting | default | variable | flag | what it does |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        variables = [suffix for suffix, target in env_fields.items() if target == name]
        variable_text = ", ".join(f"`{ENV_PREFIX}{suffix}`" for suffix in variables) or "YAML only"
        description = (field.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(
            f"| `{name}` | {default_text(field)} | {variable_text} | {flags_for(variables, flags)} | {description} |"
        )
    return "\n".join(rows)


def render() -> str:
    config_suffixes = set().union(
        MODEL_ENV_FIELDS,
        SERVER_ENV_FIELDS,
        CACHE_ENV_FIELDS,
        JOBS_ENV_FIELDS,
        AUTH_ENV_FIELDS,
        LIMITS_ENV_FIELDS,
        LOG_ENV_FIELDS,
    )
    command_rows = "\n".join(
        f"| `{ENV_PREFIX}{flag.env}` | {', '.join(f'`{n}`' for n in flag.names)} | {flag.help.capitalize()}. |"
        for flag in FLAGS
        if flag.env not in config_suffixes
    )
    return "\n".join(
        [
            INTRO,
            "## Server settings\n",
            "The top level of the file.\n",
            table(EmbentoConfig, SERVER_ENV_FIELDS, FLAGS),
            "\n## Model settings\n",
            "Each entry of `models:`. Unset, the value comes from the checkpoint where it says so.\n",
            table(ModelConfig, MODEL_ENV_FIELDS, FLAGS),
            "\n## Cache settings\n",
            "The `cache:` section: the embedding cache of the models with `cache: true` (operations.md: Embedding "
            "cache).\n",
            table(CacheSettings, CACHE_ENV_FIELDS, FLAGS),
            "\n## Job settings\n",
            "The `jobs:` section: bulk jobs through OpenAI's Files and Batches APIs (bulk-jobs.md).\n",
            table(JobSettings, JOBS_ENV_FIELDS, FLAGS),
            "\n## Auth settings\n",
            "The `auth:` section: tenants, each with its API keys, models and limits (tenants.md).\n",
            table(AuthSettings, AUTH_ENV_FIELDS, FLAGS),
            "\n## Limit settings\n",
            "The `limits:` section: where the tenants' rates and concurrency are counted (tenants.md: Where limits are "
            "counted).\n",
            table(LimitSettings, LIMITS_ENV_FIELDS, FLAGS),
            "\n## Log settings\n",
            "The `log:` section: the access log (tenants.md: Usage).\n",
            table(LogSettings, LOG_ENV_FIELDS, FLAGS),
            "\n## Image settings\n",
            "The `image:` section, read by `embento build` only (deployment.md: containers behind a private mirror). "
            "The Bento's labels record them.\n",
            table(ImageSettings, IMAGE_ENV_FIELDS, IMAGE_FLAGS),
            "",
            OUTRO.replace("{command_rows}", command_rows),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if docs/configuration.md is not up to date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
