"""How a text checkpoint wants its input prepared, read from its sentence-transformers files.

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): the prompts a
`prompt_name`, an `input_type` or a task picks among (and an instruction meets) are the checkpoint's files'
(`TextSettings.request_prompt`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from config.errors import ConfigError, InvalidRequest
from config.settings import ModelConfig
from models.resolve import read_json

# Tokenizers without a real limit report this sentinel (transformers' VERY_LARGE_INTEGER is larger).
_NO_LIMIT = 1_000_000
# The limit when neither the tokenizer nor the model's configuration gives one (rotary or relative positions).
_DEFAULT_LIMIT = 512
# Text towers whose learned positions start after the padding index, as RoBERTa's do: the position ids of a
# text run from pad_token_id + 1, so a table of P positions takes P - pad_token_id - 1 tokens (514 -> 512).
# transformers' text encoders that call `create_position_ids_from_input_ids`; CLAP's and AltCLIP's text
# towers are RoBERTa and XLM-R.
_PADDING_OFFSET_TYPES = frozenset(
    {
        "roberta",
        "xlm-roberta",
        "xlm-roberta-xl",
        "roberta-prelayernorm",
        "camembert",
        "data2vec-text",
        "mpnet",
        "longformer",
        "luke",
        "ibert",
        "lilt",
        "markuplm",
        "layoutlmv3",
        "xmod",
        "clap_text_model",
        "altclip_text_model",
        "bridgetower_text_model",
    }
)
# The instruction-query prompt of today's decoder embedders (Qwen3-Embedding, gte-Qwen2, e5-mistral):
# `Instruct: <task>\nQuery:`, with or without a space after the colon.
_INSTRUCT_PROMPT = re.compile(r"Instruct: .*\nQuery:( ?)", re.DOTALL)
# Cohere's input types and the prompt names checkpoints give them, first match wins: nomic's own names,
# e5/Qwen3-Embedding's query/passage/document, jina's retrieval.* tasks.
_INPUT_TYPE_PROMPT_NAMES = {
    "search_query": ("search_query", "query", "retrieval.query"),
    "search_document": ("search_document", "document", "passage", "retrieval.passage"),
    "classification": ("classification",),
    "clustering": ("clustering",),
}


@dataclass(frozen=True)
class TextSettings:
    max_seq_length: int
    do_lower_case: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    instruction_template: str | None = None  # `{instruction}` marks where a request's instruction goes
    input_type_prompts: dict[str, str] = field(default_factory=dict)  # Cohere's input_type -> prompt name

    def instruction_prompt(self, instruction: str) -> str:
        """The prefix for a request's own instruction: the model's template filled in, else the instruction."""
        if self.instruction_template is None:
            return instruction
        return self.instruction_template.replace("{instruction}", instruction)

    def request_prompt(
        self, name: str | None, instruction: str | None = None, input_type: str | None = None, task: str | None = None
    ) -> str:
        """The prompt a request asks for: a named one (None: the task adapter's own where the model has a prompt
        named after it, as jina-embeddings-v3's, else the one for Cohere's `input_type`, else the default one), or
        its own instruction. An unknown name, or a name with an instruction, is a 400."""
        if name is None and instruction is None and task in self.prompts:
            name = task
        if name is None and input_type is not None:
            name = self.input_type_prompts.get(input_type)
        if instruction is not None:
            if name is not None:
                raise InvalidRequest("give prompt_name or instruction, not both", param="instruction")
            return self.instruction_prompt(instruction)
        try:
            return self.prompt(name)
        except KeyError:
            known = sorted(self.prompts) or "none"
            raise InvalidRequest(
                f"unknown prompt_name '{name}'; this model has: {known}", param="prompt_name"
            ) from None

    def prompt(self, name: str | None) -> str:
        """The prefix for a named prompt; None means the default prompt (or none)."""
        name = name if name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise KeyError(name)
        return self.prompts[name]


def is_sentence_transformers_folder(folder: Path) -> bool:
    return (folder / "modules.json").is_file()


def declares_chat_input(folder: Path) -> bool:
    """Whether the folder's Transformer module takes chat messages: sentence-transformers 5 saves that for a
    tokenizer with a chat template, and then renders every text as a user message."""
    return "message" in (read_json(folder / "sentence_bert_config.json").get("modality_config") or {})


def read_text_settings(
    folder: Path, cfg: ModelConfig, tokenizer_max_length: int | None, known_limit: int | None = None
) -> TextSettings:
    """Merge the folder's declarations with the configuration (configuration wins). `known_limit`: the window as
    the caller has it (a vision-language model's), instead of reading the text tower's."""
    st_config = read_json(folder / "sentence_bert_config.json")
    st_meta = read_json(folder / "config_sentence_transformers.json")
    max_length = (
        known_limit
        or cfg.max_seq_length
        or st_config.get("max_seq_length")
        or text_limit(folder, tokenizer_max_length, cfg.trust_remote_code)
    )
    prompts = {**(st_meta.get("prompts") or {}), **cfg.prompts}
    if cfg.default_prompt_name is not None and cfg.default_prompt_name not in prompts:
        raise ConfigError(
            f"default_prompt_name '{cfg.default_prompt_name}' of model '{cfg.served_model_name}' is not one of "
            f"its prompts {sorted(prompts)}"
        )
    default_prompt = cfg.default_prompt_name or st_meta.get("default_prompt_name") or None
    if default_prompt not in prompts:
        default_prompt = None
    prompts = {k: v for k, v in prompts.items() if v is not None}
    return TextSettings(
        max_seq_length=int(max_length),
        do_lower_case=bool(st_config.get("do_lower_case", False)),
        prompts=prompts,
        default_prompt_name=default_prompt,
        instruction_template=cfg.instruction_template or _declared_instruction_template(prompts),
        input_type_prompts=_input_type_prompts(prompts, cfg),
    )


def text_limit(folder: Path, tokenizer_max_length: int | None, trust_remote_code: bool = False) -> int:
    """The most tokens the checkpoint's text tower takes: the smaller of the tokenizer's limit (when it names
    one; many community tokenizers do not, and transformers then reports 1e30) and the positions the model
    has, less the ones its position scheme skips (RoBERTa's pad_token_id + 1). sentence-transformers caps
    the tokenizer's limit at `max_position_embeddings` too, but without the offset: a RoBERTa whose tokenizer
    names no limit fails there on a long text. The text tower is the model's own configuration for text
    models and its text configuration for CLIP, SigLIP, CLAP and ColPali (read by transformers, defaults
    included: `config.json` leaves out what equals them)."""
    from transformers import AutoConfig

    try:
        text = AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code).get_text_config()
        positions, model_type, pad_id = (
            getattr(text, "max_position_embeddings", None),
            text.model_type,
            getattr(text, "pad_token_id", None),
        )
    except (ValueError, KeyError, OSError):  # a model type this transformers does not know: its file as written
        raw = read_json(folder / "config.json")
        positions, model_type, pad_id = (
            raw.get("max_position_embeddings"),
            raw.get("model_type"),
            raw.get("pad_token_id"),
        )
    limits = [tokenizer_max_length or _NO_LIMIT]
    if isinstance(positions, int) and positions > 0:  # XLNet's -1: no limit
        offset = (pad_id if pad_id is not None else 1) + 1 if model_type in _PADDING_OFFSET_TYPES else 0
        limits.append(positions - offset)
    limit = min(limits)
    return int(limit) if limit < _NO_LIMIT else _DEFAULT_LIMIT


def _input_type_prompts(prompts: dict[str, str], cfg: ModelConfig) -> dict[str, str]:
    """Which prompt each Cohere input type uses: configured, else the first of its usual names the model has.
    An input type with none falls back to the default prompt."""
    unknown = {t: n for t, n in cfg.input_type_prompts.items() if n not in prompts}
    if unknown:
        raise ConfigError(
            f"input_type_prompts of model '{cfg.served_model_name}' names prompts it lacks: "
            f"{unknown}; its prompts are {sorted(prompts)}"
        )
    declared = {t: next((n for n in names if n in prompts), None) for t, names in _INPUT_TYPE_PROMPT_NAMES.items()}
    return {**{t: n for t, n in declared.items() if n is not None}, **cfg.input_type_prompts}


def _declared_instruction_template(prompts: dict[str, str]) -> str | None:
    """`Instruct: {instruction}\nQuery:` when one of the model's prompts has that form."""
    for prompt in prompts.values():
        if match := _INSTRUCT_PROMPT.fullmatch(prompt):
            return "Instruct: {instruction}\nQuery:" + match.group(1)
    return None
