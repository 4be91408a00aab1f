"""Causal language models that rerank: how a checkpoint says it is one, how its pair is written, and which
logits score it.

Three ways in, read from the files:
- sentence-transformers' `CrossEncoder` over a causal LM (`config_sentence_transformers.json` says
  CrossEncoder, the architecture is `*ForCausalLM`): its modules (Transformer with `text-generation`, then
  `LogitScore`) and its chat template say everything.
- Qwen3-Reranker as published: a bare Qwen3 causal LM whose model card gives the prompt and the yes/no
  formula. That format is built in here, as the card writes it.
- Any other causal LM, configured with `kind: rerank`, `chat_template` and `true_token` (`false_token`
  optional): a load error names what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.errors import ModelLoadError
from config.settings import ModelConfig
from models.resolve import read_json

# The card's system prompt; its first sentence marks a Qwen3-Reranker card (the card quotes it in Python
# source, where the rest is written with escaped quotes).
QWEN3_RERANKER_MARK = "Judge whether the Document meets the requirements based on the Query and the Instruct provided."
QWEN3_RERANKER_SYSTEM = QWEN3_RERANKER_MARK + ' Note that the answer can only be "yes" or "no".'
QWEN3_RERANKER_DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
# The card's prefix + "<Instruct>: ...\n<Query>: ...\n<Document>: ..." + suffix, as a chat template over the
# system (instruction), query and document messages that sentence-transformers writes a pair as.
QWEN3_RERANKER_TEMPLATE = (
    '{%- set ns = namespace(instruction="' + QWEN3_RERANKER_DEFAULT_INSTRUCTION + '", query="", document="") -%}'
    "{%- for message in messages -%}"
    '{%- if message.role == "system" %}{% set ns.instruction = message.content %}'
    '{%- elif message.role == "query" %}{% set ns.query = message.content %}'
    '{%- elif message.role == "document" %}{% set ns.document = message.content %}{% endif -%}'
    "{%- endfor -%}"
    '{{ "<|im_start|>system\\n' + QWEN3_RERANKER_SYSTEM.replace('"', '\\"') + '<|im_end|>\\n<|im_start|>user\\n" }}'
    '{{ "<Instruct>: " + ns.instruction + "\\n<Query>: " + ns.query + "\\n<Document>: " + ns.document }}'
    '{{ "<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n" }}'
)


@dataclass(frozen=True)
class CausalRerankFormat:
    """What a causal-LM reranker needs beyond its weights. None fields: the checkpoint's own files say it
    (its chat template; its `LogitScore` module)."""

    chat_template: str | None
    true_token: str | None
    false_token: str | None


def is_causal_lm(folder: Path) -> bool:
    return any(name.endswith("ForCausalLM") for name in read_json(folder / "config.json").get("architectures") or [])


def is_causal_cross_encoder(folder: Path) -> bool:
    """A sentence-transformers CrossEncoder folder over a causal LM."""
    declared = read_json(folder / "config_sentence_transformers.json").get("model_type")
    return declared == "CrossEncoder" and is_causal_lm(folder)


def has_qwen3_reranker_card(folder: Path) -> bool:
    readme = folder / "README.md"
    return is_causal_lm(folder) and readme.is_file() and QWEN3_RERANKER_MARK in readme.read_text(errors="replace")


def causal_rerank_format(folder: Path, cfg: ModelConfig) -> CausalRerankFormat:
    """The format of a causal-LM reranker (`models.kinds.model_scorer` says which are); configured settings
    win over what the files say. Raises `ModelLoadError` naming the settings a bare causal LM lacks."""
    template = _configured_template(cfg)
    if is_causal_cross_encoder(folder):
        return CausalRerankFormat(template, cfg.true_token, cfg.false_token)
    if has_qwen3_reranker_card(folder):
        # the card's yes/no unless configured; a configured true token alone scores with its own logit
        true_token = cfg.true_token or "yes"
        false_token = cfg.false_token or (None if cfg.true_token else "no")
        return CausalRerankFormat(template or QWEN3_RERANKER_TEMPLATE, true_token, false_token)
    missing = [name for name, value in (("chat_template", template), ("true_token", cfg.true_token)) if not value]
    if missing:
        raise ModelLoadError(
            f"'{cfg.model_id}' is a causal language model without sentence-transformers reranker files; to serve "
            f"it as a reranker, set {' and '.join(missing)} (a Jinja template rendering the system, query and "
            "document messages, and the token whose logit scores relevance; false_token is optional)"
        )
    return CausalRerankFormat(template, cfg.true_token, cfg.false_token)


def _configured_template(cfg: ModelConfig) -> str | None:
    """`chat_template` is the template itself, or a file holding it."""
    if cfg.chat_template is None or "{" in cfg.chat_template:
        return cfg.chat_template
    path = Path(cfg.chat_template).expanduser()
    if not path.is_file():
        raise ModelLoadError(
            f"chat_template of '{cfg.served_model_name}' is neither a Jinja template nor a file: {cfg.chat_template}"
        )
    return path.read_text()


def token_id(tokenizer: Any, token: str, setting: str, model_id: str) -> int:
    """The vocabulary id of one token (as written in the vocabulary, e.g. `yes`)."""
    vocab = tokenizer.get_vocab()
    if token not in vocab:
        raise ModelLoadError(f"{setting} '{token}' of '{model_id}' is not a token of its vocabulary")
    return int(vocab[token])
