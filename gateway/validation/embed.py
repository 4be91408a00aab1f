"""The entry points of embed (`check_embed`) and of late chunking (`check_context`): the output the query asks for
and the model can give, its inputs, its task, and the controls that apply to some kinds of model only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import cast

from config.errors import InvalidRequest
from config.settings import EmbentoConfig
from gateway.queries import ContextQuery, EmbedQuery, InputType, LongInput
from gateway.validation.models import check_modalities
from gateway.validation.texts import EMPTY_INPUT, check_length, check_lengths, check_texts
from models.adapters import named_tasks, served_task, task_for_input_type
from models.base import ModelInfo
from models.kinds import Output
from models.quantization import PRECISIONS, Quantizer

# Where a model of each output shape is answered, for the error of a route that has no room for it.
ROUTES_FOR_SHAPE: dict[Output, str] = {
    "dense": "/v1/embeddings",
    "sparse": "/embed_sparse or /v1/embeddings",
    "multi-vector": "/v1/embeddings or /embed",
}


def check_embed(
    query: EmbedQuery,
    info: ModelInfo,
    limits: EmbentoConfig,
    quantizer: Quantizer | None,
    served: Mapping[str, ModelInfo],
) -> EmbedQuery:
    """Embed's entry point, before any work: the query (`_check_query`), then its task (`with_task`); the query
    with the task adapter its rows run through."""
    _check_query(query, info, limits, quantizer, served)
    return with_task(query, info)


def check_context(
    query: ContextQuery,
    info: ModelInfo,
    limits: EmbentoConfig,
    quantizer: Quantizer | None,
    served: Mapping[str, ModelInfo],
) -> ContextQuery:
    """Late chunking's entry point (`Engine.embed_in_context`), before any work: the query as embed's, its
    documents (`_check_documents`), then its task; the query with the task adapter its rows run through."""
    _check_query(query.embed, info, limits, quantizer, served)
    _check_documents(query, info)
    return replace(query, embed=with_task(query.embed, info))


def _check_query(
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


def _check_documents(query: ContextQuery, info: ModelInfo) -> None:
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
