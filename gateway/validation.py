"""Every check of a request, in one place: one per operation, run by the engine on the query and the chosen model
before any work is done; and at the end, the few that need token counts, called where those are known (a long
input's planning, the call to the model service). The adapters only translate: a body they cannot turn into a
query (fields that contradict each other) is all they refuse.

Every error names the wire field it is about (`param`): the query carries those names, so an adapter's own
field names (`input`, `inputs`, `texts`, `embedding_types`) reach the client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import cast

from config.errors import InvalidRequest
from config.settings import EmbentoConfig
from gateway.queries import (
    AutoChunking,
    ClassifyQuery,
    ContextQuery,
    DecodeQuery,
    EmbedQuery,
    InputType,
    LongInput,
    RankQuery,
    TokenizeQuery,
)
from gateway.representations import score_mode
from gateway.routing import check_modalities
from models.adapters import named_tasks, served_task, task_for_input_type
from models.base import ModelInfo
from models.kinds import Output
from models.quantization import PRECISIONS, Quantizer

# A JSON float as Python writes a float32's value (up to 17 significant digits, sign, point, exponent) and a
# separator; base64 spends 16/3 bytes on one.
JSON_FLOAT_BYTES = 22
BASE64_FLOAT_BYTES = 16 / 3
EMPTY_ITEM = "{where} is empty"
EMPTY_INPUT = EMPTY_ITEM + "; every input needs at least one character or token"
Where = Callable[[int], str]  # an input's place in the body, by its index: `input[3]`, `inputs.sentences[0]`
# Where a model of each output shape is answered, for the error of a route that has no room for it.
ROUTES_FOR_SHAPE: dict[Output, str] = {
    "dense": "/v1/embeddings",
    "sparse": "/embed_sparse or /v1/embeddings",
    "multi-vector": "/v1/embeddings or /embed",
}


def check_texts(
    texts: Sequence[str | Sequence[int]],
    param: str,
    max_items: int,
    max_chars: int | None,
    empty_item: str | None = EMPTY_ITEM,
    where: Where | None = None,
) -> None:
    """A list of inputs: some, at most `max_items`, none empty (unless `empty_item` is None), and no text over
    `max_chars` characters (token-id lists pass; None: no length bound). `where` names an input's place in the
    body (`param[i]` unless given)."""
    if not texts:
        raise InvalidRequest(f"{param} must not be empty", param=param)
    if len(texts) > max_items:
        raise InvalidRequest(f"{param} holds {len(texts)} items; at most {max_items} are allowed", param=param)
    empty = next((i for i, text in enumerate(texts) if len(text) == 0), None)
    if empty_item is not None and empty is not None:
        raise InvalidRequest(empty_item.format(where=_places(param, where)(empty)), param=param)
    if max_chars is not None:
        check_lengths(texts, param, max_chars, where)


def check_lengths(
    texts: Sequence[str | Sequence[int] | None], param: str, max_chars: int, where: Where | None = None
) -> None:
    """No text over `max_chars` characters; other entries (token ids, None) pass."""
    long = ((i, len(text)) for i, text in enumerate(texts) if isinstance(text, str) and len(text) > max_chars)
    if (found := next(long, None)) is not None:
        too_long, length = found
        raise InvalidRequest(
            f"{_places(param, where)(too_long)} has {length} characters; at most {max_chars} are allowed", param=param
        )


def _places(param: str, where: Where | None) -> Where:
    return where or (lambda index: f"{param}[{index}]")


def check_length(text: str | None, param: str, max_chars: int) -> None:
    if text is not None and len(text) > max_chars:
        raise InvalidRequest(f"{param} has {len(text)} characters; at most {max_chars} are allowed", param=param)


# Embed
def check_embed(
    query: EmbedQuery,
    info: ModelInfo,
    limits: EmbentoConfig,
    quantizer: Quantizer | None,
    served: Mapping[str, ModelInfo],
) -> None:
    """The output the query asks for, its inputs, and the controls that apply to some kinds of model only."""
    check_output_types(query, info, quantizer)
    _check_representations(query, info)
    items, param, where = query.items, query.items_param, query.item_param
    check_texts([item.value for item in items], param, limits.max_client_batch_size, None, EMPTY_INPUT, where)
    _check_mixed_inputs(query, info)
    parts = [part for item in items for part in item.all_parts]
    media = sum(part.modality != "text" for part in parts)
    if media > limits.max_media_items:
        raise InvalidRequest(
            f"{param} holds {media} images or audio clips; at most {limits.max_media_items} are allowed", param=param
        )
    _check_part_lengths(query, limits.max_item_chars)
    check_length(query.instruction, "instruction", limits.max_item_chars)
    if not info.spec.takes_token_ids and any(isinstance(item.value, list) for item in items):
        raise InvalidRequest(f"model '{info.served_model_name}' takes text, not token ids", param=param)
    _check_dimensions(query, info)
    if quantizer is not None and any(t in ("int8", "uint8") for t in query.output_types):
        quantizer.check_features(query.dimensions or info.dimension, query.dimensions_param)  # configured ones
    _check_text_controls(query, info)
    check_modalities(served, info, {part.modality for part in parts})
    if query.long_input in (LongInput.MEAN, LongInput.LATE_CHUNKING):
        _check_long_input(query, info)


def with_task(query: EmbedQuery, info: ModelInfo) -> EmbedQuery:
    """The query with the task adapter its rows run through: the one `task` names, else the one Cohere's (or
    Voyage's) `input_type` names (`models.adapters`). Refused: a task the model does not have (naming those it
    has), a task for a model without adapters, and no task for a model with them (no checkpoint declares a
    default task in its files: a vector from the wrong adapter, or from none, would be wrong in silence)."""
    name = info.served_model_name
    if not info.tasks:
        if query.task is not None:
            which = "has" if info.spec.takes_tasks else f"is a {info.kind} model, with"
            which += " no task adapters"
            raise InvalidRequest(f"model '{name}' {which}; task applies to models that have them", param="task")
        return query
    valid = named_tasks(info.tasks)
    if query.task is None:
        task = task_for_input_type(info.tasks, query.input_type)
        if task is None:
            named = f"input_type '{query.input_type}' names none of them; " if query.input_type else ""
            raise InvalidRequest(
                f"model '{name}' embeds through a task adapter: {named}give task, one of {valid}", param="task"
            )
        return replace(query, task=task)
    served = served_task(info.tasks, query.task)
    if served is None:
        raise InvalidRequest(f"unknown task '{query.task[:64]}' for model '{name}'; valid tasks: {valid}", param="task")
    adapter, input_type = served
    if input_type is not None and query.input_type not in (None, input_type):
        raise InvalidRequest(
            f"task '{query.task}' embeds as {input_type}; input_type '{query.input_type}' contradicts it",
            param="input_type",
        )
    return replace(query, task=adapter, input_type=cast(InputType | None, input_type or query.input_type))


def _check_mixed_inputs(query: EmbedQuery, info: ModelInfo) -> None:
    """Text and images in one input make one vector only for a model that reads them together."""
    if info.spec.mixed_inputs:
        return
    for index, item in enumerate(query.items):
        if item.parts:
            raise InvalidRequest(
                f"{query.item_param(index)} holds {len(item.parts)} parts; model '{info.served_model_name}' is a "
                f"{info.kind} model and embeds one text or one image per input",
                param=query.items_param,
            )


def _check_part_lengths(query: EmbedQuery, max_chars: int) -> None:
    """No text, nor text part of a mixed input, over `max_chars` characters; named by the input that holds it."""
    longest = [
        max(
            (part.value for part in item.all_parts if isinstance(part.value, str) and part.modality == "text"),
            key=len,
            default=None,
        )
        for item in query.items
    ]
    check_lengths(longest, query.items_param, max_chars, query.item_param)


def _check_long_input(query: EmbedQuery, info: ModelInfo) -> None:
    """`long_input: mean` and late chunking pool a text embedder's token states: text only, and not sparse or
    multi-vector models, whose outputs have no such mean."""
    late = query.long_input is LongInput.LATE_CHUNKING
    field = "late_chunking" if late else "long_input"
    asked = "late_chunking" if late else "long_input 'mean'"
    if not info.spec.long_inputs:
        raise InvalidRequest(
            f"model '{info.served_model_name}' is a {info.kind} model; {asked} applies to dense text embedders. "
            "It accepts long_input 'truncate' (the default) or 'error'",
            param=field,
        )
    if any(not isinstance(item.value, str) for item in query.items):
        raise InvalidRequest(f"{asked} takes text, not token ids", param=query.items_param)


def check_context(query: ContextQuery, info: ModelInfo) -> None:
    """Documents of chunks, or with auto-chunking one text each. That the overlap is less than the chunk size
    is checked where the size is known (`LongTexts.auto_chunked`: it defaults to the model's window)."""
    _check_long_input(replace(query.embed, long_input=LongInput.LATE_CHUNKING), info)
    chunking = query.auto_chunking
    if chunking is None:
        return
    if chunking.size is not None and chunking.size < 1:
        raise InvalidRequest(
            f"{chunking.size_param} must be at least 1, got {chunking.size}", param=chunking.size_param
        )
    if chunking.overlap < 0:
        raise InvalidRequest(
            f"{chunking.overlap_param} must be at least 0, got {chunking.overlap}", param=chunking.overlap_param
        )
    check_one_text_each(query.document_sizes, query.embed.items_param, "with auto-chunking each document is one string")


def check_one_text_each(sizes: Sequence[int], param: str, rule: str) -> None:
    """Each of the wire's inner lists holds one text (`rule` says why): an auto-chunked document, Voyage's query."""
    several = next((i for i, size in enumerate(sizes) if size != 1), None)
    if several is not None:
        raise InvalidRequest(f"{rule}; {param}[{several}] holds {sizes[several]}", param=param)


def check_output_types(query: EmbedQuery, info: ModelInfo, quantizer: Quantizer | None) -> None:
    """Quantized and base64 output need one dense vector per input; int8/uint8 need the model's scale; a
    wire format answers only the output shapes it has room for (`query.shapes`)."""
    name, output_types, param = info.served_model_name, query.output_types, query.output_param
    quantized = [t for t in output_types if t in PRECISIONS]
    shape = info.spec.output
    if quantized and shape != "dense":
        raise InvalidRequest(
            f"model '{name}' is {shape}: {quantized[0]} output applies to dense single vectors", param=param
        )
    if shape == "sparse" and "base64" in output_types:
        raise InvalidRequest(
            f"model '{name}' is sparse: its embeddings are indices and values, which have no base64 encoding",
            param=param,
        )
    if shape not in query.shapes:
        raise InvalidRequest(
            f"model '{name}' is {shape}, which this route cannot answer; use {ROUTES_FOR_SHAPE[shape]}", param="model"
        )
    if any(t in ("int8", "uint8") for t in quantized) and quantizer is None:
        raise InvalidRequest(
            f"model '{name}' has no int8/uint8 scale (its calibration failed; see the log)", param=param
        )


def _check_dimensions(query: EmbedQuery, info: ModelInfo) -> None:
    """Matryoshka truncation applies to dense vectors only."""
    dimensions, asked, name = query.dimensions, query.representations, info.served_model_name
    field = query.dimensions_param
    if dimensions is None:
        return
    if asked is not None and "dense" not in asked:
        raise InvalidRequest(
            f"{field} applies to dense output; {query.representations_param} {list(asked)} asks for none", param=field
        )
    if asked is None and info.sparse:
        raise InvalidRequest(f"model '{name}' is sparse: {field} does not apply (use max_active_dims)", param=field)
    if asked is None and info.multi_vector:
        raise InvalidRequest(f"model '{name}' returns one vector per token; {field} does not apply", param=field)
    if not 1 <= dimensions <= info.dimension:
        raise InvalidRequest(
            f"{field} must be between 1 and {info.dimension} for model '{name}', got {dimensions}", param=field
        )


def _check_representations(query: EmbedQuery, info: ModelInfo) -> None:
    """`output_types`: some of the model's representations, and encodings that apply to them."""
    asked, param = query.representations, query.representations_param
    if asked is None:
        return
    served = list(info.spec.representations)
    if not asked:
        raise InvalidRequest(
            f"{param} must not be empty; model '{info.served_model_name}' answers {served}", param=param
        )
    unknown = next((name for name in asked if name not in served), None)
    if unknown is not None:
        raise InvalidRequest(
            f"model '{info.served_model_name}' answers {param} {served}; it has no '{unknown}' output", param=param
        )
    quantized = [t for t in query.output_types if t in PRECISIONS]
    if quantized and "colbert" in asked:
        raise InvalidRequest(
            f"{quantized[0]} output applies to dense vectors; multi-vector (colbert) output is float or base64",
            param=query.output_param,
        )


def check_response_size(query: EmbedQuery, info: ModelInfo, tokens: int, max_bytes: int) -> None:
    """Refuses, before any work, an answer whose vectors would pass `max_response_bytes`: one vector per token
    (multi-vector output) adds up fast. Counted as the JSON (or base64) the vectors become, one per input for
    dense output and one per token (of `tokens`, the inputs') for multi-vector output."""
    asked = query.representations or info.spec.representations[:1]
    per_float = BASE64_FLOAT_BYTES if "base64" in query.output_types else JSON_FLOAT_BYTES
    floats = 0
    if "dense" in asked:
        floats += len(query.items) * (query.dimensions or info.dimension)
    if "colbert" in asked:
        floats += tokens * info.dimension
    size = int(floats * per_float)
    if size > max_bytes:
        raise InvalidRequest(
            f"the answer would hold about {size / 1e6:.0f} MB of vectors, over max_response_bytes "
            f"({max_bytes / 1e6:.0f} MB); send fewer or shorter inputs per request"
            f"{', or ask for base64' if per_float == JSON_FLOAT_BYTES else ''}",
            param=query.items_param,
        )


def _check_text_controls(query: EmbedQuery, info: ModelInfo) -> None:
    """The fields that apply to some kinds of model only."""
    name, spec = info.served_model_name, info.spec
    as_is = query.normalize is info.normalized  # what the model gives anyway: asking for it is no error
    if query.normalize is not None and not spec.normalize_control and not as_is:
        raise InvalidRequest(
            f"normalize applies to dense text embedders; model '{name}' is a {info.kind} model", param="normalize"
        )
    max_tokens = query.truncation.max_tokens
    if max_tokens is not None and max_tokens < 1:
        raise InvalidRequest(f"max_tokens must be at least 1, got {max_tokens}", param="max_tokens")
    sparse = info.sparse if query.representations is None else "sparse" in query.representations
    if query.max_active_dims is not None and not sparse:
        raise InvalidRequest(
            f"max_active_dims applies to sparse output; model '{name}' answers "
            f"{'dense' if query.representations is None else list(query.representations)} here",
            param="max_active_dims",
        )
    if query.max_active_dims is not None and query.max_active_dims < 1:
        raise InvalidRequest(
            f"max_active_dims must be at least 1, got {query.max_active_dims}", param="max_active_dims"
        )
    if query.instruction is not None and not spec.takes_instruction:
        raise InvalidRequest(
            f"instruction applies to text embedders; model '{name}' is a {info.kind} model", param="instruction"
        )


# Rank, classify, tokenize, decode
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


def check_classify(query: ClassifyQuery, limits: EmbentoConfig) -> None:
    check_texts(query.texts, query.texts_param, limits.max_client_batch_size, limits.max_item_chars)
    if query.pairs is not None:
        check_lengths(query.pairs, query.texts_param, limits.max_item_chars)


def check_tokenize(query: TokenizeQuery, limits: EmbentoConfig) -> None:
    check_texts(query.texts, query.texts_param, limits.max_client_batch_size, limits.max_item_chars)


def check_decode(query: DecodeQuery, limits: EmbentoConfig) -> None:
    check_texts(query.ids, "ids", limits.max_client_batch_size, None, empty_item=None)


# After tokenizing: the checks that need token counts, called where those are known (the rows' planning, the call).
def check_request_tokens(tokens: int, most: int) -> None:
    """The whole request's tokens: no one field is at fault, so none is named (every family's inputs differ)."""
    if tokens > most:
        raise InvalidRequest(f"the request holds {tokens} tokens after truncation; at most {most} are allowed")


def check_embed_length(where: str, tokens: int, what: str, most: int, param: str) -> None:
    """A long input or late-chunked document within `max_embed_len`."""
    if tokens > most:
        raise InvalidRequest(f"{where}: the {what} is {tokens} tokens; max_embed_len is {most}", param=param)


def check_window_room(where: str, window: int, width: int, overlap: int, param: str) -> None:
    """`long_input: mean`: a window holds more text tokens than windows share."""
    if width <= overlap:
        raise InvalidRequest(
            f"{where}: a window of {window} tokens holds {max(width, 0)} after special tokens "
            f"and the prompt, not more than chunk_overlap ({overlap})",
            param=param,
        )


def check_chunk_overlap(chunking: AutoChunking, size: int) -> None:
    """Auto-chunking's overlap below the chunk size (the model's window when none is given)."""
    if chunking.overlap >= size:
        raise InvalidRequest(
            f"{chunking.overlap_param} ({chunking.overlap}) must be less than the chunk size ({size})",
            param=chunking.overlap_param,
        )


def check_chunks_have_tokens(where: str, empty: list[int], param: str) -> None:
    """Late chunking: every chunk holds a token (the indices of those that hold none, ascending)."""
    if empty:
        raise InvalidRequest(f"{where}: chunk {empty[0]} has no tokens (only whitespace?)", param=param)
