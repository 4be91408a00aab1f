"""ColBERT text models in PyLate's layout: their settings, and queries and documents framed as PyLate frames them.

PyLate tokenizes a text to its length less one, puts its prefix token (`[Q] `, `[D] `) after the first special
token, and pads a query to `query_length` with the mask token (query expansion): each of those positions gets a
vector too, attended to or not as `attend_to_expansion_tokens` says. A document's tokens in `skiplist_words`
(punctuation by default) get none.

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): a query's or document's
tokens past its length with truncation off are known only once it is tokenized.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from config.errors import InvalidInput
from models.base import Truncation
from models.preprocessing.single_texts import SingleTexts
from models.resolve import read_json

SETTINGS_FILE = "config_sentence_transformers.json"


@dataclass(frozen=True)
class ColbertSettings:
    """PyLate's settings as its `ColBERT` reads them from the folder, with its defaults for what is missing."""

    query_prefix: str = "[Q] "
    document_prefix: str = "[D] "
    query_length: int = 32
    document_length: int = 180
    do_query_expansion: bool = True
    attend_to_expansion_tokens: bool = False
    skiplist_words: tuple[str, ...] = tuple(string.punctuation)

    @classmethod
    def read(cls, folder: Path) -> ColbertSettings:
        declared = {
            name: value
            for name, value in read_json(folder / SETTINGS_FILE).items()
            if name in cls.__dataclass_fields__ and value is not None
        }
        settings = cls(**{**declared, "skiplist_words": tuple(declared.get("skiplist_words", cls.skiplist_words))})
        # PyLate: without expansion there are no expansion tokens to attend to
        return settings if settings.do_query_expansion else replace(settings, attend_to_expansion_tokens=False)

    @property
    def longest(self) -> int:
        return max(self.query_length, self.document_length)


def token_id(tokenizer: Any, token: str) -> int | None:
    """A prefix's token id ('' means no prefix; PyLate added the prefixes to the vocabulary when it saved)."""
    return tokenizer.convert_tokens_to_ids(token) if token else None


def expansion_token(tokenizer: Any) -> int:
    """What PyLate pads queries with: the mask token, else EOS (a decoder), else the pad token."""
    for candidate in (tokenizer.mask_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id):
        if candidate is not None:
            return candidate
    raise ValueError("the tokenizer has no mask, EOS or pad token to expand queries with")


class ColbertTexts:
    """Queries and documents to token ids, each with its count of trailing expansion tokens."""

    def __init__(self, texts: SingleTexts, tokenizer: Any, settings: ColbertSettings) -> None:
        self._texts = texts
        self._settings = settings
        self._prefixes = {
            True: token_id(tokenizer, settings.query_prefix),
            False: token_id(tokenizer, settings.document_prefix),
        }
        self._expansion = expansion_token(tokenizer)

    def encode(
        self, texts: list[str], is_query: bool, prompt: str = "", truncation: Truncation = Truncation()
    ) -> tuple[list[list[int]], list[int]]:
        settings, prefix = self._settings, self._prefixes[is_query]
        length = settings.query_length if is_query else settings.document_length
        limit = min(length - (prefix is not None), truncation.max_tokens or length)
        # Truncation off: refused here, where the prefix is known (a text cut one token past the limit is over it).
        encoded = self._texts.encode(
            texts, prompt, replace(truncation, enabled=True, max_tokens=limit + (not truncation.enabled))
        )
        too_long = next((i for i, ids in enumerate(encoded) if len(ids) > limit), None)
        if too_long is not None:
            raise InvalidInput(
                too_long,
                f"is longer than this model takes per {'query' if is_query else 'document'}: "
                f"{limit + (prefix is not None)} tokens (truncation is off)",
            )
        if prefix is not None:
            encoded = [ids[:1] + [prefix] + ids[1:] for ids in encoded]
        if not (is_query and settings.do_query_expansion):
            return encoded, [0] * len(encoded)
        expansions = [max(0, length - len(ids)) for ids in encoded]
        return [ids + [self._expansion] * count for ids, count in zip(encoded, expansions)], expansions
