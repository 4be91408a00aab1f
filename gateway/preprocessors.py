"""The gateway-side preparation of each served model's inputs, chosen by its kind (`KindSpec.preprocessor`): a
tokenizer for text models, the checkpoint's processor for multimodal ones. Loaded at the gateway's start."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from config.settings import EmbentoConfig, ModelConfig
from models.base import Kind, ModelInfo
from models.errors import InvalidRequest
from models.kinds import spec
from models.media_processor import MediaProcessor
from models.resolve import resolve_model
from models.text_tokenizer import TextTokenizer

# The load-failure policy (`runners.loading.load_models`): each model loaded, and why the others failed.
LoadAll = Callable[[list[ModelConfig], Callable[[ModelConfig], object], bool], tuple[dict, dict[str, str]]]


@dataclass
class Preprocessors:
    """Each served model's tokenizer or media processor, by served name."""

    tokenizers: dict[str, TextTokenizer] = field(default_factory=dict)
    processors: dict[str, MediaProcessor] = field(default_factory=dict)

    def tokenizer(self, info: ModelInfo) -> TextTokenizer:
        if info.spec.preprocessor != "text":
            raise InvalidRequest(f"model '{info.served_model_name}' is not a text model", param="model")
        return self.tokenizers[info.served_model_name]

    def processor(self, info: ModelInfo) -> MediaProcessor:
        return self.processors[info.served_model_name]


def load_preprocessors(
    config: EmbentoConfig, kinds: Mapping[str, Kind], load_all: LoadAll
) -> tuple[Preprocessors, dict[str, str]]:
    """Every configured model's preprocessor, and why those that failed to load did (under `load_all`'s
    policy: stop the server, or with `allow_partial` serve the others)."""
    loaded = Preprocessors()

    def load(cfg: ModelConfig) -> None:
        name, folder = cfg.served_model_name, resolve_model(cfg.model_id, cfg.revision)
        kind = kinds[name]
        if spec(kind).preprocessor == "text":
            loaded.tokenizers[name] = TextTokenizer(folder, cfg, kind)
        else:
            loaded.processors[name] = MediaProcessor(folder, cfg, kind)

    _, failed = load_all(config.models, load, config.allow_partial)
    return loaded, failed
