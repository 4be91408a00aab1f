"""Text -> token ids, exactly as the checkpoint's sentence-transformers pipeline would tokenize.

Runs in the gateway so usage is a true token count and over-long input is truncated before queuing.
Imports no torch: the gateway process stays small.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.settings import ModelConfig
from models.base import Kind, Truncation
from models.chat_pairs import ChatPairs
from models.errors import InvalidRequest, ModelLoadError
from models.kinds import model_scorer, spec
from models.llm_reranker import causal_rerank_format
from models.per_thread import PerThread
from models.text_settings import TextSettings, declares_chat_input, read_text_settings

PROMPT_LENGTHS_KEPT = 1024
TIKTOKEN_HINT = ("Token ids must come from this model's own tokenizer. LangChain's OpenAIEmbeddings sends tiktoken "
                 "(cl100k_base) ids by default: create it with check_embedding_ctx_length=False to send text.")


@dataclass(frozen=True)
class Token:
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class TextTokenizer:
    """The `Preprocessor` of text models. Safe to call from several threads at once."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind = "embed") -> None:
        from transformers import AutoTokenizer

        try:
            self._template = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=cfg.trust_remote_code)
        except Exception as exc:
            raise ModelLoadError(f"cannot load the tokenizer of '{cfg.model_id}': {exc}") from exc
        if not self._template.is_fast:
            raise ModelLoadError(f"'{cfg.model_id}' has no fast tokenizer (tokenizer.json); it is required")
        # `tokenizer.json` may declare padding and truncation (all-MiniLM-L6-v2's pads every text to 128).
        # transformers resets both on each call; a direct call of the Rust tokenizer would apply them, so
        # they go now, before the per-thread copies are made, and each direct call sets its own truncation.
        self._template.backend_tokenizer.no_padding()
        self._template.backend_tokenizer.no_truncation()
        self._per_thread = PerThread(self._template)
        self.settings: TextSettings = read_text_settings(folder, cfg, self._template.model_max_length)
        self.max_input_tokens = self.settings.max_seq_length
        self.vocab_size = len(self._template)
        self.allow_token_ids = cfg.allow_token_ids
        self._prefix, self._suffix = self._special_token_frame()
        self._pair_frame = self._template.num_special_tokens_to_add(pair=True)
        self._uses_segments = "token_type_ids" in self._template.model_input_names
        self._prompt_lengths: dict[str, int] = {}
        if "embed" in spec(kind).capabilities and declares_chat_input(folder):
            raise ModelLoadError(
                f"'{cfg.model_id}' declares chat-message input (modality_config in sentence_bert_config.json), "
                "which sentence-transformers renders with the chat template; Embento embeds text as text and "
                "would not match it. Remove 'message' from that modality_config to serve it as text.")
        causal = causal_rerank_format(folder, cfg) if model_scorer(folder, kind) == "causal-lm" else None
        self._chat = None if causal is None else ChatPairs(self._template, causal.chat_template,
                                                           self.max_input_tokens, cfg.model_id)

    @property
    def _tokenizer(self) -> Any:
        return self._per_thread.get()

    def _special_token_frame(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts before and after a single sequence."""
        marker = next(i for i in range(self.vocab_size) if i not in self._tokenizer.all_special_ids)
        framed = self._tokenizer.build_inputs_with_special_tokens([marker])
        at = framed.index(marker)
        return framed[:at], framed[at + 1 :]

    def prompt(self, name: str | None, instruction: str | None = None, input_type: str | None = None) -> str:
        """The prefix of a named prompt (None: the one for Cohere's `input_type`, else the default one), or of
        a request's own instruction."""
        if name is None and input_type is not None:
            name = self.settings.input_type_prompts.get(input_type)
        if instruction is not None:
            if name is not None:
                raise InvalidRequest("give prompt_name or instruction, not both", param="instruction")
            return self.settings.instruction_prompt(instruction)
        try:
            return self.settings.prompt(name)
        except KeyError:
            known = sorted(self.settings.prompts) or "none"
            raise InvalidRequest(
                f"unknown prompt_name '{name}'; this model has: {known}", param="prompt_name"
            ) from None

    def prompt_length(self, prompt: str) -> int:
        """The leading tokens a prompt makes, its special tokens included and a closing one (EOS, SEP) not:
        what sentence-transformers leaves out of a pooling with `include_prompt: false`."""
        if prompt not in self._prompt_lengths:
            if len(self._prompt_lengths) >= PROMPT_LENGTHS_KEPT:  # instructions are free text: bounded
                self._prompt_lengths.clear()
            ids = self.encode_texts([prompt])[0]
            closing = 1 if ids and ids[-1] in self._tokenizer.all_special_ids else 0
            self._prompt_lengths[prompt] = len(ids) - closing
        return self._prompt_lengths[prompt]

    def encode_texts(self, texts: list[str], prompt: str = "", truncation: Truncation = Truncation()
                     ) -> list[list[int]]:
        if prompt:
            texts = [prompt + text for text in texts]
        if self.settings.do_lower_case:
            texts = [text.lower() for text in texts]
        # The Rust tokenizer directly, set as transformers would set it: its Python wrapper took 37 us per
        # one-sentence request here against 23 us, on the gateway's event loop.
        backend = self._tokenizer.backend_tokenizer
        limit = self._limit(truncation)
        if truncation.enabled:
            side = truncation.side or self._template.truncation_side
            backend.enable_truncation(limit, direction=side)
        else:
            backend.no_truncation()
        encoded = [encoding.ids for encoding in backend.encode_batch(texts)]
        if not truncation.enabled:
            self._refuse_long(encoded, limit)
        return encoded

    def _limit(self, truncation: Truncation) -> int:
        return min(self.max_input_tokens, truncation.max_tokens or self.max_input_tokens)

    def _refuse_long(self, encoded: list[list[int]], limit: int) -> None:
        longest = max(range(len(encoded)), key=lambda i: len(encoded[i]))
        if len(encoded[longest]) > limit:
            allowed = f"this model takes at most {limit}" if limit == self.max_input_tokens else \
                f"max_tokens is {limit}"
            raise InvalidRequest(f"input[{longest}] is {len(encoded[longest])} tokens; {allowed} (truncation is off)",
                                 param="input")

    def encode_pair_list(self, firsts: list[str], seconds: list[str | None], truncation: Truncation = Truncation()
                         ) -> tuple[list[list[int]], list[list[int]] | None]:
        """Texts and text pairs for a cross-encoding classifier (TEI's /predict), each pair cut longest first
        as sentence-transformers' CrossEncoder cuts it."""
        if self.settings.do_lower_case:
            firsts = [text.lower() for text in firsts]
            seconds = [None if text is None else text.lower() for text in seconds]
        tokenizer = self._tokenizer
        tokenizer.truncation_side = truncation.side or self._template.truncation_side  # this thread's copy
        limit = self._limit(truncation)
        encoded = [tokenizer(first, second, truncation=truncation.enabled, max_length=limit,
                             return_attention_mask=False, return_token_type_ids=self._uses_segments)
                   for first, second in zip(firsts, seconds)]
        ids = [e["input_ids"] for e in encoded]
        if not truncation.enabled:
            self._refuse_long(ids, limit)
        return ids, [e["token_type_ids"] for e in encoded] if self._uses_segments else None

    def encode_pairs(self, query: str, documents: list[str], instruction: str | None = None,
                     truncation: Truncation = Truncation()) -> tuple[list[list[int]], list[list[int]] | None]:
        """(query, document) pairs for a cross-encoder: the query is kept whole, documents are cut to fit."""
        if self.settings.do_lower_case:
            query, documents = query.lower(), [document.lower() for document in documents]
        if self._chat is not None:
            if instruction is not None and not self._chat.takes_instruction:
                raise InvalidRequest("this model's chat template has no place for an instruction", param="instruction")
            return self._chat.encode(self._tokenizer, query, documents, instruction, truncation), None
        if instruction is not None:
            raise InvalidRequest("this reranker takes no instruction (only causal-LM rerankers with a chat template "
                                 "do)", param="instruction")
        query_tokens = self.count_tokens(query)
        room = self.max_input_tokens - self._pair_frame - query_tokens
        if room < 1:
            raise InvalidRequest(
                f"query is {query_tokens} tokens; with a document it must fit in this model's "
                f"{self.max_input_tokens}-token limit, so it can be at most {query_tokens + room - 1} tokens",
                param="query",
            )
        tokenizer = self._tokenizer
        tokenizer.truncation_side = truncation.side or self._template.truncation_side  # this thread's copy
        encoded = tokenizer(
            [query] * len(documents),
            documents,
            truncation="only_second" if truncation.enabled else False,
            max_length=self.max_input_tokens,
            return_attention_mask=False,
            return_token_type_ids=self._uses_segments,
        )
        if not truncation.enabled:
            longest = max(range(len(documents)), key=lambda i: len(encoded["input_ids"][i]))
            if (length := len(encoded["input_ids"][longest])) > self.max_input_tokens:
                raise InvalidRequest(f"documents[{longest}] makes a pair of {length} tokens with the query; this "
                                     f"model takes at most {self.max_input_tokens} (truncate is false)",
                                     param="documents")
        return encoded["input_ids"], encoded["token_type_ids"] if self._uses_segments else None

    def count_tokens(self, text: str) -> int:
        """Untruncated length without special tokens, measured on the Rust tokenizer: transformers would
        warn about long text."""
        backend = self._tokenizer.backend_tokenizer
        backend.no_truncation()  # this thread's copy; the next call sets its own truncation again
        return len(backend.encode(text, add_special_tokens=False).ids)

    def encode_ids(self, inputs: list[list[int]], truncation: Truncation = Truncation()) -> list[list[int]]:
        """Token-id input, with or without the special tokens; framed and truncated like text."""
        if not self.allow_token_ids:
            raise InvalidRequest(f"this model takes text, not token ids (allow_token_ids is false). {TIKTOKEN_HINT}",
                                 param="input")
        limit = self._limit(truncation)
        body_limit = limit - len(self._prefix) - len(self._suffix)
        encoded = []
        for index, ids in enumerate(inputs):
            bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
            if bad is not None:
                raise InvalidRequest(
                    f"input[{index}] holds token id {bad}, outside this model's vocabulary [0, {self.vocab_size}). "
                    f"{TIKTOKEN_HINT}", param="input",
                )
            body = self._strip_frame(ids)
            if truncation.enabled and len(body) > body_limit:
                left = (truncation.side or self._template.truncation_side) == "left"
                body = body[len(body) - body_limit:] if left else body[:body_limit]
            encoded.append(self._prefix + body + self._suffix)
        if not truncation.enabled:
            self._refuse_long(encoded, limit)
        return encoded

    def tokens(self, text: str, add_special_tokens: bool = True) -> list[Token]:
        """How the model sees a text (TEI's /tokenize): each token's id, its text, whether it is special, and
        its character offsets in `text` (None for special tokens)."""
        if self.settings.do_lower_case:
            text = text.lower()
        backend = self._tokenizer.backend_tokenizer
        backend.no_truncation()
        encoding = backend.encode(text, add_special_tokens=add_special_tokens)
        return [Token(id, piece, True, None, None) if special else Token(id, text[start:stop], False, start, stop)
                for id, piece, special, (start, stop) in zip(encoding.ids, encoding.tokens,
                                                            encoding.special_tokens_mask, encoding.offsets)]

    def decode(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        for index, sequence in enumerate(ids):
            bad = next((i for i in sequence if not 0 <= i < self.vocab_size), None)
            if bad is not None:
                raise InvalidRequest(f"ids[{index}] holds token id {bad}, outside this model's vocabulary "
                                     f"[0, {self.vocab_size})", param="ids")
        return self._tokenizer.backend_tokenizer.decode_batch(ids, skip_special_tokens=skip_special_tokens)

    def _strip_frame(self, ids: list[int]) -> list[int]:
        start = len(self._prefix) if self._prefix and ids[: len(self._prefix)] == self._prefix else 0
        end = len(ids) - len(self._suffix) if self._suffix and ids[-len(self._suffix) :] == self._suffix else len(ids)
        return ids[start:max(start, end)]
