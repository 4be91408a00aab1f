"""Text -> token ids, exactly as the checkpoint's sentence-transformers pipeline would tokenize.

Runs in the gateway so usage is a true token count and over-long input is truncated before queuing.
Imports no torch: the gateway process stays small. The encode paths are separate pieces over one shared
tokenizer: single texts and token ids (`single_texts.py`), cross-encoder pairs (`cross_pairs.py`) and a causal-LM
reranker's chat pairs (`chat_pairs.py`), all in models/preprocessing/.
"""

from __future__ import annotations

from pathlib import Path

from config.errors import ConfigError, ModelLoadError
from config.settings import ModelConfig
from models.base import Kind, TokenizedText, Truncation
from models.kinds import model_scorer, spec
from models.llm_reranker import causal_rerank_format
from models.long_inputs import LongInputSettings
from models.media import MediaLimits
from models.preprocessing.chat_pairs import ChatPairs
from models.preprocessing.colbert_texts import ColbertSettings, ColbertTexts
from models.preprocessing.cross_pairs import CrossEncoderPairs, Encoded
from models.preprocessing.fast_tokenizer import FastTokenizer, load_fast_tokenizer
from models.preprocessing.single_texts import DocumentTokens, SingleTexts, Token
from models.preprocessing.text_settings import TextSettings, declares_chat_input, read_text_settings

PROMPT_LENGTHS_KEPT = 1024


