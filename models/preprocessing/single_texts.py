"""Texts and token ids, one sequence each: the input of embedders and classifiers, and TEI's /tokenize and
/decode.

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): whether the
checkpoint takes token ids (`allow_token_ids`), and its vocabulary, are the tokenizer's to know."""

from __future__ import annotations

from dataclasses import dataclass

from config.errors import InvalidInput, InvalidRequest
from models.base import Truncation
from models.preprocessing.fast_tokenizer import FastTokenizer

TIKTOKEN_HINT = (
    "Token ids must come from this model's own tokenizer. LangChain's OpenAIEmbeddings sends tiktoken "
    "(cl100k_base) ids by default: create it with check_embedding_ctx_length=False to send text."
)


@dataclass(frozen=True)
class DocumentTokens:
    """A text's token ids, each token's character span in `text`, and which tokens are special."""

    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    special: list[bool]


@dataclass(frozen=True)
class Token:
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class SingleTexts:
    def __init__(self, tokenizer: FastTokenizer, allow_token_ids: bool) -> None:
        self._tokenizer = tokenizer
        self._allow_token_ids = allow_token_ids
        self._vocab_size = len(tokenizer.template)
        self._prefix, self._suffix = self._special_token_frame()

    def _special_token_frame(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer's post-processor puts before and after a single sequence (read
        from an encoding: `build_inputs_with_special_tokens` of some fast tokenizers, Qwen2's among them,
        leaves out the EOS their post-processor appends)."""
        backend = self._tokenizer.get().backend_tokenizer
        backend.no_truncation()
        encoding = backend.encode("a", add_special_tokens=True)
        content = [i for i, special in enumerate(encoding.special_tokens_mask) if not special]
        ids = encoding.ids
        if not content:
            return [], []
        return ids[: content[0]], ids[content[-1] + 1 :]

    @property
    def frame(self) -> tuple[list[int], list[int]]:
        """The special tokens before and after a single sequence."""
        return self._prefix, self._suffix

    def content(self, text: str) -> list[int]:
        """A text's token ids without special tokens, untruncated."""
        backend = self._tokenizer.get().backend_tokenizer
        backend.no_truncation()
        return backend.encode(self._cased(text), add_special_tokens=False).ids

    def document(self, text: str, add_special_tokens: bool = True) -> DocumentTokens:
        """A whole document's tokens, untruncated, with their character offsets in the text as the model sees
        it (lower-cased, for a model that lower-cases)."""
        text = self._cased(text)
        backend = self._tokenizer.get().backend_tokenizer
        backend.no_truncation()
        encoding = backend.encode(text, add_special_tokens=add_special_tokens)
        return DocumentTokens(text, encoding.ids, encoding.offsets, [bool(s) for s in encoding.special_tokens_mask])

    def _cased(self, text: str) -> str:
        return text.lower() if self._tokenizer.lower_case else text

    def encode(self, texts: list[str], prompt: str = "", truncation: Truncation = Truncation()) -> list[list[int]]:
        if prompt:
            texts = [prompt + text for text in texts]
        if self._tokenizer.lower_case:
            texts = [text.lower() for text in texts]
        # The Rust tokenizer directly, set as transformers would set it: its Python wrapper took 37 us per
        # one-sentence request here against 23 us, on the gateway's event loop.
        backend = self._tokenizer.get().backend_tokenizer
        limit = self._tokenizer.limit(truncation)
        if truncation.enabled:
            backend.enable_truncation(limit, direction=self._tokenizer.side(truncation))
        else:
            backend.no_truncation()
        encoded = [encoding.ids for encoding in backend.encode_batch(texts)]
        if not truncation.enabled:
            self._tokenizer.refuse_long(encoded, limit)
        return encoded

    def encode_ids(self, inputs: list[list[int]], truncation: Truncation = Truncation()) -> list[list[int]]:
        """Token-id input, with or without the special tokens; framed and truncated like text."""
        if not self._allow_token_ids:
            raise InvalidRequest(
                f"this model takes text, not token ids (allow_token_ids is false). {TIKTOKEN_HINT}", param="input"
            )
        limit = self._tokenizer.limit(truncation)
        body_limit = limit - len(self._prefix) - len(self._suffix)
        encoded = []
        for index, ids in enumerate(inputs):
            bad = next((i for i in ids if not 0 <= i < self._vocab_size), None)
            if bad is not None:
                raise InvalidInput(
                    index,
                    f"holds token id {bad}, outside this model's vocabulary [0, {self._vocab_size}). {TIKTOKEN_HINT}",
                )
            body = self._strip_frame(ids)
            if truncation.enabled and len(body) > body_limit:
                left = self._tokenizer.side(truncation) == "left"
                body = body[len(body) - body_limit :] if left else body[:body_limit]
            encoded.append(self._prefix + body + self._suffix)
        if not truncation.enabled:
            self._tokenizer.refuse_long(encoded, limit)
        return encoded

    def _strip_frame(self, ids: list[int]) -> list[int]:
        start = len(self._prefix) if self._prefix and ids[: len(self._prefix)] == self._prefix else 0
        end = len(ids) - len(self._suffix) if self._suffix and ids[-len(self._suffix) :] == self._suffix else len(ids)
        return ids[start : max(start, end)]

    def tokens(self, text: str, add_special_tokens: bool = True) -> list[Token]:
        """How the model sees a text (TEI's /tokenize): each token's id, its text, whether it is special, and
        its character offsets in `text` (None for special tokens)."""
        if self._tokenizer.lower_case:
            text = text.lower()
        backend = self._tokenizer.get().backend_tokenizer
        backend.no_truncation()
        encoding = backend.encode(text, add_special_tokens=add_special_tokens)
        return [
            Token(id, piece, True, None, None) if special else Token(id, text[start:stop], False, start, stop)
            for id, piece, special, (start, stop) in zip(
                encoding.ids, encoding.tokens, encoding.special_tokens_mask, encoding.offsets
            )
        ]

    def decode(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        for index, sequence in enumerate(ids):
            bad = next((i for i in sequence if not 0 <= i < self._vocab_size), None)
            if bad is not None:
                raise InvalidRequest(
                    f"ids[{index}] holds token id {bad}, outside this model's vocabulary [0, {self._vocab_size})",
                    param="ids",
                )
        return self._tokenizer.get().backend_tokenizer.decode_batch(ids, skip_special_tokens=skip_special_tokens)
