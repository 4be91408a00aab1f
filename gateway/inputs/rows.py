"""Validated queries into model rows: texts through the model's tokenizer, images and audio fetched or decoded
and then through its processor. Large inputs are prepared off the event loop. It refuses nothing itself: an input
that fetching, decoding or a tokenizer refused is named here by its place in the body and its wire field
(`named_inputs`, `payloads`); `gateway.validation`'s docstring lists the modules that refuse it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from config.errors import InvalidInput, InvalidRequest
from gateway.inputs.fetch import UrlFetcher
from gateway.inputs.long_rows import LongTexts, Plan
from gateway.inputs.media import load_item
from gateway.inputs.preprocessors import Preprocessors
from gateway.queries import ClassifyQuery, ContextQuery, EmbedQuery, InputItem, LongInput, RankQuery
from gateway.representations import row_representations
from models.base import ModelInfo, ModelInput, Representation, TokenizedText
from models.media import MediaLimits
from models.preprocessing.text_tokenizer import TextTokenizer
from models.preprocessing.vl_processor import VisionLanguageProcessor

T = TypeVar("T")
INLINE_TOKENIZE_LIMIT = 2048  # characters (or token ids) per request
# One input's parts, in order (one for all but mixed inputs): a text, or an image's or audio clip's bytes.
Payload = tuple[str | bytes, ...]


class Rows:
    """Each operation's rows for the chosen model."""

    def __init__(self, preprocessors: Preprocessors, fetcher: UrlFetcher | None, limits: MediaLimits) -> None:
        self.preprocessors = preprocessors
        self.fetcher = fetcher
        self.limits = limits

    async def embed(self, info: ModelInfo, query: EmbedQuery) -> Plan:
        """A text model's rows (images and audio: `payloads`, then `processed`)."""
        with named_inputs(query.item_param, query.items_param):
            return await self._embed(info, query)

    async def _embed(self, info: ModelInfo, query: EmbedQuery) -> Plan:
        tokenizer, values = self.preprocessors.tokenizer(info), [item.value for item in query.items]
        if not isinstance(values[0], str):
            ids = [value for value in values if not isinstance(value, str)]  # all: never mixed with texts (wire)
            work = functools.partial(tokenizer.encode_ids, ids, query.truncation)
            token_ids = await off_loop_if_large(work, sum(len(value) for value in values))
            return Plan.direct(
                TokenizedText.rows(info.served_model_name, token_ids, normalize=query.normalize, task=query.task)
            )
        strings = [value for value in values if isinstance(value, str)]  # all of them, likewise
        prompt = tokenizer.prompt(query.prompt_name, query.instruction, query.input_type, query.task)
        size = sum(len(value) for value in values)
        if info.spec.encodes_roles:
            is_query = query.input_type == "search_query"
            return Plan.direct(await self.with_roles(info, strings, is_query, prompt, query))
        prompt_length = tokenizer.prompt_length(prompt) if prompt else 0
        if query.long_input is LongInput.MEAN:
            texts = long_texts(info, tokenizer, query)
            return await off_loop_if_large(
                lambda: Plan.joined(
                    [texts.windowed(query.item_param(i), text, prompt, prompt_length) for i, text in enumerate(strings)]
                ),
                size,
            )
        work = functools.partial(tokenizer.encode_texts, strings, prompt, query.truncation)
        token_ids = await off_loop_if_large(work, size)
        return Plan.direct(
            TokenizedText.rows(
                info.served_model_name,
                token_ids,
                prompt_length=prompt_length,
                normalize=query.normalize,
                representations=row_representations(query.representations, info),
                task=query.task,
            )
        )

    async def with_roles(
        self, info: ModelInfo, texts: list[str], is_query: bool, prompt: str, query: EmbedQuery | RankQuery
    ) -> list[TokenizedText]:
        """A model that encodes queries and documents apart (ColBERT): each text framed for its role."""
        work = functools.partial(
            self.preprocessors.tokenizer(info).encode_roles, texts, is_query, prompt, query.truncation
        )
        token_ids, expansions = await off_loop_if_large(work, sum(map(len, texts)))
        return [
            TokenizedText(model=info.served_model_name, input_ids=ids, is_query=is_query, expansion=expansion)
            for ids, expansion in zip(token_ids, expansions)
        ]

    async def ranked(
        self,
        info: ModelInfo,
        texts: list[str],
        is_query: bool,
        query: RankQuery,
        representations: tuple[Representation, ...] | None,
    ) -> list[TokenizedText]:
        """Texts of one role (the query, or documents) for a model that ranks by its own outputs (ColBERT,
        BGE-M3)."""
        if not texts:
            return []
        if info.spec.encodes_roles:
            return await self.with_roles(info, texts, is_query, "", query)
        work = functools.partial(self.preprocessors.tokenizer(info).encode_texts, texts, "", query.truncation)
        token_ids = await off_loop_if_large(work, sum(map(len, texts)))
        return TokenizedText.rows(
            info.served_model_name, token_ids, representations=row_representations(representations, info)
        )

    async def in_context(self, info: ModelInfo, query: ContextQuery) -> list[Plan]:
        """Late chunking: a plan per document for its chunks, the document encoded whole (in slices past the
        limit)."""
        tokenizer, embed = self.preprocessors.tokenizer(info), query.embed
        prompt = tokenizer.prompt(embed.prompt_name, embed.instruction, embed.input_type, embed.task)
        texts = long_texts(info, tokenizer, embed)
        chunking = query.auto_chunking

        def where(index: int) -> str:  # OpenAI's late chunking: the inputs are one document's chunks
            return (
                f"{embed.items_param} (one document)"
                if embed.long_input is LongInput.LATE_CHUNKING
                else f"{embed.items_param}[{index}]"
            )

        def plans() -> list[Plan]:
            return [
                texts.in_context(where(i), chunks, prompt)
                if chunking is None
                else texts.auto_chunked(where(i), chunks[0], prompt, chunking)
                for i, chunks in enumerate(query.documents())
            ]

        return await off_loop_if_large(plans, sum(len(item.value) for item in embed.items))

    async def pairs(self, info: ModelInfo, query: RankQuery) -> list[TokenizedText]:
        """(query, document) pairs for a cross-encoder (or a causal-LM scorer's chat template)."""
        documents = list(query.documents)
        work = functools.partial(
            self.preprocessors.tokenizer(info).encode_pairs, query.query, documents, query.instruction, query.truncation
        )
        size = len(query.query) * len(documents) + sum(map(len, documents))
        with named_inputs(lambda index: f"{query.documents_param}[{index}]", query.documents_param):
            token_ids, segments = await off_loop_if_large(work, size)
        return TokenizedText.rows(info.served_model_name, token_ids, segments)

    async def classify(self, info: ModelInfo, query: ClassifyQuery) -> list[TokenizedText]:
        """Each text, or each (text, pair) where a second text is given."""
        tokenizer, texts, pairs = self.preprocessors.tokenizer(info), list(query.texts), query.pairs
        size = sum(map(len, texts)) + sum(len(pair or "") for pair in pairs or ())
        with named_inputs(lambda index: f"{query.texts_param}[{index}]", query.texts_param):
            if pairs is not None and any(pair is not None for pair in pairs):
                work = functools.partial(tokenizer.encode_pair_list, texts, list(pairs), query.truncation)
                token_ids, segments = await off_loop_if_large(work, size)
            else:
                text_work = functools.partial(tokenizer.encode_texts, texts, "", query.truncation)
                token_ids, segments = await off_loop_if_large(text_work, size), None
        return TokenizedText.rows(info.served_model_name, token_ids, segments)

    async def payloads(
        self, items: Sequence[InputItem], param: str = "input", where: Callable[[int], str] | None = None
    ) -> list[Payload]:
        """Each item's parts: its text, or its file's bytes (a data URI's decoded, a URL's fetched). An item that
        cannot be loaded is refused naming `where(index)` (`param[index]` unless given) and the field `param`."""

        async def payload(place: str, part: InputItem) -> str | bytes:
            assert isinstance(part.value, str)  # token ids are refused for media models (gateway/validation.py)
            if part.modality == "text":
                return part.value
            try:
                return await load_item(part.value, self.fetcher, self.limits.max_item_bytes, place)
            except InvalidRequest as exc:  # about this item alone: the field that holds it is the one at fault
                raise InvalidRequest(exc.message, param=param) from None

        async def parts(index: int, item: InputItem) -> Payload:
            place = where(index) if where is not None else f"{param}[{index}]"
            return tuple(await asyncio.gather(*(payload(place, part) for part in item.all_parts)))

        return list(await asyncio.gather(*(parts(i, item) for i, item in enumerate(items))))

    def media_prompt(self, info: ModelInfo, query: EmbedQuery) -> str:
        """The prompt a media model frames this query's inputs in: a vision-language model's system prompt (named,
        for the `input_type`, or the request's instruction); "" for the others, which take none."""
        processor = self.preprocessors.processor(info)
        if not isinstance(processor, VisionLanguageProcessor):
            return ""
        return processor.prompt(query.prompt_name, query.instruction, query.input_type)

    async def processed(
        self,
        info: ModelInfo,
        items: Sequence[InputItem],
        payloads: Sequence[Payload],
        prompt: str = "",
        wheres: Sequence[str] | None = None,
        param: str = "input",
    ) -> list[ModelInput]:
        """The items' `payloads` decoded and through the model's processor, off the event loop: a model that
        takes mixed inputs gets every part of each (under `prompt`), the others the one part each of theirs has
        (validation). An item that cannot be decoded is named by `wheres` (its place in the body) and `param`."""
        work = [
            tuple((part.modality, value) for part, value in zip(item.all_parts, payload))
            for item, payload in zip(items, payloads)
        ]
        processor = self.preprocessors.processor(info)
        model = info.served_model_name
        if isinstance(processor, VisionLanguageProcessor):
            return await asyncio.to_thread(processor.encode, model, work, self.limits, prompt, wheres, param)
        singles = [parts[0] for parts in work]
        return await asyncio.to_thread(processor.encode, model, singles, self.limits, wheres, param)

    async def media_pairs(
        self, info: ModelInfo, query: RankQuery, documents: Sequence[InputItem], payloads: Sequence[Payload]
    ) -> list[ModelInput]:
        """(query, document) pairs for a vision-language reranker: each document's text or decoded image with the
        query, through the checkpoint's chat template, off the event loop."""
        processor = self.preprocessors.processor(info)
        assert isinstance(processor, VisionLanguageProcessor), "only vision-language models score media pairs"
        work = [
            tuple((part.modality, value) for part, value in zip(item.all_parts, payload))
            for item, payload in zip(documents, payloads)
        ]
        return await asyncio.to_thread(
            processor.pair_rows,
            info.served_model_name,
            query.query,
            work,
            query.instruction,
            self.limits,
            query.documents_param,
        )


@contextlib.contextmanager
def named_inputs(where: Callable[[int], str], param: str) -> Iterator[None]:
    """An input a tokenizer refused by its position (`InvalidInput`) named by its place in the body, in the
    client family's own field names."""
    try:
        yield
    except InvalidInput as exc:
        raise InvalidRequest(f"{where(exc.index)} {exc.problem}", param=param) from None


def long_texts(info: ModelInfo, tokenizer: TextTokenizer, query: EmbedQuery) -> LongTexts:
    """The long-text plans of this model under this query's limit and normalization."""
    normalize = info.normalized if query.normalize is None else query.normalize
    return LongTexts(
        info.served_model_name, tokenizer, tokenizer.limit(query.truncation), normalize, query.items_param, query.task
    )


async def off_loop_if_large(work: Callable[[], T], size: int) -> T:
    """A thread hop costs more than tokenizing a few sentences; only big inputs leave the event loop."""
    if size <= INLINE_TOKENIZE_LIMIT:
        return work()
    return await asyncio.to_thread(work)