class TextTokenizer:
    """The `Preprocessor` of text models: their prompts, and each kind of input to token ids. Safe to call
    from several threads at once."""

    def __init__(self, folder: Path, cfg: ModelConfig, kind: Kind = "embed") -> None:
        template = load_fast_tokenizer(folder, cfg)
        self.spec = spec(kind)
        self.settings: TextSettings = read_text_settings(folder, cfg, template.model_max_length)
        colbert = ColbertSettings.read(folder) if spec(kind).encodes_roles else None
        self.max_input_tokens = self.settings.max_seq_length if colbert is None else colbert.longest
        self._tokenizer = FastTokenizer(template, self.max_input_tokens, self.settings.do_lower_case)
        self._texts = SingleTexts(self._tokenizer, cfg.allow_token_ids)
        self._roles = None if colbert is None else ColbertTexts(self._texts, template, colbert)
        self._cross_pairs = CrossEncoderPairs(self._tokenizer)
        self._prompt_lengths: dict[str, int] = {}
        self.long_inputs = _long_input_settings(cfg, self.max_input_tokens, sum(map(len, self._texts.frame)))
        if "embed" in spec(kind).capabilities and declares_chat_input(folder):
            raise ModelLoadError(
                f"'{cfg.model_id}' declares chat-message input (modality_config in sentence_bert_config.json), "
                "which sentence-transformers renders with the chat template; Embento embeds text as text and "
                "would not match it. Remove 'message' from that modality_config to serve it as text."
            )
        causal = causal_rerank_format(folder, cfg) if model_scorer(folder, kind) == "causal-lm" else None
        # A reranker's (query, document) pairs: rendered with the chat template for a causal LM.
        self._rerank_pairs: CrossEncoderPairs | ChatPairs = (
            self._cross_pairs if causal is None else ChatPairs(self._tokenizer, causal.chat_template, cfg.model_id)
        )

    def warmup_rows(self, model: str) -> list[TokenizedText]:
        """A text (or a pair, for a reranker); for a model with several representations, one more asking all."""
        if self.spec.scores_pairs:
            return TokenizedText.rows(model, *self.encode_pairs("warm-up", ["warm-up"]))
        rows = TokenizedText.rows(model, self.encode_texts(["warm-up"]))
        if len(self.spec.representations) > 1:
            rows += TokenizedText.rows(model, self.encode_texts(["warm-up"]), representations=self.spec.representations)
        return rows

    def calibration_rows(self, model: str, texts: list[str], limits: MediaLimits) -> list[TokenizedText]:
        return TokenizedText.rows(model, self.encode_texts(texts, self.prompt(None)))

    def prompt(
        self, name: str | None, instruction: str | None = None, input_type: str | None = None, task: str | None = None
    ) -> str:
        """The prefix of the prompt a request asks for (`TextSettings.request_prompt`)."""
        return self.settings.request_prompt(name, instruction, input_type, task)

    def prompt_length(self, prompt: str) -> int:
        """The leading tokens a prompt makes, its special tokens included and a closing one (EOS, SEP) not:
        what sentence-transformers leaves out of a pooling with `include_prompt: false`."""
        if prompt not in self._prompt_lengths:
            if len(self._prompt_lengths) >= PROMPT_LENGTHS_KEPT:  # instructions are free text: bounded
                self._prompt_lengths.clear()
            ids = self.encode_texts([prompt])[0]
            closing = 1 if ids and ids[-1] in self._tokenizer.get().all_special_ids else 0
            self._prompt_lengths[prompt] = len(ids) - closing
        return self._prompt_lengths[prompt]

    def encode_texts(
        self, texts: list[str], prompt: str = "", truncation: Truncation = Truncation()
    ) -> list[list[int]]:
        return self._texts.encode(texts, prompt, truncation)

    def encode_roles(
        self, texts: list[str], is_query: bool, prompt: str = "", truncation: Truncation = Truncation()
    ) -> tuple[list[list[int]], list[int]]:
        """A model that encodes queries and documents apart (ColBERT): each text's ids and its trailing query
        expansion tokens."""
        assert self._roles is not None, "only for kinds that encode roles"
        return self._roles.encode(texts, is_query, prompt, truncation)

    def encode_ids(self, inputs: list[list[int]], truncation: Truncation = Truncation()) -> list[list[int]]:
        """Token-id input, with or without the special tokens; framed and truncated like text."""
        return self._texts.encode_ids(inputs, truncation)

    def encode_pairs(
        self, query: str, documents: list[str], instruction: str | None = None, truncation: Truncation = Truncation()
    ) -> Encoded:
        """(query, document) pairs for a reranker: the query is kept whole, documents are cut to fit."""
        return self._rerank_pairs.encode(query, documents, instruction, truncation)

    def encode_pair_list(
        self, firsts: list[str], seconds: list[str | None], truncation: Truncation = Truncation()
    ) -> Encoded:
        """Texts and text pairs for a cross-encoding classifier (TEI's /predict)."""
        return self._cross_pairs.encode_list(firsts, seconds, truncation)

    def limit(self, truncation: Truncation) -> int:
        """The most tokens an input keeps: the model's limit, or the request's lower `max_tokens`."""
        return self._tokenizer.limit(truncation)

    @property
    def frame(self) -> tuple[list[int], list[int]]:
        """The special tokens before and after a single text."""
        return self._texts.frame

    def content(self, text: str) -> list[int]:
        """A text's token ids without special tokens, untruncated (the windows of `long_input: mean`)."""
        return self._texts.content(text)

    def document(self, text: str) -> DocumentTokens:
        """A whole document's tokens with their character offsets, untruncated (late chunking)."""
        return self._texts.document(text)

    def count_tokens(self, text: str) -> int:
        """Untruncated length without special tokens."""
        return self._tokenizer.count_tokens(text)

    def tokens(self, text: str, add_special_tokens: bool = True) -> list[Token]:
        """How the model sees a text (TEI's /tokenize)."""
        return self._texts.tokens(text, add_special_tokens)

    def decode(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        return self._texts.decode(ids, skip_special_tokens)


def _long_input_settings(cfg: ModelConfig, limit: int, specials: int) -> LongInputSettings:
    """The model's settings for over-long input, checked against its limit: each window must hold new tokens."""
    if cfg.chunk_overlap >= limit - specials:
        raise ConfigError(
            f"chunk_overlap of model '{cfg.served_model_name}' is {cfg.chunk_overlap}; its windows "
            f"hold {limit - specials} tokens besides special tokens, so it must be less"
        )
    if cfg.late_chunking_overlap is not None and cfg.late_chunking_overlap >= limit:
        raise ConfigError(
            f"late_chunking_overlap of model '{cfg.served_model_name}' is {cfg.late_chunking_overlap}; "
            f"it must be less than its limit of {limit} tokens"
        )
    return LongInputSettings(cfg.chunk_overlap, cfg.late_chunking_overlap, cfg.max_embed_len)
