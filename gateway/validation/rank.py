"""The entry point of rerank: the query and documents, and the score modes of models with several representations."""

from __future__ import annotations

from config.errors import InvalidRequest
from config.settings import EmbentoConfig
from gateway.queries import RankQuery
from gateway.representations import score_mode
from gateway.validation.texts import check_length, check_lengths, check_texts
from models.base import ModelInfo


def check_rank(query: RankQuery, info: ModelInfo, limits: EmbentoConfig) -> None:
    """A query and documents: texts bounded by `max_item_chars`, or for media models images (bounded by
    `max_item_bytes` once fetched), at most `max_media_items` of them."""
    if not query.query:
        raise InvalidRequest("query must not be empty", param="query")
    check_length(query.query, "query", limits.max_item_chars)
    check_length(query.instruction, "instruction", limits.max_item_chars)
    media = info.spec.takes_media
    if query.image_documents and not media:
        raise InvalidRequest(
            f"{query.documents_param}[{query.image_documents[0]}] is an image; model '{info.served_model_name}' is a "
            f"{info.kind} model and ranks text documents",
            param=query.documents_param,
        )
    max_documents = limits.max_media_items if media else limits.max_client_batch_size
    check_texts(query.documents, query.documents_param, max_documents, None, empty_item=None)
    if query.top_n is not None and query.top_n < 1:
        raise InvalidRequest(f"top_n must be at least 1, got {query.top_n}", param="top_n")
    if not media:
        check_lengths(query.documents, query.documents_param, limits.max_item_chars)
    if not info.spec.scores_pairs and query.instruction is not None:
        raise InvalidRequest(f"model '{info.served_model_name}' takes no instruction", param="instruction")
    _check_score_mode(query, info)


def _check_score_mode(query: RankQuery, info: ModelInfo) -> None:
    """`score_mode` and `weights` for models with several representations (BGE-M3)."""
    modes, name = list(info.spec.score_modes), info.served_model_name
    if query.score_mode is not None and not modes:
        raise InvalidRequest(
            f"model '{name}' ranks one way; score_mode applies to models with several "
            "representations (BGE-M3: hybrid, dense, sparse, colbert)",
            param="score_mode",
        )
    if query.score_mode is not None and query.score_mode not in modes:
        raise InvalidRequest(
            f"model '{name}' has no score_mode '{query.score_mode}'; it accepts {modes}", param="score_mode"
        )
    if query.weights is None:
        return
    if score_mode(query, info) != "hybrid":
        raise InvalidRequest(
            "weights apply to score_mode 'hybrid' of models with several representations", param="weights"
        )
    count = len(info.spec.representations)
    if len(query.weights) != count or min(query.weights) < 0 or sum(query.weights) <= 0:
        raise InvalidRequest(
            f"weights must be {count} numbers, one per representation "
            f"{list(info.spec.representations)}, none negative and not all zero; got "
            f"{list(query.weights)}",
            param="weights",
        )
