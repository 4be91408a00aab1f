"""Validated queries into model rows: texts through the model's tokenizer, images and audio fetched or decoded
and then through its processor. Large inputs are prepared off the event loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

from gateway.fetch import UrlFetcher
from gateway.media_inputs import load_item
from gateway.preprocessors import Preprocessors
from gateway.queries import ClassifyQuery, EmbedQuery, InputItem, RankQuery
from models.base import ModelInfo, ModelInput, Row, TokenizedText
from models.media import MediaLimits

T = TypeVar("T")
INLINE_TOKENIZE_LIMIT = 2048  # characters (or token ids) per request


class Rows:
    """Each operation's rows for the chosen model."""

    def __init__(self, preprocessors: Preprocessors, fetcher: UrlFetcher | None, limits: MediaLimits) -> None:
        self.preprocessors = preprocessors
        self.fetcher = fetcher
        self.limits = limits

    async def embed(self, info: ModelInfo, query: EmbedQuery) -> Sequence[Row]:
        if info.spec.preprocessor == "media":
            return await self.media(info, query.items)
        tokenizer, values = self.preprocessors.tokenizer(info), [item.value for item in query.items]
        prompt_length = 0
        if isinstance(values[0], str):
            prompt = tokenizer.prompt(query.prompt_name, query.instruction, query.input_type)
            prompt_length = tokenizer.prompt_length(prompt) if prompt else 0
            work = functools.partial(tokenizer.encode_texts, values, prompt, query.truncation)
        else:
            work = functools.partial(tokenizer.encode_ids, values, query.truncation)
        token_ids = await off_loop_if_large(work, sum(len(value) for value in values))
        return TokenizedText.rows(info.served_model_name, token_ids, prompt_length=prompt_length,
                                  normalize=query.normalize)

    async def pairs(self, info: ModelInfo, query: RankQuery) -> list[TokenizedText]:
        """(query, document) pairs for a cross-encoder (or a causal-LM scorer's chat template)."""
        documents = list(query.documents)
        work = functools.partial(self.preprocessors.tokenizer(info).encode_pairs, query.query, documents,
                                 query.instruction, query.truncation)
        size = len(query.query) * len(documents) + sum(map(len, documents))
        token_ids, segments = await off_loop_if_large(work, size)
        return TokenizedText.rows(info.served_model_name, token_ids, segments)

    async def classify(self, info: ModelInfo, query: ClassifyQuery) -> list[TokenizedText]:
        """Each text, or each (text, pair) where a second text is given."""
        tokenizer, texts, pairs = self.preprocessors.tokenizer(info), list(query.texts), query.pairs
        size = sum(map(len, texts)) + sum(len(pair or "") for pair in pairs or ())
        if pairs is not None and any(pair is not None for pair in pairs):
            work = functools.partial(tokenizer.encode_pair_list, texts, list(pairs), query.truncation)
            token_ids, segments = await off_loop_if_large(work, size)
        else:
            work = functools.partial(tokenizer.encode_texts, texts, "", query.truncation)
            token_ids, segments = await off_loop_if_large(work, size), None
        return TokenizedText.rows(info.served_model_name, token_ids, segments)

    async def media(self, info: ModelInfo, items: Sequence[InputItem]) -> list[ModelInput]:
        """Fetch or decode every item's bytes, then decode and process them off the event loop."""
        async def payload(index: int, item: InputItem) -> str | bytes:
            if item.modality == "text":
                return item.value  # type: ignore[return-value]
            where = f"input[{index}]"
            return await load_item(item.value, self.fetcher, self.limits.max_item_bytes, where)  # type: ignore[arg-type]

        payloads = await asyncio.gather(*(payload(i, item) for i, item in enumerate(items)))
        work = [(item.modality, value) for item, value in zip(items, payloads)]
        return await asyncio.to_thread(self.preprocessors.processor(info).encode, info.served_model_name, work,
                                       self.limits)


async def off_loop_if_large(work: Callable[[], T], size: int) -> T:
    """A thread hop costs more than tokenizing a few sentences; only big inputs leave the event loop."""
    if size <= INLINE_TOKENIZE_LIMIT:
        return work()
    return await asyncio.to_thread(work)
