"""The configuration object, and the one place it is read from.

Sources, lowest priority first: built-in defaults, a YAML file (`embento.yaml` in the working directory,
or the path in `EMBENTO_CONFIG`), then `EMBENTO_*` environment variables. Per-model variables hold
`;`-separated lists: one value applies to every model, N values apply one to each of N models.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from config.errors import ConfigError
from config.invalid_settings import Variables, invalid_settings
from config.model_settings import ModelConfig

CONFIG_FILE_NAME = "embento.yaml"
ENV_PREFIX = "EMBENTO_"
# A Bento's configuration, recorded at build time in its `bento.yaml` as one of the gateway's `envs`
# (bento/packaging/store.py).
BENTO_CONFIG_ENV = ENV_PREFIX + "BENTO_CONFIG"


class ImageSettings(BaseModel):
    """Where `embento build` takes the image's base and Python packages from, for builds behind a private
    mirror. Unset, an image builds from Docker Hub's python base, PyPI and the variant's own extra index
    (PyTorch's CPU index for the CPU variant). Read at build time only; a Bento's labels record them."""

    model_config = ConfigDict(extra="forbid")

    base_image: str | None = Field(
        None,
        description=(
            "The image to build on: Debian-family, with Python 3.11 and pip. Unset: `python:3.11-slim` from Docker Hub."
        ),
    )
    index_url: str | None = Field(None, description="The Python package index used inside the build. Unset: PyPI.")
    extra_index_url: list[str] | None = Field(
        None,
        description=(
            "Extra package indexes, replacing the variant's own (PyTorch's CPU index for `cpu`); `none` (or []) for "
            "none. Unset: the variant's own."
        ),
    )
    find_links: list[str] = Field(
        default_factory=list,
        description=(
            "Folders or URLs of wheels, searched besides the indexes (local folders are mounted into the build)."
        ),
    )
    ca_bundle: str | None = Field(
        None,
        description=(
            "A PEM file of CA certificates trusted inside the build and the image, besides Debian's (where TLS to the "
            "package index is intercepted)."
        ),
    )

    @field_validator("base_image", "index_url", "ca_bundle", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("extra_index_url", "find_links", mode="before")
    @classmethod
    def _list_from_text(cls, value: Any) -> Any:
        items = split_list(value) if isinstance(value, str) else value
        if isinstance(items, list):  # "none" (a flag or variable can give no empty list) and blanks: nothing
            return [item for item in items if str(item).strip() and str(item).strip().lower() != "none"]
        return items

    def bento_arguments(self) -> dict[str, str]:
        """The settings given, as text the validators read back: lists `;`-separated, an empty one `none`."""
        return {
            name: (";".join(value) or "none") if isinstance(value, list) else str(value)
            for name, value in self.model_dump(exclude_defaults=True).items()
        }


# A secret setting (a URL that may hold a password); an empty variable means unset.
OptionalSecret = Annotated[SecretStr | None, BeforeValidator(lambda value: None if value == "" else value)]


def revealed(secret: SecretStr | None) -> str | None:
    return secret.get_secret_value() if secret is not None else None


class CacheSettings(BaseModel):
    """The embedding cache of the models with `cache: true`: per input, in each gateway worker's memory and, with
    a `redis_url`, in a Redis that every worker and replica shares (docs/operations.md: "Embedding cache")."""

    model_config = ConfigDict(extra="forbid")

    memory_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        description=(
            "Bytes of outputs each gateway worker keeps, least recently used out first (64 MiB: about 38,000 "
            "384-feature vectors); 0: no memory tier."
        ),
    )
    redis_url: OptionalSecret = Field(
        None,
        description=(
            "`redis://[:password@]host:port/db` (or `rediss://`) of the shared tier. Unset: memory only. A secret of "
            "the deployment: a Bento does not carry it."
        ),
    )
    ttl_s: int = Field(7 * 24 * 3600, ge=1, description="How long Redis keeps an output (7 days).")
    redis_timeout_ms: float = Field(
        20.0,
        gt=0,
        description=(
            "Longest wait for one Redis lookup; past it (or on any Redis error) the inputs are computed as if there "
            "were no cache, and Redis is skipped for a second."
        ),
    )
    share_across_tenants: bool = Field(
        False,
        description=(
            "One tenant's requests are answered from outputs another tenant's computed. False: each tenant (API key "
            "of the keys file) has its own entries, as a hit would tell one tenant what another embedded; the tenant "
            "`default` (`api_key`, or no keys) keeps the keys it had."
        ),
    )

    def redis(self) -> str | None:
        return revealed(self.redis_url)


class JobSettings(BaseModel):
    """Bulk jobs: OpenAI's Files and Batches APIs, run in the model services' idle capacity (docs/bulk-jobs.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Serve `/v1/files` and `/v1/batches` and run their jobs.")
    data_dir: str | None = Field(
        None,
        description=(
            "Where SQLite keeps the jobs' state and files keep their bytes. Unset: `embento-jobs` under BentoML's "
            "home (a volume in a container). Not used with `database_url`."
        ),
    )
    database_url: OptionalSecret = Field(
        None,
        description=(
            "`postgresql://user:password@host:port/db`: every replica shares the jobs, their state and their files "
            "there (no shared disk needed). Unset: SQLite in `data_dir`, for one server. A secret of the "
            "deployment: a Bento does not carry it."
        ),
    )
    lease_s: float = Field(
        60.0,
        gt=0,
        description=(
            "How long a claimed chunk of lines stays a worker's without word from it; a chunk whose worker died is "
            "taken over after this."
        ),
    )
    # Each chunk's results are one write; on 2 cores, 64-line chunks (2 MB of MiniLM output) held the gateway long
    # enough to double an interactive request's p99 beside a batch (bench/batch_jobs.py, a one-off since removed:
    # `git show 6a7ba5e:bench/batch_jobs.py`).
    chunk_lines: int = Field(16, ge=1, description="Lines claimed, run and stored together.")
    lines_in_flight: int = Field(
        16,
        ge=1,
        description=(
            "Lines each gateway worker has on the model services at once (their rows wait for idle capacity)."
        ),
    )
    max_lines: int = Field(50_000, ge=1, description="Most lines (requests) in one batch input file (OpenAI's).")
    max_file_bytes: int = Field(200 * 1000 * 1000, ge=1, description="Largest uploaded file (200 MB, OpenAI's).")
    max_stored_bytes: int = Field(
        10 * 1000**3,
        ge=1,
        description=("Most bytes of files (uploaded and output) the deployment keeps; an upload past it is a 400."),
    )
    retention_s: int = Field(
        30 * 24 * 3600,
        ge=1,
        description=("How long files (inputs and outputs) are kept, from their creation (30 days); deleted then."),
    )

    def database(self) -> str | None:
        return revealed(self.database_url)


class AuthSettings(BaseModel):
    """Tenants: API keys with their own limits, from a keys file (docs/tenants.md)."""

    model_config = ConfigDict(extra="forbid")

    keys_file: str | None = Field(
        None,
        description=(
            "A YAML file with a top-level `keys:` list: each key's tenant `name`, `key_sha256` (the hex SHA-256 of the "
            "secret, never the secret), allowed `models`, `requests_per_minute`, `tokens_per_minute`, "
            "`max_concurrent_requests`, `weight` and bulk-job limits (docs/tenants.md). Read again when it changes and "
            "on SIGHUP, without a restart; refused if anyone may write it. `embento keys add NAME --file PATH` makes "
            "a key. Unset: `api_key` alone."
        ),
    )


class LimitSettings(BaseModel):
    """Where the tenants' rates and concurrency are counted (docs/tenants.md)."""

    model_config = ConfigDict(extra="forbid")

    redis_url: OptionalSecret = Field(
        None,
        description=(
            "`redis://[:password@]host:port/db` where every replica counts the tenants' limits together. Unset: "
            "counted for this server, across its gateway workers, in shared memory. A secret of the deployment: a "
            "Bento does not carry it."
        ),
    )
    on_store_error: Literal["open", "closed"] = Field(
        "open",
        description=(
            "When Redis cannot answer in time: `open` lets the request through unlimited, `closed` refuses it (a "
            "503). Either way counted in `embento_limit_store_errors_total`, with a warning."
        ),
    )
    redis_timeout_ms: float = Field(50.0, gt=0, description="Longest wait for Redis to count one request.")

    def redis(self) -> str | None:
        return revealed(self.redis_url)


class LogSettings(BaseModel):
    """What the server logs beyond its own lines (docs/operations.md, Logs)."""

    model_config = ConfigDict(extra="forbid")

    access: Literal["off", "json"] = Field(
        "off",
        description=(
            "`json`: one JSON line per request on standard output: time, tenant (never the key), method, route, "
            "model, tokens, status and duration."
        ),
    )
    request_content: bool = Field(
        False,
        description=(
            "Debugging only: tracebacks in the log keep every exception's message, which may quote a request's "
            "texts, images or token ids. Off: only Embento's own error messages are shown; request content reaches "
            "no log line at any level (docs/operations.md, Logs)."
        ),
    )


class EmbentoConfig(BaseModel):
    """Everything the gateway and the model services need to know."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelConfig] = Field(
        default_factory=lambda: [ModelConfig()],
        min_length=1,
        description=("The served models, each with the settings below. Unset: all-MiniLM-L6-v2 alone."),
    )
    allow_partial: bool = Field(
        False,
        description=(
            "False: a model that fails to load (or to warm up) stops the server, which exits 1. True: the others "
            "are served; /readyz and /v1/models list the failed one with its cause, and requests naming it get a 503."
        ),
    )
    api_key: list[SecretStr] = Field(
        default_factory=list,
        description=(
            "Keys clients send as `Authorization: Bearer <key>` on every route but the probes; several allow "
            "rotation (old and new both valid until the old is removed). Unset: open."
        ),
    )
    api_key_file: str | None = Field(
        None, description=("A file with one key per line, added to `api_key` (a mounted secret).")
    )
    admin_key: SecretStr | None = Field(
        None,
        description=(
            "The key of the admin API (`/admin/...`: load, unload, aliases), sent as `Authorization: Bearer <key>`; "
            "never a tenant's key, which gets a 403 there. Unset: the admin API answers 403. With no API key "
            "configured, it is also the only key whose requests may send `keep_alive`."
        ),
    )
    max_loaded_models: int | None = Field(
        None,
        ge=1,
        description=(
            "The memory budget of each model-service worker as a count: loading one more evicts the least recently "
            "used idle model, or is refused when every loaded one has requests in flight. Unset: no limit."
        ),
    )
    max_loaded_bytes: int | None = Field(
        None,
        ge=1,
        description=(
            "The same budget in bytes of weights (each model's checkpoint files): loading past it evicts as "
            "`max_loaded_models` does. Unset: no limit."
        ),
    )
    public_metrics: bool = Field(False, description="`/metrics` answers without a key.")
    cors_allow_origins: list[str] = Field(
        default_factory=list, description=("Origins allowed to call from a browser. Unset: no cross-origin calls.")
    )
    tracing: bool = Field(
        False,
        description=(
            "OpenTelemetry spans, exported as BentoML's `tracing` configuration and the OTEL_* variables say. False "
            "sets OTEL_SDK_DISABLED=true."
        ),
    )
    max_client_batch_size: int = Field(2048, ge=1, description="Most inputs in one request.")
    # Before tokenizing: a huge text costs tokenizer time even though the model truncates it. A million
    # characters hold a document of `max_embed_len` tokens (131,072: about 600,000 characters of English).
    max_item_chars: int = Field(
        1_000_000,
        ge=1,
        description=("Most characters in one text (input, query, document), refused before tokenizing."),
    )
    max_request_tokens: int = Field(
        1_000_000,
        ge=1,
        description=(
            "Most tokens in one request after truncation, each window or slice of a long input counted whole "
            "(overlaps included); images and audio count their positions."
        ),
    )
    max_request_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Largest request body, in bytes (32 MiB).")
    max_response_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1024,
        description=(
            "Largest embeddings answer, in bytes (256 MiB), estimated from the token counts before any work: a "
            "request whose vectors (one per token for multi-vector output) would pass it is a 400."
        ),
    )
    request_timeout_s: float = Field(
        120.0, gt=0, description=("Past it a request gets a 504, and its inputs not yet run are dropped.")
    )
    model_call_resend_s: float = Field(
        10.0,
        gt=0,
        description=(
            "A model-service call with no answer this long past three times what its tokens took of late is sent "
            "again (then after twice as long each time), and the first answer is taken: a replica that stopped "
            "answering is routed around once its Service drops it."
        ),
    )
    max_concurrent_requests: int = Field(
        512, ge=1, description=("Most requests being answered; the next is a 429 before its body is read.")
    )
    max_queued_items: int = Field(
        8192,
        ge=1,
        description=(
            "Most inputs waiting on one model service; a request that would go past it is a 429 (an idle service "
            "takes any request)."
        ),
    )
    max_queued_tokens: int = Field(
        2_000_000,
        ge=1,
        description=("Most tokens waiting on one model service; past it, a 429 as for `max_queued_items`."),
    )
    max_media_items: int = Field(64, ge=1, description="Most images or audio clips in one request.")
    max_item_bytes: int = Field(20 * 1000 * 1000, ge=1, description="Largest image or audio file, in bytes.")
    max_image_pixels: int = Field(40_000_000, ge=16, description="Largest image, in pixels (width x height).")
    max_audio_seconds: float = Field(300.0, gt=0, description="Longest audio clip, in seconds.")
    allow_url_inputs: bool = Field(False, description="Images and audio may be given as http(s) URLs to fetch.")
    allow_private_urls: bool = Field(
        False, description=("URL inputs may point at private, loopback and link-local addresses.")
    )
    url_allow_networks: list[str] = Field(
        default_factory=list, description=("CIDR networks URL inputs may reach even when private.")
    )
    url_timeout_s: float = Field(10.0, gt=0, description="Timeout of one URL fetch.")
    cache_dir: str = Field(
        "~/.cache/embento",
        description=("Where ONNX exports, int8 quantizations and CTranslate2 conversions are kept across starts."),
    )
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description=(
            "Intra-op threads of each model service (torch, ONNX Runtime, CTranslate2). Unset: the cores the server "
            "may use, shared among its model services (one text model: all of them; text, reranker and CLIP on 2 "
            "cores: 1 each)."
        ),
    )
    # Chosen in bento/serving/placement.py; the limits hold across workers through gateway/shared_memory.py.
    gateway_workers: int | None = Field(
        None,
        ge=1,
        le=64,
        description=(
            "Gateway processes. Unset: with models on a GPU, the cores less 2 per GPU, at most 8; on CPU, 1 per 8 "
            "cores. Every limit holds for the server as a whole."
        ),
    )
    cache: CacheSettings = Field(
        default_factory=CacheSettings,
        description=("The embedding cache of the models with `cache: true`: the settings below."),
    )
    jobs: JobSettings = Field(
        default_factory=JobSettings, description=("Bulk jobs (`/v1/files`, `/v1/batches`): the settings below.")
    )
    auth: AuthSettings = Field(
        default_factory=AuthSettings, description=("Tenants' API keys and their limits: the settings below.")
    )
    limits: LimitSettings = Field(
        default_factory=LimitSettings, description=("Where the tenants' limits are counted: the settings below.")
    )
    log: LogSettings = Field(default_factory=LogSettings, description="The access log: the settings below.")
    image: ImageSettings = Field(
        default_factory=ImageSettings,
        description=(
            "Where `embento build` takes the image's base and packages from: the settings below. Read at build "
            "time only."
        ),
    )

    @field_validator("url_allow_networks", "api_key", "cors_allow_origins", mode="before")
    @classmethod
    def _list_from_text(cls, value: Any) -> Any:
        return split_list(value) if isinstance(value, str) else value

    @field_validator("api_key")
    @classmethod
    def _keys_are_not_blank(cls, value: list[SecretStr]) -> list[SecretStr]:
        if any(not key.get_secret_value().strip() for key in value):
            raise ValueError("api_key must not hold an empty key")
        return value

    @model_validator(mode="after")
    def _read_key_file(self) -> EmbentoConfig:
        if self.api_key_file:
            try:
                lines = Path(self.api_key_file).expanduser().read_text().splitlines()
            except OSError as exc:
                raise ValueError(f"api_key_file {self.api_key_file} cannot be read: {exc.strerror}") from None
            self.api_key = self.api_key + [SecretStr(line.strip()) for line in lines if line.strip()]
        return self

    def api_keys(self) -> tuple[str, ...]:
        return tuple(key.get_secret_value() for key in self.api_key)

    @field_validator("url_allow_networks")
    @classmethod
    def _networks_are_valid(cls, value: list[str]) -> list[str]:
        for network in value:
            ipaddress.ip_network(network, strict=False)  # ValueError names the bad one
        return value

    @model_validator(mode="after")
    def _names_are_unique(self) -> EmbentoConfig:
        names = [m.served_model_name for m in self.models]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"served_model_name must be unique; repeated: {duplicates}")
        return self

    @model_validator(mode="after")
    def _aliases_are_unique(self) -> EmbentoConfig:
        names = [m.served_model_name for m in self.models]
        aliases = [alias for m in self.models for alias in m.aliases]
        taken = sorted({a for a in aliases if aliases.count(a) > 1 or a in names})
        if taken:
            raise ValueError(f"an alias must name one model and no model's served_model_name; repeated: {taken}")
        return self

    def model(self, served_name: str) -> ModelConfig | None:
        return next((m for m in self.models if m.served_model_name == served_name), None)


# Environment variable name (after the prefix) -> field. Aliases mirror infinity's names.
MODEL_ENV_FIELDS: dict[str, str] = {
    **{
        name.upper(): name
        for name in ModelConfig.model_fields
        if name not in ("prompts", "input_type_prompts", "aliases")
    },
    "ENGINE": "backend",
    "POOLING_METHOD": "pooling",
}
# Fields that hold settings of their own (sections: EMBENTO_<SECTION>_<SETTING>).
SECTIONS = ("models", "image", "cache", "jobs", "auth", "limits", "log")
SERVER_ENV_FIELDS: dict[str, str] = {name.upper(): name for name in EmbentoConfig.model_fields if name not in SECTIONS}
IMAGE_ENV_FIELDS: dict[str, str] = {name.upper(): name for name in ImageSettings.model_fields}
# EMBENTO_CACHE is a model's `cache`; the cache settings are EMBENTO_CACHE_<SETTING>.
CACHE_ENV_FIELDS: dict[str, str] = {f"CACHE_{name.upper()}": name for name in CacheSettings.model_fields}
JOBS_ENV_FIELDS: dict[str, str] = {f"JOBS_{name.upper()}": name for name in JobSettings.model_fields}
AUTH_ENV_FIELDS: dict[str, str] = {f"AUTH_{name.upper()}": name for name in AuthSettings.model_fields}
LIMITS_ENV_FIELDS: dict[str, str] = {f"LIMITS_{name.upper()}": name for name in LimitSettings.model_fields}
LOG_ENV_FIELDS: dict[str, str] = {f"LOG_{name.upper()}": name for name in LogSettings.model_fields}


def env_names(env_suffix: str) -> list[str]:
    """Every variable (after the prefix) that sets the same field as `env_suffix`, aliases included."""
    field = MODEL_ENV_FIELDS.get(env_suffix) or SERVER_ENV_FIELDS.get(env_suffix)
    if field is None:
        return [env_suffix]
    table = MODEL_ENV_FIELDS if env_suffix in MODEL_ENV_FIELDS else SERVER_ENV_FIELDS
    return [name for name, target in table.items() if target == field]


def split_list(value: str) -> list[str]:
    """`a;b;` -> ['a', 'b']: infinity's list syntax, trailing separator allowed."""
    items = value.split(";")
    if items and items[-1] == "":
        items.pop()
    return [item.strip() for item in items]


def _apply_model_env(models: list[dict[str, Any]], env: Mapping[str, str]) -> list[dict[str, Any]]:
    if (ids := env.get(ENV_PREFIX + "MODEL_ID")) is not None:
        models = [{"model_id": model_id} for model_id in split_list(ids)]
    for suffix, field in MODEL_ENV_FIELDS.items():
        raw = env.get(ENV_PREFIX + suffix)
        if raw is None or field == "model_id":
            continue
        values = split_list(raw)
        if len(values) == 1:
            values = values * len(models)
        if len(values) != len(models):
            raise ConfigError(
                f"{ENV_PREFIX}{suffix} has {len(values)} values for {len(models)} models; "
                "give one value for all, or one per model"
            )
        for model, value in zip(models, values):
            model[field] = value
    return models


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def bento_info(cwd: Path) -> dict[str, Any]:
    """The `bento.yaml` of the Bento whose code runs in `cwd`; {} outside a Bento.

    BentoML imports a Bento's code with `<bento>/src` as the working directory, beside its `bento.yaml`.
    """
    bento_file = cwd.parent / "bento.yaml"
    if cwd.name != "src" or not bento_file.is_file():
        return {}
    return yaml.safe_load(bento_file.read_text()) or {}


def bento_config(cwd: Path) -> dict[str, Any] | None:
    """The configuration the Bento in `cwd` was built with, as its `bento.yaml` records it; None outside a Bento
    and for Bentos built before it was recorded (those carry only their `src/embento.yaml`)."""
    for env in bento_info(cwd).get("envs") or []:
        if env.get("name") == BENTO_CONFIG_ENV:
            return json.loads(env["value"])
    return None


def carried(config: EmbentoConfig, exclude_defaults: bool = False) -> dict[str, Any]:
    """What a Bento carries of `config`: all but the API keys and the Redis and database URLs (which may hold
    passwords), secrets of the deployment (set where it runs), and the image settings, which only the build reads (the
    Bento's arguments and labels record them)."""
    return config.model_dump(
        mode="json",
        exclude={
            "api_key": True,
            "api_key_file": True,
            "image": True,
            "cache": {"redis_url"},
            "jobs": {"database_url"},
            "limits": {"redis_url"},
        },
        exclude_defaults=exclude_defaults,
    )


def carried_text(config: EmbentoConfig) -> str:
    """`carried`, as the one-line JSON recorded in a Bento's `bento.yaml`."""
    return json.dumps(carried(config, exclude_defaults=True), separators=(",", ":"))


def load_config(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> EmbentoConfig:
    """Build and validate the configuration from defaults, the YAML file and the environment. In a Bento, the
    configuration it was built with stands for the file, unless EMBENTO_CONFIG names another."""
    env = os.environ if env is None else env
    cwd = cwd or Path.cwd()
    explicit = env.get(ENV_PREFIX + "CONFIG")
    path = Path(explicit) if explicit else cwd / CONFIG_FILE_NAME
    if explicit and not path.is_file():
        raise ConfigError(f"{ENV_PREFIX}CONFIG points at {path}, which is not a file")
    carried = None if explicit else bento_config(cwd)
    data = carried if carried is not None else _read_yaml(path) if path.is_file() else {}

    models = [dict(m) for m in data.get("models", [{}])]
    data["models"] = _apply_model_env(models, env)
    for suffix, field in SERVER_ENV_FIELDS.items():
        if (value := env.get(ENV_PREFIX + suffix)) is not None:
            data[field] = value
    sections = (
        ("image", IMAGE_ENV_FIELDS),
        ("cache", CACHE_ENV_FIELDS),
        ("jobs", JOBS_ENV_FIELDS),
        ("auth", AUTH_ENV_FIELDS),
        ("limits", LIMITS_ENV_FIELDS),
        ("log", LOG_ENV_FIELDS),
    )
    for section, fields in sections:
        for suffix, field in fields.items():
            if (value := env.get(ENV_PREFIX + suffix)) is not None:
                data[section] = {**(data.get(section) or {}), field: value}
    try:
        return EmbentoConfig.model_validate(data)
    except ValidationError as exc:
        variables = Variables(env, ENV_PREFIX, {"models": MODEL_ENV_FIELDS, "": SERVER_ENV_FIELDS, **dict(sections)})
        origin = "the Bento's configuration" if carried is not None else str(path)
        raise invalid_settings(exc, EmbentoConfig, variables, origin) from exc


@lru_cache(maxsize=1)
def get_config() -> EmbentoConfig:
    """The process-wide configuration, read once."""
    return load_config()
