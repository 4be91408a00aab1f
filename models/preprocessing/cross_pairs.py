"""Text pairs for a cross-encoder (a BERT-like reranker or pair classifier): both texts in one sequence,
cut as sentence-transformers' CrossEncoder cuts them.

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): the query's room
beside a document, and a pair's tokens with truncation off, are known only once tokenized."""

from __future__ import annotations

from config.errors import InvalidInput, InvalidRequest
from models.base import Truncation
from models.preprocessing.fast_tokenizer import FastTokenizer

Encoded = tuple[list[list[int]], list[list[int]] | None]  # token ids, and segment ids where the model takes them


class CrossEncoderPairs:
    def __init__(self, tokenizer: FastTokenizer) -> None:
        self._tokenizer = tokenizer
        self._pair_frame = tokenizer.template.num_special_tokens_to_add(pair=True)
        self._uses_segments = "token_type_ids" in tokenizer.template.model_input_names

    def encode(
        self, query: str, documents: list[str], instruction: str | None = None, truncation: Truncation = Truncation()
    ) -> Encoded:
        """(query, document) pairs for a reranker: the query is kept whole, documents are cut to fit."""
        if instruction is not None:
            raise InvalidRequest(
                "this reranker takes no instruction (only causal-LM rerankers with a chat template do)",
                param="instruction",
            )
        if self._tokenizer.lower_case:
            query, documents = query.lower(), [document.lower() for document in documents]
        max_tokens = self._tokenizer.max_input_tokens
        query_tokens = self._tokenizer.count_tokens(query)
        room = max_tokens - self._pair_frame - query_tokens
        if room < 1:
            raise InvalidRequest(
                f"query is {query_tokens} tokens; with a document it must fit in this model's "
                f"{max_tokens}-token limit, so it can be at most {query_tokens + room - 1} tokens",
                param="query",
            )
        tokenizer = self._tokenizer.get()
        tokenizer.truncation_side = self._tokenizer.side(truncation)  # this thread's copy
        encoded = tokenizer(
            [query] * len(documents),
            documents,
            truncation="only_second" if truncation.enabled else False,
            max_length=max_tokens,
            return_attention_mask=False,
            return_token_type_ids=self._uses_segments,
        )
        if not truncation.enabled:
            longest = max(range(len(documents)), key=lambda i: len(encoded["input_ids"][i]))
            if (length := len(encoded["input_ids"][longest])) > max_tokens:
                raise InvalidInput(
                    longest,
                    f"makes a pair of {length} tokens with the query; this model takes at most {max_tokens} "
                    "(truncate is false)",
                )
        return encoded["input_ids"], encoded["token_type_ids"] if self._uses_segments else None

    def encode_list(
        self, firsts: list[str], seconds: list[str | None], truncation: Truncation = Truncation()
    ) -> Encoded:
        """Texts and text pairs for a pair classifier (TEI's /predict), each pair cut longest first."""
        if self._tokenizer.lower_case:
            firsts = [text.lower() for text in firsts]
            seconds = [None if text is None else text.lower() for text in seconds]
        tokenizer = self._tokenizer.get()
        tokenizer.truncation_side = self._tokenizer.side(truncation)  # this thread's copy
        limit = self._tokenizer.limit(truncation)
        encoded = [
            tokenizer(
                first,
                second,
                truncation=truncation.enabled,
                max_length=limit,
                return_attention_mask=False,
                return_token_type_ids=self._uses_segments,
            )
            for first, second in zip(firsts, seconds)
        ]
        ids = [e["input_ids"] for e in encoded]
        if not truncation.enabled:
            self._tokenizer.refuse_long(ids, limit)
        return ids, [e["token_type_ids"] for e in encoded] if self._uses_segments else None
