"""The gateway's core: one typed query per operation (`gateway.queries`) answered with one result
(`gateway.results`). Each operation chooses the model, validates the query against it (`gateway.validation`), prepares
its rows (`gateway.inputs.rows`) and runs them through the model's service (`gateway.queue.model_calls`). The wire
adapters (`gateway/wire/`) turn their bodies into queries and the results into their answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from config.settings import EmbentoConfig
from gateway.cache.contexts import (
    IMAGE_RANK_CONTEXT,
    classify_context,
    classify_items,
    embed_context,
    input_items,
    media_pairs_context,
    pairs_context,
    pairs_items,
    ranked_context,
    ranked_items,
)
from gateway.cache.tiers import Answered, Computed, EmbeddingCache
from gateway.inputs.fetch import UrlFetcher
from gateway.inputs.long_rows import Plan
from gateway.inputs.preprocessors import Preprocessors
from gateway.inputs.rows import Rows
from gateway.metrics import current_trace
from gateway.queries import (
    ClassifyQuery,
    ContextQuery,
    DecodeQuery,
    EmbedQuery,
    InputItem,
    LongInput,
    RankQuery,
    TokenizeQuery,
)
from gateway.queue.model_calls import ModelCalls
from gateway.representations import asked_parts, representations_for, score_mode, scores_by_mode
from gateway.results import Classified, ContextEmbeddings, Embeddings, Ranking, Tokens
from gateway.served.models import ServedModels
from gateway.served.registry import ModelRegistry
from gateway.served.requests import RequestModels
from gateway.validation import (
    check_classify,
    check_context,
    check_decode,
    check_embed,
    check_rank,
    check_request_tokens,
    check_response_size,
    check_tokenize,
)
from models.base import ModelInfo, Representation, Row
from models.kinds import KindSpec, RankBy
from models.media import MediaLimits
from models.preprocessing.text_tokenizer import TextTokenizer
from models.scores import activate, rank, similarities

# What a way of ranking answers: the computed (or cached) outputs, each document's score, and its scores by every
# score mode where the model has several (`return_scores`).
Scored = tuple[Answered, np.ndarray, dict[str, list[float]] | None]


class Engine:
    """Queries through the served models (`registry`, filled at warm-up) and their services (`calls`)."""

    def __init__(
        self,
        config: EmbentoConfig,
        registry: ModelRegistry,
        calls: ModelCalls,
        preprocessors: Preprocessors,
        fetcher: UrlFetcher | None,
        cache: EmbeddingCache,
        served: RequestModels | None = None,
    ) -> None:
        """`served`: the served models' request side (without a server's files: the configured set, fixed)."""
        self.config = config
        self.served = served or ServedModels(config, registry=registry).requests
        self.cache = cache
        self.registry = registry
        self.calls = calls
        self.preprocessors = preprocessors
        self.limits = MediaLimits(config.max_item_bytes, config.max_image_pixels, config.max_audio_seconds)
        self.rows = Rows(preprocessors, fetcher, self.limits)
        # One way to rank per `KindSpec.rank_by`.
        self._rankers: dict[RankBy, Callable[[ModelInfo, RankQuery], Awaitable[Scored]]] = {
            "pair-logits": self._rank_by_pair_logits,
            "score-modes": self._rank_by_score_modes,
            "image-similarity": self._rank_by_image_similarity,
            "multimodal-pair-logits": self._rank_by_multimodal_pairs,
        }

    async def embed(self, query: EmbedQuery) -> Embeddings:
        self.served.check_keep_alive(query.keep_alive_s)  # before any work: a 403 runs nothing
        if query.long_input is LongInput.LATE_CHUNKING:
            return (await self.embed_in_context(ContextQuery(query, (len(query.items),)))).embeddings
        info = await self.served.model(query.model, query.capability)
        quantizer = self.registry.quantizers.get(info.served_model_name)
        query = check_embed(query, info, self.config, quantizer, self.registry.infos)
        if info.spec.takes_media:
            prompt = self.rows.media_prompt(info, query)
            context = embed_context(query, prompt)
            answered = await self._media_outputs(
                info, query.items, context, prompt, query.items_param, query.item_param
            )
        else:
            answered = await self.cache.answer(
                info.served_model_name,
                self._text_keys(info, query),
                len(query.items),
                lambda at: self._embed_texts(info, _picked(query, at)),
            )
        if answered.cached_tokens:  # the misses were checked before they ran; with the hits, the whole answer
            check_response_size(query, info, answered.tokens, self.config.max_response_bytes)
        outputs = answered.outputs
        current_trace().usage_tokens = answered.tokens
        self.served.keep_alive(info.served_model_name, query.keep_alive_s)
        return Embeddings(
            query, info, outputs, answered.tokens, quantizer, asked_parts(query, info, outputs), answered.cached_tokens
        )

    async def _embed_texts(self, info: ModelInfo, query: EmbedQuery) -> Computed:
        plan = await self.rows.embed(info, query)
        check_response_size(query, info, plan.tokens, self.config.max_response_bytes)
        check_request_tokens(plan.rows, self.config.max_request_tokens)
        outputs = plan.join(await self.calls.run(info, plan.rows))
        assert plan.output_tokens is not None, "every embedding plan but late chunking's owns its rows"
        return Computed(outputs, plan.output_tokens)

    async def _media_outputs(
        self,
        info: ModelInfo,
        items: Sequence[InputItem],
        context: dict[str, Any],
        prompt: str,
        param: str,
        where: Callable[[int], str],
    ) -> Answered:
        """Images and audio are keyed by their files' bytes: fetched (or decoded) first, processed if missed. One
        that cannot be loaded or decoded is named by its place `where` and its field `param`."""
        payloads = await self.rows.payloads(items, param, where)
        keys = self.cache.keys(info.served_model_name, context, input_items(items, payloads))

        async def compute(at: list[int]) -> Computed:  # `at`: the items the cache missed, by their request index
            picked = [items[i] for i in at], [payloads[i] for i in at]
            places = [where(i) for i in at]
            return await self._run(info, await self.rows.processed(info, *picked, prompt, places, param))

        return await self.cache.answer(info.served_model_name, keys, len(items), compute)

    async def _run(self, info: ModelInfo, rows: Sequence[Row]) -> Computed:
        """Rows with one output each through the model, with each one's tokens."""
        check_request_tokens(rows, self.config.max_request_tokens)
        return Computed(await self.calls.run(info, rows), [row.length for row in rows])

    def _text_keys(self, info: ModelInfo, query: EmbedQuery) -> list[bytes] | None:
        """Each text's (or token-id input's) cache key; None when the request leaves the cache alone, and then
        no prompt is worked out."""
        if not self.cache.enabled(info.served_model_name):
            return None
        applied = ""  # token ids take no prompt
        if isinstance(query.items[0].value, str):
            applied = self.preprocessors.tokenizer(info).prompt(
                query.prompt_name, query.instruction, query.input_type, query.task
            )
        return self.cache.keys(info.served_model_name, embed_context(query, applied), input_items(query.items))

    async def embed_in_context(self, query: ContextQuery) -> ContextEmbeddings:
        """Late chunking: each document's chunks embedded in the context of the whole document."""
        self.served.check_keep_alive(query.embed.keep_alive_s)
        info = await self.served.model(query.embed.model, query.embed.capability)
        quantizer = self.registry.quantizers.get(info.served_model_name)
        query = check_context(query, info, self.config, quantizer, self.registry.infos)
        documents = await self.rows.in_context(info, query)
        plan = Plan.joined(documents)
        check_request_tokens(plan.rows, self.config.max_request_tokens)
        outputs = plan.join(await self.calls.run(info, plan.rows))
        counts = [
            size if document.texts is None else len(document.texts)
            for document, size in zip(documents, query.document_sizes)
        ]
        current_trace().usage_tokens = plan.tokens
        self.served.keep_alive(info.served_model_name, query.embed.keep_alive_s)
        return ContextEmbeddings(Embeddings(query.embed, info, outputs, plan.tokens, quantizer), counts, plan.texts)

    async def rank(self, query: RankQuery) -> Ranking:
        """Score every (query, document) pair, best first: a cross-encoder's (or causal-LM scorer's) activated
        logits; for a model that ranks by its own outputs, their score mode; for image documents the
        similarity of their embeddings with the query's."""
        self.served.check_keep_alive(query.keep_alive_s)  # before any work: a 403 runs nothing
        info = await self.served.model(query.model, "rerank")
        check_rank(query, info, self.config)
        assert info.spec.rank_by is not None, "every kind that reranks declares how (`KindSpec.rank_by`)"
        answered, scores, by_mode = await self._rankers[info.spec.rank_by](info, query)
        current_trace().usage_tokens = answered.tokens
        self.served.keep_alive(info.served_model_name, query.keep_alive_s)
        return Ranking(
            query,
            info,
            rank(scores, query.top_n),
            scores.tolist(),
            answered.tokens,
            by_mode if query.return_scores else None,
            answered.cached_tokens,
        )

    async def _rank_by_pair_logits(self, info: ModelInfo, query: RankQuery) -> Scored:
        answered = await self._score_pairs(info, query)
        return answered, activate(np.stack(answered.outputs), query.activation or info.activation)[:, 0], None

    async def _rank_by_score_modes(self, info: ModelInfo, query: RankQuery) -> Scored:
        mode = score_mode(query, info)
        answered = await self._ranked_outputs(info, query, representations_for(mode, info))
        return answered, *scores_by_mode(info, query, mode, answered.outputs)

    async def _rank_by_image_similarity(self, info: ModelInfo, query: RankQuery) -> Scored:
        items = [InputItem("text", query.query), *(InputItem("image", document) for document in query.documents)]

        def where(index: int) -> str:  # the query, then each document
            return f"{query.documents_param}[{index - 1}]" if index else "query"

        answered = await self._media_outputs(info, items, IMAGE_RANK_CONTEXT, "", query.documents_param, where)
        return answered, similarities(answered.outputs[0], answered.outputs[1:], info.multi_vector), None

    async def _rank_by_multimodal_pairs(self, info: ModelInfo, query: RankQuery) -> Scored:
        answered = await self._score_media_pairs(info, query)
        return answered, activate(np.stack(answered.outputs), query.activation or info.activation)[:, 0], None

    async def _score_pairs(self, info: ModelInfo, query: RankQuery) -> Answered:
        """A cross-encoder's (or causal-LM scorer's) logit per (query, document) pair, each pair cached."""

        async def compute(at: list[int]) -> Computed:
            return await self._run(
                info, await self.rows.pairs(info, replace(query, documents=tuple(query.documents[i] for i in at)))
            )

        keys = self.cache.keys(info.served_model_name, pairs_context(query), pairs_items(query))
        return await self.cache.answer(info.served_model_name, keys, len(query.documents), compute)

    async def _score_media_pairs(self, info: ModelInfo, query: RankQuery) -> Answered:
        """A vision-language reranker's logit per (query, document) pair, each pair cached by the document's text
        or image bytes."""
        documents = [query.document_item(index) for index in range(len(query.documents))]
        payloads = await self.rows.payloads(documents, query.documents_param)

        async def compute(at: list[int]) -> Computed:
            picked = [documents[i] for i in at], [payloads[i] for i in at]
            return await self._run(info, await self.rows.media_pairs(info, query, *picked))

        keys = self.cache.keys(info.served_model_name, media_pairs_context(query), input_items(documents, payloads))
        return await self.cache.answer(info.served_model_name, keys, len(documents), compute)

    async def _ranked_outputs(
        self, info: ModelInfo, query: RankQuery, representations: tuple[Representation, ...] | None
    ) -> Answered:
        """The query's outputs, then each document's, of a model that ranks by its own (ColBERT, BGE-M3); each
        text cached in its role."""
        texts = [query.query, *query.documents]

        async def compute(at: list[int]) -> Computed:  # `at` is ascending: the query, if asked, comes first
            rows = [
                *await self.rows.ranked(info, [texts[i] for i in at if i == 0], True, query, representations),
                *await self.rows.ranked(info, [texts[i] for i in at if i > 0], False, query, representations),
            ]
            return await self._run(info, rows)

        keys = self.cache.keys(info.served_model_name, ranked_context(query, representations), ranked_items(query))
        return await self.cache.answer(info.served_model_name, keys, len(texts), compute)

    async def classify(self, query: ClassifyQuery) -> Classified:
        """Every label's score per text (or pair), by the query's activation or else the model's own."""
        info = await self.served.model(query.model, "classify")
        check_classify(query, self.config)

        async def compute(at: list[int]) -> Computed:
            pairs = None if query.pairs is None else tuple(query.pairs[i] for i in at)
            return await self._run(
                info,
                await self.rows.classify(info, replace(query, texts=tuple(query.texts[i] for i in at), pairs=pairs)),
            )

        keys = self.cache.keys(info.served_model_name, classify_context(query), classify_items(query))
        answered = await self.cache.answer(info.served_model_name, keys, len(query.texts), compute)
        current_trace().usage_tokens = answered.tokens
        return Classified(
            query,
            info,
            activate(np.stack(answered.outputs), query.activation or info.activation),
            answered.tokens,
            answered.cached_tokens,
        )

    async def tokenize(self, query: TokenizeQuery) -> Tokens:
        """Each text's tokens, through the model's prompt named in the query."""
        tokenizer = await self._tokenizer(query.model)
        check_tokenize(query, self.config)
        prompt = tokenizer.prompt(query.prompt_name)
        return Tokens(query, [tokenizer.tokens(prompt + text, query.add_special_tokens) for text in query.texts])

    async def decode(self, query: DecodeQuery) -> list[str]:
        tokenizer = await self._tokenizer(query.model)
        check_decode(query, self.config)
        return tokenizer.decode([list(ids) for ids in query.ids], query.skip_special_tokens)

    async def _tokenizer(self, requested: str | None) -> TextTokenizer:
        """The tokenizer of the named text model, or without a name of the first one servable."""
        return self.preprocessors.tokenizer(await self.served.text_model(requested))

    def kind_spec(self, requested: str | None) -> KindSpec | None:
        """The kind of the named model, or of the first configured one (`RequestModels.kind_spec`)."""
        return self.served.kind_spec(requested)


def _picked(query: EmbedQuery, at: list[int]) -> EmbedQuery:
    """The query with only the inputs at these positions (those the cache missed)."""
    if len(at) == len(query.items):
        return query
    return replace(query, items=tuple(query.items[i] for i in at))
