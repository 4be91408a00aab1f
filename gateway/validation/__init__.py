"""Every check of a request. One entry point per operation, called once by the engine on the query and the chosen
model, before any work is done; the checks that need token counts, called where those are known; and the checks of
a wire body that no query can be made of, called by the adapters as they translate.

Every error names the wire field it is about (`param`): the query carries those names, so an adapter's own field
names (`input`, `inputs`, `texts`, `embedding_types`) reach the client.

The map, by concern (module: what it checks; who calls it, when):

- `bodies.py`: a wire body's fields that contradict each other or leave no input (`check_one_given`,
  `check_long_input_fields`, `check_rerank_fields`, ...), and TEI's root body parsed (`parsed_body`); the adapters
  (`gateway/wire/`), while they make the query.
- `models.py`: the model named or chosen: served and capable (`check_capable`, `check_named`), taking the inputs'
  modalities (`check_modalities`), a text model (`text_model`); `gateway/routing.py` as it chooses, `check_embed`,
  `Preprocessors.tokenizer`.
- `embed.py`: the entry points of embed (`check_embed`) and of late chunking (`check_context`), each returning the
  query with its task (`with_task`); `Engine.embed` and `Engine.embed_in_context`, before any work.
- `rank.py`: the entry point of rerank (`check_rank`: query, documents, `score_mode`, `weights`); `Engine.rank`,
  before any work.
- `texts.py`: a list of inputs (`check_texts`, `check_lengths`), which every entry point uses; the entry points of
  classify, tokenize and decode (`check_classify`, `check_tokenize`, `check_decode`); `Engine.classify`,
  `.tokenize`, `.decode`, before any work.
- `admin.py`: the admin API's bodies (JSON, the `model` an alias is pointed at); `gateway/http/admin.py`.
- `jobs.py`: the Files and Batches requests: an upload's form and size, POST /v1/batches's body, a list's `limit`
  and `order`; `gateway/http/job_routes.py`, before the store is touched. A batch's lines are each checked later as
  their route's request.
- `tokens.py`: the checks that need token counts, where those are known: `check_response_size` in
  `Engine._embed_texts` (the planned rows) and `Engine.embed` (with cached hits); `check_request_tokens` in `Engine`
  on the rows of each call, before `ModelCalls.run`; a long input's `check_embed_length`, `check_window_room`,
  `check_chunk_overlap` and `check_chunks_have_tokens` in `gateway/inputs/long_rows.py`, as its plan is made.

The checks that stay where they are, each module saying why in its docstring:

- `gateway/inputs/fetch.py`: a URL input's address, redirects, status and size are known only while it is fetched.
- `gateway/inputs/media.py`: a data URI's form and size are known only once it is decoded.
- `models/media.py`: an image's or an audio clip's pixels, duration and samples are known only once it is decoded
  (and `models/` imports no gateway module).
- `models/preprocessing/` (`fast_tokenizer.py`, `single_texts.py`, `cross_pairs.py`, `chat_pairs.py`,
  `colbert_texts.py`, `text_settings.py`, `media_processor.py`, `vl_processor.py`): what a tokenizer or processor
  alone knows (token counts with truncation off, the vocabulary, the prompts, the chat template's room); they
  raise `InvalidInput` by position, which `gateway/inputs/rows.py` names by the input's place in the body.
- `models/quantization.py`: the features a configured int8/uint8 scale covers (`Quantizer.check_features`), called
  by `check_embed`.
- `gateway/jobs/store.py`: the stored bytes and queued lines a file or batch would add, and whether the input file
  exists and is a batch's, known only in the transaction that stores the batch; `gateway/served/` (the admin API's
  operations): an alias against the names served now, a model entry added at run time checked as the configuration
  checks one and its checkpoint read.
"""

from gateway.validation.embed import check_context, check_embed, check_one_text_each, with_task
from gateway.validation.rank import check_rank
from gateway.validation.texts import check_classify, check_decode, check_tokenize
from gateway.validation.tokens import (
    check_chunk_overlap,
    check_chunks_have_tokens,
    check_embed_length,
    check_request_tokens,
    check_response_size,
    check_window_room,
)

__all__ = [
    "check_chunk_overlap",
    "check_chunks_have_tokens",
    "check_classify",
    "check_context",
    "check_decode",
    "check_embed",
    "check_embed_length",
    "check_one_text_each",
    "check_rank",
    "check_request_tokens",
    "check_response_size",
    "check_tokenize",
    "check_window_room",
    "with_task",
]
