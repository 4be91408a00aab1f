"""A checkpoint's fast tokenizer as the text encode paths share it: one copy per thread, the checkpoint's
lower-casing, and the model's token limit.

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): a text's tokens
past the limit with truncation off are known only once it is tokenized (`refuse_long`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config.errors import InvalidInput, ModelLoadError
from config.settings import ModelConfig
from models.base import Truncation
from models.preprocessing.per_thread import PerThread


def load_fast_tokenizer(folder: Path, cfg: ModelConfig) -> Any:
    """The checkpoint's transformers tokenizer, which must be a fast (Rust) one, with no padding or truncation
    of its own."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=cfg.trust_remote_code)
    except Exception as exc:
        raise ModelLoadError(f"cannot load the tokenizer of '{cfg.model_id}': {exc}") from exc
    if not tokenizer.is_fast:
        raise ModelLoadError(f"'{cfg.model_id}' has no fast tokenizer (tokenizer.json); it is required")
    # `tokenizer.json` may declare padding and truncation (all-MiniLM-L6-v2's pads every text to 128).
    # transformers resets both on each call; a direct call of the Rust tokenizer would apply them, so
    # they go now, before the per-thread copies are made, and each direct call sets its own truncation.
    tokenizer.backend_tokenizer.no_padding()
    tokenizer.backend_tokenizer.no_truncation()
    return tokenizer


class FastTokenizer:
    """Safe to use from several threads at once: `get()` gives the calling thread its own copy."""

    def __init__(self, template: Any, max_input_tokens: int, lower_case: bool) -> None:
        self.template = template  # read only; never encodes
        self._copies = PerThread(template)
        self.max_input_tokens = max_input_tokens
        self.lower_case = lower_case

    def get(self) -> Any:
        """This thread's copy, free to change its truncation settings."""
        return self._copies.get()

    def side(self, truncation: Truncation) -> str:
        return truncation.side or self.template.truncation_side

    def limit(self, truncation: Truncation) -> int:
        return min(self.max_input_tokens, truncation.max_tokens or self.max_input_tokens)

    def refuse_long(self, encoded: list[list[int]], limit: int) -> None:
        """Refuses the longest sequence when it is over `limit`: what truncation off means."""
        longest = max(range(len(encoded)), key=lambda i: len(encoded[i]))
        if len(encoded[longest]) > limit:
            allowed = (
                f"this model takes at most {limit}" if limit == self.max_input_tokens else f"max_tokens is {limit}"
            )
            raise InvalidInput(longest, f"is {len(encoded[longest])} tokens; {allowed} (truncation is off)")

    def count_tokens(self, text: str) -> int:
        """Untruncated length without special tokens, measured on the Rust tokenizer: transformers would
        warn about long text."""
        backend = self.get().backend_tokenizer
        backend.no_truncation()  # this thread's copy; the next call sets its own truncation again
        return len(backend.encode(text, add_special_tokens=False).ids)
