"""(query, document) pairs for a causal-LM reranker: rendered with its chat template, tokenized, and cut to
fit its limit so that only the document is shortened.

sentence-transformers writes a pair as a `query` and a `document` message (and an instruction as a
`system` message before them), renders it, tokenizes it, cuts it at the limit and puts the template's
closing tokens back, since the score is read at the last position. The same is done here, so token ids
match its own; the query and the template are never cut.

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): whether the
template has a place for an instruction, and a prompt's tokens, are known only once the template is rendered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from config.errors import InvalidInput, InvalidRequest, ModelLoadError
from models.base import Truncation
from models.preprocessing.cross_pairs import Encoded
from models.preprocessing.fast_tokenizer import FastTokenizer

_DOCUMENT_MARK = "\x00document\x00"
_QUERY_MARK = "\x00query\x00"
_INSTRUCTION_MARK = "\x00instruction\x00"


class ChatPairs:
    def __init__(self, tokenizer: FastTokenizer, template: str | None, model_id: str) -> None:
        self._tokenizer = tokenizer
        self._template = template  # None: the tokenizer's own
        self._max_tokens = tokenizer.max_input_tokens
        if template is None and tokenizer.template.chat_template is None:
            raise ModelLoadError(f"'{model_id}' is a causal-LM reranker without a chat template; set chat_template")
        try:
            probe = self._render(tokenizer.template, _QUERY_MARK, _DOCUMENT_MARK, None)
            instructed = self._render(tokenizer.template, _QUERY_MARK, _DOCUMENT_MARK, _INSTRUCTION_MARK)
        except Exception as exc:  # Jinja raises many types
            raise ModelLoadError(f"the chat template of '{model_id}' cannot render a pair: {exc}") from exc
        if probe.count(_DOCUMENT_MARK) != 1 or probe.count(_QUERY_MARK) != 1:
            raise ModelLoadError(
                f"the chat template of '{model_id}' does not write the query and the document "
                "(their 'query' and 'document' messages) into the prompt once each"
            )
        self.takes_instruction = _INSTRUCTION_MARK in instructed

    def _render(self, tokenizer: Any, query: str, document: str, instruction: str | None) -> str:
        messages = [{"role": "query", "content": query}, {"role": "document", "content": document}]
        if instruction is not None:
            messages.insert(0, {"role": "system", "content": instruction})
        return tokenizer.apply_chat_template(messages, chat_template=self._template, tokenize=False)

    def encode(
        self,
        query: str,
        documents: Sequence[str],
        instruction: str | None = None,
        truncation: Truncation = Truncation(),
    ) -> Encoded:
        """One row of token ids per document (and no segment ids)."""
        if instruction is not None and not self.takes_instruction:
            raise InvalidRequest("this model's chat template has no place for an instruction", param="instruction")
        if self._tokenizer.lower_case:
            query, documents = query.lower(), [document.lower() for document in documents]
        tokenizer = self._tokenizer.get()  # this thread's copy
        head, tail = self._render(tokenizer, query, _DOCUMENT_MARK, instruction).split(_DOCUMENT_MARK)
        backend = tokenizer.backend_tokenizer
        backend.no_truncation()
        suffix = self._closing_tokens(backend, head, tail)
        keep = self._max_tokens - len(suffix)
        rows = []
        for index, encoding in enumerate(
            backend.encode_batch([head + d + tail for d in documents], add_special_tokens=False)
        ):
            ids = encoding.ids
            if len(ids) <= self._max_tokens:
                rows.append(ids)
                continue
            if not truncation.enabled:
                raise InvalidInput(
                    index,
                    f"makes a prompt of {len(ids)} tokens with the query and the template; this model takes at most "
                    f"{self._max_tokens} (truncate is false)",
                )
            start = next(i for i, (_, end) in enumerate(encoding.offsets) if end > len(head))
            if keep <= start:
                raise InvalidRequest(
                    f"query makes a prompt of {start + len(suffix)} tokens before any document; with a document it "
                    f"must fit in this model's {self._max_tokens}-token limit",
                    param="query",
                )
            if truncation.side == "left":
                rows.append(ids[:start] + ids[len(ids) - len(suffix) - (keep - start) :])
            else:
                rows.append(ids[:keep] + suffix)
        return rows, None

    @staticmethod
    def _closing_tokens(backend: Any, head: str, tail: str) -> list[int]:
        """The tokens the template writes after the document: those two renders with different documents
        end in alike (sentence-transformers' own way of finding them)."""
        one, other = (
            encoding.ids
            for encoding in backend.encode_batch([head + "0" + tail, head + "1 2 3 4" + tail], add_special_tokens=False)
        )
        common = 0
        while common < min(len(one), len(other)) and one[-1 - common] == other[-1 - common]:
            common += 1
        return one[len(one) - common :]
